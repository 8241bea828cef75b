"""``ppy doctor``: where a program's start-up goes, gathered into one report.

A ``ppy run`` starts by importing jax, checks the artifact (a stale one is
rebuilt before the program starts), and loads each staged function's
executable from the per-user cache or compiles it. Each of those can be the
slow part, and each is checked here without importing jax in this process:

- ``import jax`` is timed in a fresh interpreter (``ppy.commands.importtime``),
  and then, in the same interpreter, jax's backend start: the first
  ``jax.devices()``, which loads the platform's plugin (libtpu) and opens the
  device. On a TPU v5e that open alone takes 6 to 11 s, in every process:
  import and backend start are the floor no run of the program goes below,
  and a forked child (``ppy run --warm``) cannot inherit an open device;
- installed versions known to be slow (``SLOW_VERSIONS``) are found from
  package metadata, with a remedy that ppy only suggests: it never changes
  what is installed;
- the artifact's freshness is decided by the rule ``ppy run`` applies
  (``ppy.build.freshness.staleness``): a stale one costs the next run a build;
- the executable cache is counted. Whether it holds this program's
  executables cannot be told from here: a key covers the concrete input
  shapes, which exist only once the program calls, and the device, which
  only jax can name. So the cache is called cold when it cannot hold them
  (empty, or untrusted) and unknown otherwise. For the same reason the
  program's own work (its eager ops, each staged function's compile or
  cache load) is not timed here: it happens at the program's calls, and
  ``ppy -vv run FILE`` logs each load and compile as it happens.

``gather`` collects everything into a ``Report``; ``ppy.cli.diagnosis``
only formats it. Nothing here fails on what it finds: a missing artifact or
a broken configuration is part of the report.
"""

from __future__ import annotations

import os
import platform
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ppy.commands.importtime import DEFAULT_TIMEOUT, ImportProfile, measure
from ppy.decision import Decision, Outcome
from ppy.errors import UsageError

if TYPE_CHECKING:
    from ppy.artifact.model import Artifact
    from ppy.cache import ExecutableCache

__all__ = [
    "SLOW_VERSIONS",
    "VERSIONED",
    "ArtifactReport",
    "ArtifactState",
    "CacheReport",
    "Count",
    "Finding",
    "Interpreter",
    "Machine",
    "ProgramRun",
    "Report",
    "SlowVersion",
    "Warmth",
    "artifact_report",
    "cache_report",
    "findings",
    "gather",
    "installed_versions",
    "interpreter",
    "machine",
    "run_program",
]

#: The distributions whose versions start-up depends on, in the order shown.
VERSIONED: tuple[str, ...] = ("jax", "jaxlib", "ml_dtypes", "numpy")

Release = tuple[int, ...]


@dataclass(frozen=True)
class SlowVersion:
    """A release range of a package that is known to make start-up slow."""

    package: str
    #: Whether an installed release (``(0, 7, 0)``) is in the slow range.
    slow: Callable[[Release], bool]
    why: str
    #: What the user can do; said as a suggestion, never done by ppy.
    remedy: str
    #: A measured import of the package faster than this is not slow here:
    #: the cost can depend on more than the package's own version.
    slow_seconds: float
    #: The package's import where it is not slow, measured: what is left of
    #: the measured time once the remedy is taken.
    fast_seconds: float


#: The known slow versions. One is known today; a row per package found later.
SLOW_VERSIONS: tuple[SlowVersion, ...] = (
    SlowVersion(
        package="ml_dtypes",
        slow=lambda release: release >= (0, 7),
        why=(
            "ml_dtypes from 0.7 on registers about 38,000 numpy ufunc promoters when it is "
            "imported: about 0.8 s of a 1.4 s `import jax` on a 2-core machine, where the "
            "whole import takes about 0.6 s with ml_dtypes <= 0.6"
        ),
        remedy='pip install "ml_dtypes<0.7"',
        # Measured in `import jax`: 1.0 s with numpy 2.4 (Python 3.11), 0.03 s
        # with numpy 2.5 (Python 3.13), ml_dtypes 0.7.0 both times.
        slow_seconds=0.3,
        # ml_dtypes 0.7.0 where registering is fast (numpy 2.5, Python 3.13).
        fast_seconds=0.03,
    ),
)


