"""Where an import spends its time, read from CPython's ``-X importtime``.

The import is timed in a fresh interpreter, never in ppy's own process:
core never imports jax, and a process that had already imported part of
what jax needs would time only the rest. The fresh interpreter is the one
ppy runs in (``sys.executable``), so it sees the same installed packages a
``ppy run`` does.

CPython writes one line to stderr as each module's import finishes::

    import time: self [us] | cumulative | imported package
    import time:       163 |        163 |   _io
    import time:      3034 |    1777181 | jax

``self`` is the module's own execution, ``cumulative`` adds the imports it
caused; the name's indent (two spaces a level) says how deeply the import was
nested, and a module's line comes after the lines of the imports it caused.
So the lines of one top-level import are its own line and the nested lines
right before it, and summing ``self`` over every module of a top-level
package says how long that package's code ran, wherever it was imported from.

With ``start_backend``, the same interpreter then calls ``jax.devices()``,
which starts jax's backend: it loads the platform's plugin (libtpu on a TPU)
and opens the device, which a TPU v5e takes 6 to 11 s to do and every process
that computes with jax pays. A forked child cannot inherit an open device, so
no warm start takes it away. What that call imports finishes after jax's own
line; those lines are the backend start's (``BackendStart.imports``). The
interpreter ends right after, so it holds the device for no longer than that.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "DEFAULT_TIMEOUT",
    "BackendStart",
    "ImportProfile",
    "ModuleImport",
    "PackageTime",
    "by_package",
    "imports_of",
    "measure",
    "parse",
]

#: Seconds a measured import may take before it is given up on. ``import
#: jax`` takes one to two seconds; a minute is a machine in trouble.
DEFAULT_TIMEOUT = 60.0

_LINE = re.compile(r"import time:\s*(\d+)\s*\|\s*(\d+)\s*\|( *)(\S+)\s*")
_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


@dataclass(frozen=True)
class ModuleImport:
    """One module's line of ``-X importtime`` output."""

    name: str
    self_us: int
    cumulative_us: int
    #: How deeply the import was nested: 0 for one the program asked for.
    depth: int


@dataclass(frozen=True)
class PackageTime:
    """The time the modules of one top-level package spent running their own code."""

    package: str
    self_us: int
    #: How many of its modules were imported.
    modules: int


@dataclass(frozen=True)
class BackendStart:
    """jax's backend started (``jax.devices()``) right after the timed import,
    or why it did not start."""

    #: Seconds the first ``jax.devices()`` took; None when it failed.
    seconds: float | None
    #: The default backend's platform (``cpu``, ``tpu``, ``gpu``) and its devices.
    platform: str | None = None
    device_kind: str | None = None
    device_count: int | None = None
    #: What the call imported (a platform's plugin), in the order the imports finished.
    imports: tuple[ModuleImport, ...] = ()
    error: str | None = None


@dataclass(frozen=True)
class ImportProfile:
    """One timed import in a fresh interpreter, or why it could not be timed."""

    module: str
    #: The import's cumulative time; None when it failed.
    seconds: float | None
    #: Every module the import loaded, in the order their imports finished.
    imports: tuple[ModuleImport, ...]
    #: Why there is no measurement (the import failed or timed out), else None.
    error: str | None = None
    #: The backend's start after the import, where it was asked for.
    backend: BackendStart | None = None

    def cumulative_seconds(self, name: str) -> float | None:
        """How long importing ``name`` took within the measured import, or
        None when the import did not load it (it was loaded before, or not at all)."""
        for record in self.imports:
            if record.name == name:
                return record.cumulative_us / 1e6
        return None

    def top(self, count: int = 5) -> tuple[PackageTime, ...]:
        """The ``count`` top-level packages whose own code took longest."""
        return by_package(self.imports)[:count]


def parse(text: str) -> tuple[ModuleImport, ...]:
    """The module lines of ``-X importtime`` output, in order.

    Anything else is skipped: the header, what the imported code itself
    wrote to stderr, a line cut short. A malformed line costs its module's
    share of the table, never the measurement.
    """
    records = []
    for line in text.splitlines():
        match = _LINE.fullmatch(line.rstrip())
        if match is None or not _MODULE.fullmatch(match[4]):
            continue
        records.append(
            ModuleImport(
                name=match[4],
                self_us=int(match[1]),
                cumulative_us=int(match[2]),
                depth=len(match[3]) // 2,
            )
        )
    return tuple(records)


def imports_of(records: Sequence[ModuleImport], name: str) -> tuple[ModuleImport, ...]:
    """The lines of the top-level import of ``name``: the nested ones before
    its own line, and its line last; empty when it was not imported at the top.

    Interpreter start-up (``site``, ``encodings``) is left out that way.
    """
    for index, record in enumerate(records):
        if record.name == name and record.depth == 0:
            start = index
            while start > 0 and records[start - 1].depth > 0:
                start -= 1
            return tuple(records[start : index + 1])
    return ()


