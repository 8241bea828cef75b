"""The export worker's parent: one worker per build, restarted only after it dies.

The worker runs the user's code, so it gets a scrubbed environment (no
inherited secrets, but python's import path: it must import what ``python
model.ppy`` imports), a time limit per module (``export-timeout``), a memory
limit (``export-memory-limit``, applied by the worker to itself before any
user code runs), and its own process group so a hang can be killed whole,
children included. Its stdin stays open for its whole life: if the build is
killed, the worker's watchdog (``watchdog.py``) sees it closed and kills that group.
If the worker dies or hangs, the functions of the module it was working on
fail with what it printed, and a fresh worker takes the modules that remain.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from ppy.kinds.fingerprint import DEFAULT_LIMIT
from ppy.kinds.jax_export import JaxExport
from ppy.plugin import Check, Entry, MeshSpec, StageFailure, StageRequest, StageTarget

from ppy_plugin_jax.inputs import describe

__all__ = [
    "ENV_KEEP",
    "ENV_PATH",
    "ENV_PREFIXES",
    "SECRET_NAMES",
    "SECRET_SUFFIXES",
    "export_in_worker",
    "interpreter_options",
    "looks_secret",
    "worker_environment",
]

#: Variables the worker inherits by name; everything else is dropped, so tokens
#: and credentials in the build's environment never reach the user's code.
ENV_KEEP: Final = frozenset(
    {"PATH", "HOME", "LANG", "LANGUAGE", "TMPDIR", "TZ", "LD_LIBRARY_PATH", "SYSTEMROOT"}
)
#: ... and the variables that say where python imports from, so the worker
#: imports what ``python model.ppy`` imports: jax on ``PYTHONPATH`` (as TPU
#: images and cluster modules provide it), the user site and its ``.pth``
#: files, ``-P``'s variable. A path is not a secret. ``PYTHONPATH``'s entries
#: are made absolute against the build's working directory, as python makes them.
ENV_PATH: Final = (
    "PYTHONPATH",
    "PYTHONHOME",
    "PYTHONPLATLIBDIR",
    "PYTHONUSERBASE",
    "PYTHONNOUSERSITE",
    "PYTHONSAFEPATH",
)
#: ... and by prefix: the locale, jax's and XLA's own settings, and what the
#: GPU and TPU stacks read to find and pick devices.
ENV_PREFIXES: Final = (
    "LC_",
    "JAX_",
    "XLA_",
    "TF_CPP_",
    "CUDA_",
    "NVIDIA_",
    "ROCM_",
    "HIP_",
    "TPU_",
)

#: Words that mark a variable as a credential, matched anywhere in its name,
#: whatever its case. Such a variable is dropped even under an allowed prefix
#: (``JAX_TOKEN``), because the worker runs the project's code.
SECRET_NAMES: Final = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH")
#: ... and suffixes: ``XLA_SIGNING_KEY``, ``CUDA_API_KEY``.
SECRET_SUFFIXES: Final = ("_KEY", "_PAT")

#: How much of what the user's code printed goes into one failure.
OUTPUT_LIMIT: Final = 4000

_IMPORT_REMEDY = "fix the module so that importing it has no side effects, then rebuild"
_CRASH_REMEDY = (
    "importing the module and tracing its functions must not exit or crash the process; "
    "fix that (see the output), then rebuild"
)
_HANG_REMEDY = (
    "importing the module and tracing its functions must finish; fix what waits, "
    "or raise [tool.ppy.plugins.jax] export-timeout"
)
_EXPORT_REMEDY = "fix the function or its description; until then it stays an ordinary jitted call"
_MEMORY_REMEDY = (
    "the export worker ran out of its memory limit; allocate less at import or trace time, "
    "or raise [tool.ppy.plugins.jax] export-memory-limit"
)
_REMEDIES: Final[Mapping[str, str]] = {
    "import-failed": _IMPORT_REMEDY,
    "annotation-mismatch": "write the ppy.Shape and ppy.DType as literals in the annotation "
    "or in a module-level alias, so the source says what the code does",
    "captures-runtime-value": "pass the value to the function as a parameter; a large array "
    "may also be allowed with [tool.ppy.plugins.jax] captured-array-limit",
    "trace-side-effect": "print outside the jitted function, or with jax.debug.print, which "
    "prints at every call",
    "specializes": "describe the dims the body depends on as fixed sizes (ppy.Shape(3, 4)); "
    "or, if the difference is one you accept, set [tool.ppy.plugins.jax] verify-sizes = false",
    "missing-shape": "describe it as the message says; docs/annotations.md shows every form",
    "invalid-spec": "fix the description as the message says",
    "input-tree": "pass the object whose metadata cannot be compared outside the pytree, "
    "or leave the function jitted",
    "sharding": "describe the mesh in [tool.ppy.plugins.jax] mesh, name its axes in "
    'ppy.Sharding, and write a sharded dim as a multiple of its axes\' size ("4*B" over '
    "data = 4); docs/runtime.md shows a sharded program",
    "output-tree": "return containers (tuples, dicts, NamedTuples) of arrays, or trees of the "
    "same classes as the inputs",
}


def looks_secret(name: str) -> bool:
    """Whether a variable's name says it holds a credential."""
    upper = name.upper()
    return any(word in upper for word in SECRET_NAMES) or upper.endswith(SECRET_SUFFIXES)