@dataclass(frozen=True)
class Finding:
    """An installed version in ``SLOW_VERSIONS``, with what it cost here."""

    package: str
    installed: str
    why: str
    remedy: str
    #: The package's cumulative import time within the measured ``import
    #: jax``; None when the import was not measured or did not load it.
    measured_seconds: float | None
    #: Whether the measured import was as slow as the row warns (None: not
    #: measured). A version in the range can be fast with other packages,
    #: and then the remedy is not worth taking.
    slow_here: bool | None
    #: About what the remedy would take off ``import jax``: the measured
    #: time less the package's fast import; None unless ``slow_here``.
    would_save_seconds: float | None = None


@dataclass(frozen=True)
class Interpreter:
    version: str
    implementation: str
    #: The interpreter ``import jax`` is timed in: the one ppy runs in.
    executable: str


@dataclass(frozen=True)
class Machine:
    platform: str
    machine: str
    cpus: int | None
    #: The CPUs this process may run on (its affinity), where the OS says.
    cpus_usable: int | None


class ArtifactState(StrEnum):
    #: It describes the sources, configuration and tools: ``ppy run`` binds it.
    FRESH = "fresh"
    #: ``ppy run`` rebuilds it before the program starts.
    STALE = "stale"
    MISSING = "missing"
    #: Damaged, or of a format this ppy does not read.
    UNREADABLE = "unreadable"
    #: ``[tool.ppy]`` does not validate, so no artifact can be located or checked.
    BAD_CONFIG = "bad-config"


@dataclass(frozen=True)
class ArtifactReport:
    root: Path
    #: None when the configuration could not be read.
    path: Path | None
    state: ArtifactState
    #: Why it is not fresh; None when it is.
    reason: str | None = None
    remedy: str | None = None
    #: The artifact as read, whatever its state; None when it could not be.
    artifact: Artifact | None = field(default=None, repr=False)

    @property
    def entries(self) -> int:
        """How many staged entries it holds (0 when it could not be read)."""
        return len(self.artifact.entries) if self.artifact is not None else 0

    @property
    def staged(self) -> tuple[Decision, ...]:
        """The functions it stages, by this build or reused from an earlier one."""
        decisions = self.artifact.decisions if self.artifact is not None else ()
        return tuple(d for d in decisions if d.outcome is not Outcome.STAYS)

    @property
    def stays(self) -> tuple[Decision, ...]:
        """The candidates left as ordinary calls, each with the rule that decided."""
        decisions = self.artifact.decisions if self.artifact is not None else ()
        return tuple(d for d in decisions if d.outcome is Outcome.STAYS)


class Warmth(StrEnum):
    #: No executable of this program can be there: its first run compiles.
    COLD = "cold"
    #: Executables are cached, but whether they are this program's needs the
    #: run's shapes and device (see the module docstring).
    UNKNOWN = "unknown"
    #: The artifact stages nothing, so there is nothing to warm.
    NOTHING_STAGED = "nothing-staged"


@dataclass(frozen=True)
class CacheReport:
    directory: Path
    #: Why ppy refuses the directory (it then compiles in memory), or None.
    untrusted: str | None
    executables: int
    bytes: int
    #: Computations compiled outside the staged functions (eager ops, fallbacks).
    unstaged: int
    unstaged_bytes: int
    warm: Warmth
    note: str


@dataclass(frozen=True)
class Report:
    python: Interpreter
    #: Distribution -> installed version, None when not installed.
    versions: Mapping[str, str | None]
    machine: Machine
    #: None when ``import jax`` was not measured (``--no-import``).
    import_jax: ImportProfile | None
    findings: tuple[Finding, ...]
    artifact: ArtifactReport
    cache: CacheReport
    #: The program's own run, where one was asked for (``--program``).
    program: ProgramRun | None = None


