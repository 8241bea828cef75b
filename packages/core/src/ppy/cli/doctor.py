"""``ppy doctor``: where a program's start-up goes, on one screen.

A ``ppy run`` starts by importing jax, checks the artifact (a stale one is
rebuilt before the program starts), and loads each staged function's
executable from the per-user cache or compiles it. Each of those can be the
slow part, and each is checked here without importing jax in this process:

- ``import jax`` is timed in a fresh interpreter (``ppy.cli.importtime``),
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

``gather`` collects everything into a ``Report``; ``to_json`` and
``render_text`` only format it. Nothing here fails on what it finds: a
missing artifact or a broken configuration is part of the report.
"""

from __future__ import annotations

import os
import platform
import re
import sys
import textwrap
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ppy.cache import human_size
from ppy.cli.importtime import DEFAULT_TIMEOUT, BackendStart, ImportProfile, by_package, measure
from ppy.decision import Decision, Outcome

if TYPE_CHECKING:
    from ppy.artifact.model import Artifact
    from ppy.cache import ExecutableCache

__all__ = [
    "FORMAT_VERSION",
    "SLOW_VERSIONS",
    "VERSIONED",
    "ArtifactReport",
    "ArtifactState",
    "CacheReport",
    "Finding",
    "Interpreter",
    "Machine",
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
    "render_text",
    "to_json",
]

#: The version of ``to_json``'s layout; a field renamed or removed bumps it.
FORMAT_VERSION = 1
#: The distributions whose versions start-up depends on, in the order shown.
VERSIONED: tuple[str, ...] = ("jax", "jaxlib", "ml_dtypes", "numpy")
#: How many functions of each outcome the text lists before "and N more".
_LISTED = 8
#: The text's width: a screen, not a log line.
_WIDTH = 100

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