def worker_environment(
    environ: Mapping[str, str] = os.environ, cwd: str | None = None
) -> dict[str, str]:
    """The allow-listed part of ``environ`` less anything named like a secret,
    python's import path as it reads it in ``cwd`` (the build's working
    directory by default), and unbuffered output."""
    env = {
        k: v
        for k, v in environ.items()
        if (k in ENV_KEEP or k.startswith(ENV_PREFIXES)) and not looks_secret(k)
    }
    env.update({k: v for k, v in environ.items() if k in ENV_PATH})
    if "PYTHONPATH" in env:
        env["PYTHONPATH"] = _absolute_path(env["PYTHONPATH"], cwd or os.getcwd())
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _absolute_path(value: str, cwd: str) -> str:
    """``PYTHONPATH`` with each entry as python reads it in ``cwd``: a relative
    one (an empty one too) is relative to it. The worker runs in the project's
    root, where the same words would name other folders."""
    return os.pathsep.join(os.path.abspath(os.path.join(cwd, e)) for e in value.split(os.pathsep))


def interpreter_options() -> list[str]:
    """The worker's interpreter options: ``-P`` always (the worker puts the
    project on ``sys.path`` itself, ``_serve``), and those of this process
    that change where python imports from (``-I``, ``-E``, ``-s``), as a
    program run by the same command would have them."""
    flags = sys.flags
    if flags.isolated:
        return ["-I"]
    return [
        "-P",
        *(["-E"] if flags.ignore_environment else []),
        *(["-s"] if flags.no_user_site else []),
    ]


def _module_request(target: StageTarget, *, vjp: bool) -> dict[str, Any]:
    return {
        "name": target.module.name,
        "path": target.module.path,
        "program": target.program,
        "functions": [
            {
                "qualname": f.qualname,
                "scope": f.scope,
                "closure": json.loads(f.closure) if f.closure is not None else None,
                "made": f.made,
                "sizes": json.loads(f.sizes) if f.sizes is not None else None,
                "gradients": json.loads(f.gradients) if f.gradients is not None else None,
                # Policy let it through; its VJP where the project asks for one.
                "vjp": vjp and f.differentiated is not None,
                "params": [
                    describe(p, static=p.name in f.static, donated=p.name in f.donated)
                    for p in f.parameters
                    if p.kind in ("positional", "keyword_only")
                ],
            }
            for f in target.functions
        ],
    }


def _entry(target: StageTarget, qualname: str, message: Mapping[str, Any]) -> Entry:
    # Read back through the contract, so the entry is one the runtime reads.
    payload = {k: base64.b64decode(v) for k, v in message["payload"].items()}
    contract = JaxExport.from_mapping(message["metadata"], payload)
    first = contract.variants[0]
    inputs = first.inputs
    shown = message.get("shown")
    if shown is not None:  # a symbol split over mesh axes: shown as written, not as 4*B
        inputs = tuple(
            dataclasses.replace(spec, dims=tuple(dims))
            for spec, dims in zip(inputs, shown, strict=True)
        )
    return Entry(
        module=target.module.name,
        qualname=qualname,
        kind=JaxExport.KIND,
        inputs=inputs,
        outputs=first.outputs,
        platforms=tuple(message["platforms"]),
        payload=contract.to_payload(),
        metadata=contract.to_metadata(),
        note=message.get("note"),
        trail=tuple(
            Check(str(c["rule"]), False, str(c["detail"])) for c in message.get("trail") or ()
        ),
    )