def gather(
    target: Path,
    *,
    measure_import: bool = True,
    timeout: float | None = None,
    program: Sequence[str] = (),
) -> Report:
    """Everything ``ppy doctor`` reports for the project at or above ``target``;
    ``import jax`` is given up on after ``timeout`` seconds (None:
    ``DEFAULT_TIMEOUT``)."""
    if not target.exists():
        raise UsageError(f"{target}: no such file or folder", remedy="give a project folder")
    timeout = timeout if timeout is not None else DEFAULT_TIMEOUT
    versions = installed_versions()
    artifact = artifact_report(target)
    # The program's own run measures import jax and the backend start where
    # it has them: no fresh interpreter is timed beside it.
    ran = run_program(Path(program[0]), program[1:]) if program else None
    profile = (
        measure("jax", timeout=timeout, cwd=artifact.root, start_backend=True)
        if measure_import and ran is None
        else None
    )
    return Report(
        python=interpreter(),
        versions=versions,
        machine=machine(),
        import_jax=profile,
        findings=findings(versions, profile),
        artifact=artifact,
        cache=cache_report(artifact.artifact),
        program=ran,
    )


def interpreter() -> Interpreter:
    return Interpreter(platform.python_version(), platform.python_implementation(), sys.executable)


def machine() -> Machine:
    usable: int | None = None
    if hasattr(os, "sched_getaffinity"):
        usable = len(os.sched_getaffinity(0))
    return Machine(platform.platform(), platform.machine(), os.cpu_count(), usable)


def installed_versions(names: Sequence[str] = VERSIONED) -> dict[str, str | None]:
    """Each distribution's installed version, from its metadata: nothing is imported."""
    from ppy import __version__

    versions: dict[str, str | None] = {"ppy": __version__}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def _release(version: str) -> Release | None:
    """``0.7.0rc1`` -> (0, 7, 0); None for a version with no release numbers."""
    match = re.match(r"\d+(?:\.\d+)*", version.strip())
    return tuple(int(part) for part in match[0].split(".")) if match else None


def findings(
    versions: Mapping[str, str | None],
    profile: ImportProfile | None,
    table: Sequence[SlowVersion] = SLOW_VERSIONS,
) -> tuple[Finding, ...]:
    """The rows of ``table`` whose package is installed in a slow version.

    ``versions`` is what ``installed_versions`` read; a package of the table
    that it lacks is looked up the same way.
    """
    found = []
    for row in table:
        if row.package in versions:
            installed = versions[row.package]
        else:
            installed = installed_versions((row.package,))[row.package]
        release = _release(installed) if installed is not None else None
        if installed is None or release is None or not row.slow(release):
            continue
        measured = profile.cumulative_seconds(row.package) if profile is not None else None
        slow_here = None if measured is None else measured >= row.slow_seconds
        saving = max(0.0, measured - row.fast_seconds) if measured and slow_here else None
        found.append(
            Finding(row.package, installed, row.why, row.remedy, measured, slow_here, saving)
        )
    return tuple(found)


_BUILD = "run `ppy build`; `ppy run FILE` builds it first, at the cost of that start-up"
_REBUILD = (
    "run `ppy build`; until then, where a plugin is installed, each `ppy run` rebuilds it "
    "before the program starts"
)