def gather(
    target: Path, *, measure_import: bool = True, timeout: float = DEFAULT_TIMEOUT
) -> Report:
    """Everything ``ppy doctor`` reports for the project at or above ``target``."""
    versions = installed_versions()
    artifact = artifact_report(target)
    profile = (
        measure("jax", timeout=timeout, cwd=artifact.root, start_backend=True)
        if measure_import
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
    from ppy.config import load_config
    from ppy.errors import ArtifactError, ConfigError
    from ppy.registry import installed_plugins

    try:
        config = load_config(target)
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


# -- formatting ---------------------------------------------------------------------------


def _seconds(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def _function(decision: Decision) -> str:
    return f"{decision.module}.{decision.qualname}"


def to_json(report: Report) -> dict[str, Any]:
    """The report as one JSON-able object; docs/cli.md lists every field."""
    profile = report.import_jax
    artifact, cache = report.artifact, report.cache
    return {
        "format_version": FORMAT_VERSION,
        "python": {
            "version": report.python.version,
            "implementation": report.python.implementation,
            "executable": report.python.executable,
        },
        "versions": dict(report.versions),
        "platform": {
            "platform": report.machine.platform,
            "machine": report.machine.machine,
            "cpus": report.machine.cpus,
            "cpus_usable": report.machine.cpus_usable,
        },
        "import_jax": {
            "measured": profile is not None and profile.error is None,
            "seconds": _seconds(profile.seconds) if profile is not None else None,
            "top": [
                {
                    "package": p.package,
                    "self_seconds": _seconds(p.self_us / 1e6),
                    "modules": p.modules,
                }
                for p in (profile.top() if profile is not None and profile.error is None else ())
            ],
            "error": profile.error if profile is not None else None,
        },
        "backend_start": _backend_json(profile.backend if profile is not None else None),
        "findings": [
            {
                "package": f.package,
                "installed": f.installed,
                "why": f.why,
                "remedy": f.remedy,
                "measured_seconds": _seconds(f.measured_seconds),
                "slow_here": f.slow_here,
                "would_save_seconds": _seconds(f.would_save_seconds),
            }
            for f in report.findings
        ],
        "artifact": {
            "root": str(artifact.root),
            "path": None if artifact.path is None else str(artifact.path),
            "state": artifact.state.value,
            "reason": artifact.reason,
            "remedy": artifact.remedy,
            "entries": artifact.entries,
            "staged": [
                {"function": _function(d), "kind": d.kind, "signature": d.signature}
                for d in artifact.staged
            ],
            "stays": [
                {"function": _function(d), "rule": d.rule, "reason": d.reason, "remedy": d.remedy}
                for d in artifact.stays
            ],
        },
        "cache": {
            "directory": str(cache.directory),
            "untrusted": cache.untrusted,
            "executables": cache.executables,
            "bytes": cache.bytes,
            "unstaged": cache.unstaged,
            "unstaged_bytes": cache.unstaged_bytes,
            "warm": cache.warm.value,
            "note": cache.note,
        },
    }


def _backend_json(backend: BackendStart | None) -> dict[str, Any]:
    measured = backend is not None and backend.error is None
    return {
        "measured": measured,
        "seconds": _seconds(backend.seconds) if backend is not None else None,
        "platform": backend.platform if backend is not None else None,
        "device_kind": backend.device_kind if backend is not None else None,
        "device_count": backend.device_count if backend is not None else None,
        "imports": [
            {"package": p.package, "self_seconds": _seconds(p.self_us / 1e6), "modules": p.modules}
            for p in (by_package(backend.imports)[:5] if backend is not None else ())
        ],
        "error": backend.error if backend is not None else None,
    }


def _wrapped(text: str, indent: str) -> Iterator[str]:
    yield from textwrap.wrap(
        text, _WIDTH, initial_indent=indent, subsequent_indent=indent, break_on_hyphens=False
    )


def _clipped(text: str) -> str:
    """One line of at most ``_WIDTH`` characters: the list is a glance, ``ppy
    explain`` the whole story."""
    return text if len(text) <= _WIDTH else text[: _WIDTH - 3].rstrip() + "..."


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def _versions(report: Report) -> str:
    names = ("ppy", *VERSIONED)
    return ", ".join(f"{n} {report.versions.get(n) or 'not installed'}" for n in names)


def _import_lines(profile: ImportProfile | None) -> Iterator[str]:
    if profile is None:
        yield "import jax  not measured (--no-import)"
        return
    if profile.error is not None or profile.seconds is None:
        yield f"import jax  not measured: {profile.error}"
        return
    yield f"import jax  {profile.seconds:.2f} s (a fresh `python -X importtime -c 'import jax'`)"
    top = profile.top()
    width = max((len(p.package) for p in top), default=0)
    for package in top:
        yield f"  {package.package.ljust(width)}  {package.self_us / 1e6:5.2f} s"


def _backend_lines(profile: ImportProfile | None) -> Iterator[str]:
    if profile is None:
        yield "backend start  not measured (--no-import)"
        return
    backend = profile.backend
    if profile.error is not None or profile.seconds is None or backend is None:
        yield "backend start  not measured: jax did not import"
        return
    if backend.error is not None or backend.seconds is None:
        yield f"backend start  failed after `import jax`: {backend.error}"
        return
    count = backend.device_count or 0
    yield (
        f"backend start  {backend.seconds:.2f} s: {backend.device_kind} ({backend.platform}, "
        f"{_plural(count, 'device')}), the first jax.devices() after the import"
    )
    loaded = [p for p in by_package(backend.imports) if p.self_us >= 1000][:5]
    if loaded:
        shown = ", ".join(f"{p.package} {p.self_us / 1e6:.2f} s" for p in loaded)
        yield f"  imported by it (the platform's plugin): {shown}"
    floor = profile.seconds + backend.seconds
    yield from _wrapped(
        f"every process that computes with jax pays both before its program's first call: "
        f"{floor:.2f} s here; a forked child (ppy run --warm) cannot inherit an open device",
        "  ",
    )
    yield from _wrapped(
        "the program's eager ops and each staged function's compile or cache load come at "
        "its calls: `ppy -vv run FILE` logs them (cache.hit, cache.miss, cache.unstaged)",
        "  ",
    )


def _finding_lines(report: Report) -> Iterator[str]:
    if not report.findings:
        checked = ", ".join(row.package for row in SLOW_VERSIONS)
        yield f"slow versions  none found (checked: {checked})"
        return
    yield f"slow versions  {len(report.findings)} installed in a range known to be slow"
    for f in report.findings:
        if f.measured_seconds is None:
            yield f"  {f.package} {f.installed}"
        else:
            yield f"  {f.package} {f.installed}: its import took {f.measured_seconds:.2f} s here"
        yield from _wrapped(f.why, "    ")
        if f.slow_here is False:
            yield "    not slow here, so there is nothing to do"
        else:
            yield f"    remedy (a suggestion; ppy changes no installed package): {f.remedy}"
        if f.would_save_seconds is not None:
            yield f"    it would take about {f.would_save_seconds:.2f} s off every start-up"


def _listed(decisions: Sequence[Decision], line: Callable[[Decision], str]) -> Iterator[str]:
    for decision in decisions[:_LISTED]:
        yield line(decision)
    if len(decisions) > _LISTED:
        yield f"    and {len(decisions) - _LISTED} more (`ppy inspect` lists them all)"


def _artifact_lines(artifact: ArtifactReport) -> Iterator[str]:
    where = artifact.path if artifact.path is not None else artifact.root
    yield f"artifact  {where}: {artifact.state.value}"
    if artifact.reason is not None:
        yield from _wrapped(artifact.reason, "  ")
    if artifact.remedy is not None:
        yield from _wrapped(f"remedy: {artifact.remedy}", "  ")
    if artifact.artifact is None:
        return
    yield f"  {len(artifact.staged)} staged, {len(artifact.stays)} stay (ordinary calls)"
    yield from _listed(
        artifact.staged,
        lambda d: _clipped(f"    staged  {_function(d)}  {d.kind or '-'}  {d.signature}"),
    )
    yield from _listed(
        artifact.stays, lambda d: _clipped(f"    stays   {_function(d)}  [{d.rule}] {d.reason}")
    )
    if artifact.stays:
        yield "  `ppy explain NAME` gives a function's whole decision trail"


def _cache_lines(cache: CacheReport) -> Iterator[str]:
    yield f"executable cache  {cache.directory}"
    yield (
        f"  {_plural(cache.executables, 'staged executable')}, {human_size(cache.bytes)}; "
        f"{_plural(cache.unstaged, 'unstaged computation')}, {human_size(cache.unstaged_bytes)}"
    )
    yield from _wrapped(f"warm for this program: {cache.warm.value} ({cache.note})", "  ")


def render_text(report: Report) -> str:
    """The report for people: one screen, a section a paragraph."""
    m = report.machine
    cpus = (
        f"{m.cpus} CPUs" if m.cpus_usable in (None, m.cpus) else f"{m.cpus_usable} of {m.cpus} CPUs"
    )
    sections = [
        [
            f"python    {report.python.version} ({report.python.executable})",
            f"platform  {m.platform}, {m.machine}, {cpus}",
            f"versions  {_versions(report)}",
        ],
        [*_import_lines(report.import_jax), *_backend_lines(report.import_jax)],
        list(_finding_lines(report)),
        list(_artifact_lines(report.artifact)),
        list(_cache_lines(report.cache)),
    ]
    return "\n\n".join("\n".join(lines) for lines in sections)