def by_package(records: Iterable[ModuleImport]) -> tuple[PackageTime, ...]:
    """Self time summed per top-level package (``jax._src.numpy`` counts to
    ``jax``), longest first; ties by name so the order is stable."""
    self_us: dict[str, int] = defaultdict(int)
    modules: dict[str, int] = defaultdict(int)
    for record in records:
        package = record.name.split(".", 1)[0]
        self_us[package] += record.self_us
        modules[package] += 1
    ranked = sorted(self_us, key=lambda p: (-self_us[p], p))
    return tuple(PackageTime(p, self_us[p], modules[p]) for p in ranked)


#: What the interpreter runs after ``import jax`` to start the backend: one
#: line on stdout, after a marker, whatever else jax prints there.
_BACKEND_MARK = "ppy-backend-start "
_BACKEND = """
_started = _time.perf_counter()
try:
    _devices = jax.devices()
except Exception as _error:
    _found = {"error": f"{type(_error).__name__}: {_error}".splitlines()[0]}
else:
    _found = {
        "seconds": _time.perf_counter() - _started,
        "platform": _devices[0].platform,
        "device_kind": _devices[0].device_kind,
        "device_count": len(_devices),
    }
print(_MARK + _json.dumps(_found), flush=True)
"""


def _backend(stdout: str, records: Sequence[ModuleImport], module: str) -> BackendStart:
    """The backend's start as the interpreter printed it, with what it imported:
    the lines after the timed import's own."""
    after: tuple[ModuleImport, ...] = ()
    for index, record in enumerate(records):
        if record.name == module and record.depth == 0:
            after = tuple(records[index + 1 :])
            break
    for line in reversed(stdout.splitlines()):
        if line.startswith(_BACKEND_MARK):
            found = json.loads(line[len(_BACKEND_MARK) :])
            if "error" in found:
                return BackendStart(None, imports=after, error=str(found["error"]))
            return BackendStart(
                float(found["seconds"]),
                str(found["platform"]),
                str(found["device_kind"]),
                int(found["device_count"]),
                after,
            )
    return BackendStart(None, imports=after, error="the backend's start printed nothing")


def measure(
    module: str = "jax",
    *,
    python: str = sys.executable,
    timeout: float = DEFAULT_TIMEOUT,
    cwd: Path | None = None,
    start_backend: bool = False,
) -> ImportProfile:
    """Time ``import MODULE`` in a fresh ``python -X importtime``; with
    ``start_backend`` (``jax`` only), then time jax's backend start in the same
    interpreter. ``timeout`` bounds the two together.

    Never raises for what the import does: a failed import, a timeout or an
    interpreter that does not start is the profile's ``error``; a backend
    that does not start is the backend's, and the import's time stands.
    """
    if not _MODULE.fullmatch(module):
        raise ValueError(f"not a module name: {module!r}")
    if start_backend and module != "jax":
        raise ValueError("only jax's backend can be started")
    code = f"import {module}"
    if start_backend:
        # json and time come first, so that the lines after jax's are the backend's.
        code = f"import json as _json, time as _time\n{code}\n_MARK = {_BACKEND_MARK!r}\n{_BACKEND}"
    command = [python, "-X", "importtime", "-c", code]
    try:
        done = subprocess.run(
            command,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as expired:
        return _timed_out(module, expired, timeout, start_backend)
    except OSError as error:
        return ImportProfile(module, None, (), f"could not start {python}: {error}")
    everything = parse(done.stderr)
    records = imports_of(everything, module)
    if done.returncode != 0 and not (start_backend and records):
        return ImportProfile(module, None, records, _failure(module, done.stderr))
    if not records:
        return ImportProfile(
            module,
            None,
            (),
            f"no -X importtime line for {module} (was it imported at interpreter start-up?)",
        )
    backend = _backend(done.stdout, everything, module) if start_backend else None
    if backend is not None and backend.error is None and done.returncode != 0:
        backend = BackendStart(None, imports=backend.imports, error=_failure(module, done.stderr))
    return ImportProfile(module, records[-1].cumulative_us / 1e6, records, backend=backend)


def _timed_out(
    module: str, expired: subprocess.TimeoutExpired, timeout: float, start_backend: bool
) -> ImportProfile:
    """What a killed interpreter had written: the import's time, where it had
    finished, and a backend that took too long."""
    stderr = expired.stderr
    text = stderr.decode(errors="replace") if isinstance(stderr, bytes) else (stderr or "")
    records = imports_of(parse(text), module)
    if not start_backend or not records:
        return ImportProfile(module, None, (), f"`import {module}` took over {timeout:g} s")
    backend = BackendStart(
        None, error=f"the backend did not start within {timeout:g} s of the interpreter's start"
    )
    return ImportProfile(module, records[-1].cumulative_us / 1e6, records, backend=backend)


def _failure(module: str, stderr: str) -> str:
    """The last line of what the failed import wrote that is not a timing
    (``ModuleNotFoundError: No module named 'jax'``)."""
    said = [
        line.strip()
        for line in stderr.splitlines()
        if line.strip() and not line.startswith("import time:")
    ]
    last = said[-1] if said else "no message"
    return f"`import {module}` failed: {last}"