def artifact_report(target: Path) -> ArtifactReport:
    """The artifact's state for the project at or above ``target``, decided
    by the rule ``ppy run`` applies (a passed check is remembered as a run
    remembers it, so the next run does not repeat it)."""
    from ppy.artifact.read import read_artifact
    from ppy.build.freshness import staleness
    from ppy.config import config_of
    from ppy.errors import ArtifactError, ConfigError
    from ppy.registry import installed_plugins
    from ppy.snapshot import take

    try:
        config = config_of(take(target))
    except ConfigError as error:
        root = (target if target.is_dir() else target.parent).resolve()
        return ArtifactReport(root, None, ArtifactState.BAD_CONFIG, error.message, error.remedy)
    root, path = config.root, config.artifact
    if not path.exists() and not path.is_symlink():
        return ArtifactReport(
            root, path, ArtifactState.MISSING, "no artifact has been built", _BUILD
        )
    try:
        artifact = read_artifact(path)
    except ArtifactError as error:
        return ArtifactReport(root, path, ArtifactState.UNREADABLE, error.message, error.remedy)
    try:
        reason = staleness(config, artifact, installed_plugins)
    except ConfigError as error:  # a plugin's table, validated only now
        state = ArtifactState.BAD_CONFIG
        return ArtifactReport(root, path, state, error.message, error.remedy, artifact)
    if reason is not None:
        return ArtifactReport(root, path, ArtifactState.STALE, reason, _REBUILD, artifact)
    return ArtifactReport(root, path, ArtifactState.FRESH, artifact=artifact)


_EXACT = (
    "a cached executable is keyed by the concrete input shapes and the device, known only "
    "while the program runs; `ppy -vv run FILE` logs each cache.hit and cache.miss"
)


def cache_report(artifact: Artifact | None, cache: ExecutableCache | None = None) -> CacheReport:
    """What the executable cache holds, and whether it can hold ``artifact``'s executables."""
    from ppy.cache import ExecutableCache

    cache = cache if cache is not None else ExecutableCache()
    untrusted = cache.untrusted()
    executables, total = cache.stats()
    unstaged, unstaged_total = cache.unstaged().stats()
    if artifact is not None and not artifact.entries:
        warm, note = Warmth.NOTHING_STAGED, "the artifact stages no function"
    elif untrusted is not None:
        warm = Warmth.COLD
        note = f"the directory {untrusted}: every run compiles in memory"
    elif executables == 0:
        warm, note = Warmth.COLD, "no staged executable is cached: the first run compiles"
    else:
        warm, note = Warmth.UNKNOWN, _EXACT
    return CacheReport(
        cache.directory, untrusted, executables, total, unstaged, unstaged_total, warm, note
    )


@dataclass(frozen=True)
class Count:
    """How many of something, and the seconds they took together."""

    count: int
    seconds: float


@dataclass(frozen=True)
class ProgramRun:
    """One ``ppy run --no-warm FILE ARGS`` of the program, measured inside it
    (``ppy.run.timings``): where its time went, from the interpreter's start
    to its exit. Seconds are None where the run did not get that far, or
    this jax does not say."""

    command: tuple[str, ...]
    exit_code: int
    #: The whole process, from its start to its exit, as seen from here.
    seconds: float
    #: The last line the run wrote to stderr, where it failed (exit code not 0).
    failure: str | None
    #: From the process's start to ``ppy run``'s first line: the interpreter and ``import ppy``.
    interpreter: float | None = None
    import_jax: float | None = None
    #: Whether ppy imported jax before the program started (else the program did).
    jax_before_program: bool | None = None
    #: jax's backend start: the first ``backends()``, with the plugins' discovery
    #: and each platform's client apart.
    backend_start: float | None = None
    plugins: float | None = None
    platforms: Mapping[str, float] = field(default_factory=dict)
    #: ppy's work before the program's first line: the configuration, the
    #: artifact (a build, where it was stale), the runtimes.
    before_program: float | None = None
    #: From the program's first line to its last.
    program: float | None = None
    trace: Count = Count(0, 0.0)
    lower: Count = Count(0, 0.0)
    #: XLA compiles: jax's backend compiles less those a cache answered.
    compile: Count = Count(0, 0.0)
    #: Backend compiles that ppy's executable cache (or jax's) answered.
    loads: Count = Count(0, 0.0)
    #: Eager ops ppy's cache served before jax lowered them (no time of their own).
    eager_loads: int = 0
    #: Reads of ppy's executable cache that found an executable.
    cache_hits: int = 0
    bound: int = 0
    staged_calls: int = 0
    original_calls: int = 0
    #: Fallback categories, each counted once per reason (``run.fallback``).
    fallbacks: Mapping[str, int] = field(default_factory=dict)
    #: From the program's last line to the process's exit.
    exit: float | None = None

    @property
    def rest(self) -> float | None:
        """The run's time, from ``ppy run``'s first line to the program's last,
        that none of the above took: eager execution, the program's Python,
        staged calls."""
        if self.before_program is None or self.program is None:
            return None
        known = sum(
            value or 0.0
            for value in (
                self.import_jax,
                self.backend_start,
                self.trace.seconds,
                self.lower.seconds,
                self.compile.seconds,
                self.loads.seconds,
            )
        )
        return max(0.0, self.before_program + self.program - known)