def _failure(module: str, qualname: str, message: Mapping[str, Any]) -> StageFailure:
    rule = str(message["rule"])
    reason = str(message["reason"])
    remedy = str(message.get("remedy") or _REMEDIES.get(rule, _EXPORT_REMEDY))
    if reason.startswith("MemoryError"):
        remedy = _MEMORY_REMEDY
    elif rule == "import-failed" and reason.startswith("ModuleNotFoundError"):
        remedy = _missing_remedy(message.get("missing"), message.get("searched"))
    return StageFailure(
        module,
        qualname,
        rule,
        reason,
        remedy,
        str(message.get("output", ""))[-OUTPUT_LIMIT:],
        deliberate=bool(message.get("deliberate", False)),
    )


def _missing_remedy(name: object, searched: object) -> str:
    """What to do about a module the worker did not find: where python finds
    it (this process imports from what the program does), and where the
    worker looked."""
    looked = os.pathsep.join(map(str, searched)) if isinstance(searched, list) else "?"
    top = str(name).partition(".")[0] if isinstance(name, str) and name else None
    found = _found(top) if top is not None else None
    if found is not None:
        return (
            f"python finds {top} at {found}, but the export worker looked in {looked}; "
            "the worker gets python's import path (PYTHONPATH, PYTHONHOME, the user site) "
            "and no other variable: put that folder on PYTHONPATH, or install the module "
            "in this environment"
        )
    return (
        f"python does not find {top or 'it'} either (the export worker looked in {looked}): "
        "install it, or put it where the program imports from: the project's root, the "
        "importing module's own folder, or PYTHONPATH"
    )


def _found(name: str) -> str | None:
    """Where this process would import the top-level module ``name`` from,
    found without importing it (finders only), or None."""
    import importlib.util

    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if spec.origin not in (None, "namespace", "built-in", "frozen"):
        return spec.origin
    locations = list(spec.submodule_search_locations or ())
    return locations[0] if locations else spec.origin


@dataclass(frozen=True)
class _Ended:
    """Why no message came: the worker closed its pipe, or the deadline passed."""

    timed_out: bool


class _Worker:
    """One worker process and the pipe it answers on."""

    def __init__(self, request: Mapping[str, Any], capture: Path) -> None:
        # stderr goes to the capture file too, so a worker that fails before it
        # redirects its own fds (a broken install) still says why.
        with open(capture, "ab") as stderr:
            self.process = subprocess.Popen(
                # -P: the project root goes on sys.path by the worker's hand,
                # after the worker's own imports, not implicitly as the cwd.
                [sys.executable, *interpreter_options(), "-m", "ppy_plugin_jax.worker"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=stderr,
                env=worker_environment(),
                cwd=request["root"],
                start_new_session=True,
            )
        assert self.process.stdin is not None and self.process.stdout is not None
        # One line, and stdin stays open: the worker's watchdog reads its end as
        # "the build is gone" and kills the worker's process group.
        try:
            self.process.stdin.write(json.dumps(request).encode("utf-8") + b"\n")
            self.process.stdin.flush()
        except BrokenPipeError:
            pass  # it died at start-up; read() reports the end
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.process.stdout, selectors.EVENT_READ)
        self.buffer = b""

    def read(self, deadline: float) -> dict[str, Any] | _Ended:
        """The next message, or why there is none."""
        assert self.process.stdout is not None
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not self.selector.select(left):
                return _Ended(timed_out=True)
            chunk = os.read(self.process.stdout.fileno(), 1 << 20)
            if not chunk:
                return _Ended(timed_out=False)
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        message: dict[str, Any] = json.loads(line)
        return message

    def stop(self, *, ended: bool, bound: float) -> int:
        """Kill the whole process group (the user's code may have started
        children), and return the worker's exit status.

        ``ended``: it closed its pipe, so it is exiting: its own exit status,
        waited for up to ``bound`` seconds (the export timeout), says how it
        ended. A fixed moment is missed on a loaded machine, or by a worker
        that exits slowly (the user's atexit hooks, a re-executed
        interpreter), and the build would then name its own kill, SIGKILL.
        """
        if ended and self.process.poll() is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=bound)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        code = self.process.wait()
        self.selector.close()
        assert self.process.stdin is not None and self.process.stdout is not None
        with contextlib.suppress(BrokenPipeError):
            self.process.stdin.close()
        self.process.stdout.close()
        return code


