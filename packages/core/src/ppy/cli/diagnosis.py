"""What ``ppy doctor`` prints: the report ``ppy.commands.doctor`` gathered,
as text on one screen or as one JSON object (docs/cli.md lists its fields).

Nothing here reads the project or measures anything; it only formats.
"""

from __future__ import annotations

import os
import textwrap
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from ppy.cache import human_size
from ppy.commands.doctor import (
    SLOW_VERSIONS,
    VERSIONED,
    ArtifactReport,
    CacheReport,
    Count,
    ProgramRun,
    Report,
)
from ppy.commands.importtime import BackendStart, ImportProfile, by_package
from ppy.decision import Decision

__all__ = ["FORMAT_VERSION", "render_text", "to_json"]

#: The version of ``to_json``'s layout; a field renamed or removed bumps it.
FORMAT_VERSION = 1
#: How many functions of each outcome the text lists before "and N more".
_LISTED = 8
#: The text's width: a screen, not a log line.
_WIDTH = 100


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
        "program": _program_json(report.program),
    }


def _imported_by(before_program: bool | None) -> str | None:
    if before_program is None:
        return None
    return "ppy" if before_program else "program"


def _count_json(count: Count) -> dict[str, Any]:
    return {"count": count.count, "seconds": _seconds(count.seconds)}


def _program_json(run: ProgramRun | None) -> dict[str, Any] | None:
    """Where the program's run went (``--program``); None when none was asked for."""
    if run is None:
        return None
    return {
        "command": list(run.command),
        "exit_code": run.exit_code,
        "failure": run.failure,
        "seconds": _seconds(run.seconds),
        "interpreter_seconds": _seconds(run.interpreter),
        "import_jax_seconds": _seconds(run.import_jax),
        "jax_imported_by": _imported_by(run.jax_before_program),
        "backend_start_seconds": _seconds(run.backend_start),
        "plugins_seconds": _seconds(run.plugins),
        "platforms": {name: _seconds(value) for name, value in sorted(run.platforms.items())},
        "before_program_seconds": _seconds(run.before_program),
        "program_seconds": _seconds(run.program),
        "trace": _count_json(run.trace),
        "lower": _count_json(run.lower),
        "compile": _count_json(run.compile),
        "cache_loads": _count_json(run.loads),
        "eager_loads": run.eager_loads,
        "cache_hits": run.cache_hits,
        "bound": run.bound,
        "staged_calls": run.staged_calls,
        "original_calls": run.original_calls,
        "fallbacks": dict(sorted(run.fallbacks.items())),
        "rest_seconds": _seconds(run.rest),
        "exit_seconds": _seconds(run.exit),
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


def _import_lines(profile: ImportProfile | None, program: bool) -> Iterator[str]:
    if profile is None and program:
        yield "import jax  timed in the program's run (below)"
        return
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


def _backend_lines(profile: ImportProfile | None, program: bool) -> Iterator[str]:
    if profile is None and program:
        return
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
    if backend.platform == "tpu":
        yield from _wrapped(_transfer_buffer(os.environ.get(TRANSFER_BUFFER)), "  ")
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


#: libtpu's setting for the host memory it pins for transfers at the chip's
#: open: most of the open's time (docs/accelerators.md, measured).
TRANSFER_BUFFER = "TPU_PREMAPPED_BUFFER_SIZE"


def _transfer_buffer(setting: str | None) -> str:
    """What the chip's open spent its time on, and the setting that trades it."""
    size = "libtpu's default, 4 GiB" if setting is None else f"{setting} bytes, as set"
    return (
        f"most of the open is libtpu pinning host memory for transfers ({TRANSFER_BUFFER}: "
        f"{size}); a smaller buffer opens faster and makes each larger transfer slower "
        "(docs/accelerators.md, what opening the chip costs)"
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


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


def _program_lines(run: ProgramRun) -> Iterator[str]:
    shown = " ".join(run.command[2:])  # from "ppy": the interpreter is the one above
    yield f"program run  `{shown}`: {_s(run.seconds)}, exit status {run.exit_code}"
    yield "  its output was captured and is not shown"
    if run.failure is not None:
        yield from _wrapped(f"it failed: {run.failure}", "  ")
    by = {None: "", True: " (by ppy, before the program)", False: " (by the program)"}
    rows = [
        ("interpreter start and import ppy", _s(run.interpreter)),
        (f"import jax{by[run.jax_before_program]}", _s(run.import_jax)),
        ("backend start", _s(run.backend_start)),
    ]
    if run.plugins is not None:
        rows.append(("  plugins found and registered", _s(run.plugins)))
    for platform, seconds in sorted(run.platforms.items()):
        rows.append((f"  {platform} client", _s(seconds)))
    rows += [
        ("ppy before the program's first line", _s(run.before_program)),
        ("the program, first line to last", _s(run.program)),
        (f"  traces ({run.trace.count})", _s(run.trace.seconds)),
        (f"  lowerings to MLIR ({run.lower.count})", _s(run.lower.seconds)),
        (f"  XLA compiles ({run.compile.count})", _s(run.compile.seconds)),
        (f"  executables loaded from a cache ({run.loads.count})", _s(run.loads.seconds)),
        (f"  eager ops served from ppy's cache ({run.eager_loads})", "-"),
        ("  the rest: eager execution, Python, staged calls", _s(run.rest)),
        ("after the program's last line, to the exit", _s(run.exit)),
    ]
    width = max(len(label) for label, _ in rows)
    for label, value in rows:
        yield f"  {label.ljust(width)}  {value}"
    fallbacks = ", ".join(f"{name} {n}" for name, n in sorted(run.fallbacks.items()))
    yield (
        f"  {_plural(run.bound, 'staged function')} bound, {_plural(run.staged_calls, 'call')} "
        f"staged, {run.original_calls} to the original; "
        f"fallback reasons: {fallbacks or 'none'}"
    )
    yield (
        f"  ppy's executable cache answered {_plural(run.cache_hits, 'read')} "
        "(staged executables and unstaged computations)"
    )


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
        [
            *_import_lines(report.import_jax, report.program is not None),
            *_backend_lines(report.import_jax, report.program is not None),
        ],
        list(_finding_lines(report)),
        list(_artifact_lines(report.artifact)),
        list(_cache_lines(report.cache)),
    ]
    if report.program is not None:
        sections.append(list(_program_lines(report.program)))
    return "\n\n".join("\n".join(lines) for lines in sections)