def run_program(program: Path, args: Sequence[str]) -> ProgramRun:
    """Run ``ppy run --no-warm PROGRAM ARGS`` once, here, with its output
    captured and not shown, and read where its time went."""
    import json
    import subprocess
    import tempfile
    import time

    from ppy.run.timings import ENV

    if not program.is_file():
        raise UsageError(f"{program}: no such file", remedy="give the path of a .ppy program")
    command = (sys.executable, "-m", "ppy", "run", "--no-warm", str(program), *args)
    with tempfile.TemporaryDirectory(prefix="ppy-doctor-") as folder:
        written = Path(folder) / "timings.json"
        launched = time.time()
        done = subprocess.run(
            command,
            env={**os.environ, ENV: str(written)},
            stdin=subprocess.DEVNULL,
            capture_output=True,
            check=False,
        )
        ended = time.time()
        try:
            found = json.loads(written.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            found = {}
    said = done.stderr.decode(errors="replace").strip().splitlines()
    failure = (said[-1] if said else "it wrote nothing on stderr") if done.returncode else None
    return _program_run(command, done.returncode, launched, ended, failure, found)


def _program_run(
    command: Sequence[str],
    code: int,
    launched: float,
    ended: float,
    failure: str | None,
    found: Mapping[str, Any],
) -> ProgramRun:
    stamps: Mapping[str, float] = found.get("stamps", {})
    spans: Mapping[str, float] = found.get("spans", {})
    counts: Mapping[str, int] = found.get("counts", {})

    def between(first: str | float, last: str | float) -> float | None:
        a = stamps.get(first) if isinstance(first, str) else first
        b = stamps.get(last) if isinstance(last, str) else last
        return None if a is None or b is None else max(0.0, b - a)

    def count(name: str) -> Count:
        number, seconds = found.get(name, (0, 0.0))
        return Count(int(number), float(seconds))

    imported, ready = stamps.get("jax_imported"), stamps.get("ready")
    return ProgramRun(
        command=tuple(command),
        exit_code=code,
        seconds=ended - launched,
        failure=failure,
        interpreter=between(launched, "started"),
        import_jax=spans.get("import_jax"),
        jax_before_program=None if imported is None or ready is None else imported <= ready,
        backend_start=spans.get("backend_start"),
        plugins=spans.get("plugins"),
        platforms=dict(found.get("platforms", {})),
        before_program=between("started", "ready"),
        program=between("ready", "program_ended"),
        trace=count("trace"),
        lower=count("lower"),
        compile=count("compile"),
        loads=count("loads"),
        eager_loads=int(counts.get("eager_loads", 0)),
        cache_hits=int(counts.get("cache_hits", 0)),
        bound=int(counts.get("bound", 0)),
        staged_calls=int(counts.get("staged_calls", 0)),
        original_calls=int(counts.get("original_calls", 0)),
        fallbacks=dict(found.get("fallbacks", {})),
        exit=between("program_ended", ended),
    )
