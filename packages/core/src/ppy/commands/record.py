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
from pathlib import Path
from typing import TYPE_CHECKING

from ppy.artifact.lock import build_lock
from ppy.config import config_of
from ppy.discovery.module import discover_module
from ppy.errors import UsageError
from ppy.layout import module_name
from ppy.log import get_logger
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
            _ended, recorder, files.recording, earlier, config.artifact, replace=replace
        ),
    )


def _ended(
    recorder: Recorder,
    recording: Recording,
    earlier: Signatures | None,
    artifact: Path,
    *,
    replace: bool,
) -> None:
    """Write what the run called, and say what was written and what was not."""
    target = recording.path
    found = _write(recording, earlier, recorder.signatures(), artifact, replace=replace)
    log = get_logger()
    for (function, why), calls in sorted(recorder.skipped.items()):
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