def _exit_words(code: int) -> str:
    if code < 0:
        try:
            return f"the export worker was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"the export worker was killed by signal {-code}"
    return f"the export worker exited with code {code}"


def export_in_worker(request: StageRequest) -> list[Entry | StageFailure]:
    """Export every function of ``request``; one result per function, in order.

    Each module has ``export-timeout`` seconds, counted from when the worker
    starts on it, to import and export all its functions. ``request.progress``
    hears of each function as the worker starts it and of each result as it
    comes, so ``ppy build`` can show where a long build is.
    """
    from ppy_plugin_jax.worker import PROTOCOL_VERSION

    timeout = float(request.settings.get("export-timeout", 120.0))
    results: dict[tuple[str, str], Entry | StageFailure] = {}
    pending = [t for t in request.targets if t.functions]
    with tempfile.TemporaryDirectory(prefix="ppy-export-") as tmp:
        capture = Path(tmp) / "output.txt"
        while pending:
            capture.write_bytes(b"")
            worker = _Worker(
                {
                    "protocol": PROTOCOL_VERSION,
                    "root": str(Path(request.root).resolve()),
                    "timeout": timeout,
                    "platforms": request.settings.get("platforms"),
                    "memory_limit_mb": request.settings.get("export-memory-limit"),
                    "capture_limit": request.settings.get("captured-array-limit", DEFAULT_LIMIT),
                    "verify_sizes": request.settings.get("verify-sizes", True),
                    "constraints": request.settings.get("constraints") or [],
                    "mesh": _mesh_json(request.settings.get("mesh")),
                    # python -P (or PYTHONSAFEPATH) puts no script's folder on sys.path.
                    "safe_path": bool(sys.flags.safe_path),
                    "capture": str(capture),
                    "modules": [
                        _module_request(t, vjp=bool(request.settings.get("staged-vjp")))
                        for t in pending
                    ],
                },
                capture,
            )
            current: StageTarget | None = None
            offset = 0  # where the current module's output starts in the capture
            deadline = time.monotonic() + timeout
            ended: _Ended | None = None
            try:
                while pending:
                    message = worker.read(deadline)
                    if isinstance(message, _Ended):
                        ended = message
                        break
                    if message.get("event") == "module":
                        current = next(t for t in pending if t.module.name == message["module"])
                        deadline = time.monotonic() + timeout
                        offset = int(message["offset"])
                        _begin_next(request, current, results)
                        continue
                    if message.get("event") == "done":
                        break
                    assert current is not None, "a result came before its module"
                    key = (current.module.name, str(message["qualname"]))
                    results[key] = (
                        _entry(current, key[1], message)
                        if message["ok"]
                        else _failure(*key, message)
                    )
                    request.progress.done(results[key])
                    if all((current.module.name, f.qualname) in results for f in current.functions):
                        pending.remove(current)
                        current = None
                    else:
                        _begin_next(request, current, results)
            finally:
                code = worker.stop(ended=ended is not None and not ended.timed_out, bound=timeout)
            if not pending:
                break
            # The worker died or hung in ``current``, or before it reached a module.
            victim = current or pending[0]
            how = (
                f"timed out after {timeout:g} s (export-timeout)"
                if ended is not None and ended.timed_out
                else _exit_words(code)
            )
            output = capture.read_bytes()[offset:].decode("utf-8", "replace")
            for function in victim.functions:
                key = (victim.module.name, function.qualname)
                if key not in results:
                    results[key] = StageFailure(
                        victim.module.name,
                        function.qualname,
                        "export-failed",
                        f"{how} while importing or exporting {victim.module.path}",
                        _HANG_REMEDY if ended is not None and ended.timed_out else _CRASH_REMEDY,
                        output[-OUTPUT_LIMIT:],
                    )
                    request.progress.done(results[key])
            pending.remove(victim)
    return [results[t.module.name, f.qualname] for t in request.targets for f in t.functions]


def _begin_next(
    request: StageRequest,
    target: StageTarget,
    results: Mapping[tuple[str, str], Entry | StageFailure],
) -> None:
    """Say which function the worker is on: it exports a module's functions
    in order, so the first without a result (the module's import counts as
    its first function's)."""
    for function in target.functions:
        if (target.module.name, function.qualname) not in results:
            request.progress.begin(target.module.name, function.qualname)
            return


def _mesh_json(mesh: MeshSpec | None) -> dict[str, Any] | None:
    return None if mesh is None else mesh.to_json()
