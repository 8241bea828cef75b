"""``ppy record FILE [ARGS]``: run the program as python would, and write down
the signatures of its jitted calls.

The program runs on the original jitted path everywhere, with nothing
staged, and prints what python prints; ppy says nothing unless asked
(``-v``). The file is read and checked before the program starts, so a
damaged one stops the recording before any of the program's work is done,
and it is written when the program ends (``sys.exit`` and an uncaught
exception included; a process killed, or ended with ``os._exit``, writes
nothing), merged with the file as it is then, under the project's lock, so
that recordings of two programs of one project that run at once both land.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ppy.artifact.entry import Entry
from ppy.artifact.lock import build_lock
from ppy.config import Config, config_of
from ppy.discovery.module import discover_module
from ppy.errors import PpyError, UsageError
from ppy.layout import module_name
from ppy.log import get_logger
from ppy.plugin import CONTRACT, KNOWN_DECORATORS, LiveExporter, LiveRequest, Plugin
from ppy.record.exports import write_exports
from ppy.record.format import NAME
from ppy.record.observe import Recorder, candidates
from ppy.record.signatures import read_signatures, recorded, write_signatures
from ppy.run.collector import set_aside
from ppy.run.program import Program
from ppy.run.shadow import unless_shadowed
from ppy.snapshot import Recording, take

if TYPE_CHECKING:
    from ppy.record.format import Signatures

__all__ = ["record"]


def record(program: str, argv: list[str], *, replace: bool) -> Program:
    """``program`` ready to be recorded: run it as ``ppy run`` runs one (in
    the caller's frame, ``ppy.run.program.Program``), and its signatures are
    written when it ends."""
    path = Path(program)
    if not path.is_file():
        raise UsageError(f"{program}: no such file", remedy="give the path of a .ppy program")
    files = take(path)  # the project's files, read once for the recording
    config = config_of(files)
    # A damaged file stops the recording before the program runs.
    earlier = None if replace else recorded(files.recording)
    modules = [
        discover_module(config.root, source, files.source(source)) for source in files.sources()
    ]
    main = module_name(config.root.resolve(), path.resolve()) or "__main__"
    recorder = Recorder(config.root, candidates(modules), main)
    sources = {m.name: (m.path, m.sha256) for m in modules}
    unless_shadowed(program, argv)
    set_aside(config.root)
    return Program(
        program,
        argv,
        artifact=None,
        runtimes={},
        root=config.root,
        binder=recorder,
        ended=functools.partial(
            _ended, recorder, config, files.recording, earlier, sources, replace=replace
        ),
    )


def _ended(
    recorder: Recorder,
    config: Config,
    recording: Recording,
    earlier: Signatures | None,
    sources: Mapping[str, tuple[str, str]],
    *,
    replace: bool,
) -> None:
    """Export what only this process can (``ppy.record.live``), write what
    the run called and those exports, and say what was written and what was not."""
    target = recording.path
    log = get_logger()
    exported = _export_live(recorder, config)
    signatures = recorder.signatures()
    for name in [n for n in signatures.functions if not NAME.fullmatch(n)]:
        # A module named by a file the file format cannot name (``my model.ppy``).
        log.warning(
            "record.skipped",
            function=name,
            calls=signatures.functions.pop(name).calls,
            reason="its module's name is not one the signatures file holds (letters, "
            "digits, _ and -); those calls are not in the file",
            remedy="rename the file",
        )
    try:
        found = _write(recording, earlier, signatures, config.artifact, replace=replace)
    except (PpyError, OSError) as error:
        # The program has ended: its output and exit status stand, and the
        # file as it was is left alone.
        log.error("record.write_failed", path=str(target), error=str(error))
        return
    if exported is not None:
        try:
            with build_lock(config.artifact):
                write_exports(
                    config.root, config.project, config.digest, exported, sources, _written_by()
                )
        except OSError as error:
            log.warning(
                "record.export_failed",
                function="*",
                rule="write-failed",
                reason=f"the exports could not be written: {error}",
            )
    done = {e.qualname for e in exported or ()}
    for (function, why), calls in sorted(recorder.skipped.items()):
        if function in done:
            continue  # exported from the live run: what the file cannot hold does not matter
        log.warning(
            "record.skipped",
            function=function,
            calls=calls,
            reason=f"passed {why}; those calls are not in the file",
            remedy="pass static arguments as bool, int, float, str or None (a float "
            "that is not finite is not recorded: those calls stay jit's own); describe "
            "an input whose pytree cannot be recorded with ppy.Like",
        )
    log.info("record.written", path=str(target), functions=len(found.functions), runs=found.runs)


def _write(
    recording: Recording,
    earlier: Signatures | None,
    found: Signatures,
    artifact: Path,
    *,
    replace: bool,
) -> Signatures:
    """Write this run's signatures, merged with the file as it is now, under
    the project's lock: a recording of another program of the project that
    ends meanwhile is merged too, never written over. What was written.

    ``earlier`` is what the file held when the recording started
    (``recording``); it is read again only where it is another file now."""
    with build_lock(artifact):
        if replace:
            current = None
        elif recording.changed_since():
            current = read_signatures(recording.path)
        else:
            current = earlier
        if current is not None:
            current.merge(found)
            found = current
        write_signatures(recording.path, found)
    return found


def _export_live(recorder: Recorder, config: Config) -> list[Entry] | None:
    """The entries the plugin for ``jax.jit`` exported from this process, for
    the functions the build cannot make again; None where there are none to
    export. A failure is an event, never the program's: its output and exit
    status are already settled."""
    live = [
        (m, q, w)
        for m, q, w in recorder.live.values()
        if w.counts and w.function is not None and w.why is not None
    ]
    if not live:
        return None
    log = get_logger()
    try:
        exporter, settings = _exporter(config)
    except Exception as error:  # a broken plugin or configuration: the recording still stands
        log.warning("record.export_skipped", reason=f"{type(error).__name__}: {error}")
        return None
    if exporter is None:
        log.warning(
            "record.export_skipped",
            reason="no installed plugin for jax.jit exports from the recorded run "
            f"(plugin contract {CONTRACT[0]}.2); "
            + ", ".join(f"{m}.{q}" for m, q, _ in live)
            + " stay",
        )
        return None
    entries: list[Entry] = []
    for module, qualname, watch in live:
        calls = watch.calls()
        request = LiveRequest(
            root=config.root,
            settings=settings,
            module=module,
            qualname=qualname,
            function=watch.function,
            parameters=watch.parameters,
            calls=calls,
            program=module == recorder.main,
            differentiated=watch.differentiated,
            donated=watch.donated,
            gradients=tuple(recorder.gradient_calls(f"{module}.{qualname}")),
        )
        try:
            result = exporter.export_live(request)
        except Exception as error:  # a plugin bug: the function stays
            log.warning(
                "record.export_failed",
                function=f"{module}.{qualname}",
                rule="plugin-failed",
                reason=f"{type(error).__name__}: {error}",
            )
            continue
        if isinstance(result, Entry):
            entries.append(result)
            log.info(
                "record.exported",
                function=f"{module}.{qualname}",
                signatures=len(calls),
                reason=watch.why,
            )
        else:
            log.warning(
                "record.export_failed",
                function=f"{module}.{qualname}",
                rule=result.rule,
                reason=result.reason,
            )
    return entries


def _written_by() -> dict[str, str]:
    from ppy.build.pipeline import written_by

    return written_by()


def _exporter(config: Config) -> tuple[LiveExporter | None, Mapping[str, Any]]:
    """The installed plugin that stages ``jax.jit`` and can export live, with
    its settings for this project: only that plugin is loaded, at the end of
    a run that has something to export."""
    from ppy.registry import load_plugins

    name = KNOWN_DECORATORS["jax.jit"][0]
    for found in load_plugins([name]).by_name.values():
        plugin: Plugin = found
        if "jax.jit" not in plugin.decorators or not isinstance(plugin, LiveExporter):
            continue
        table = config.plugins.get(plugin.name, {})
        return plugin, plugin.validate_settings(table, str(config.config_path))
    return None, {}
