"""``ppy run``: what is done before the program starts (the artifact, current,
and its runtimes), and the program made ready on ``ppy.run``'s engine.

The configuration and the artifact are read once here; when the artifact is
stale and a plugin is installed, the build is handed both rather than
reading them again. stdout belongs to the program, so nothing here prints;
problems (a damaged artifact, a failed build) are warnings on stderr and the
program runs with whatever could be bound, the rest as ordinary calls.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ppy.config import config_of
from ppy.decision import Outcome, nothing_staged
from ppy.errors import ConfigError, PpyError, UsageError, reader_gone
from ppy.layout import not_a_folder
from ppy.log import configure, get_logger
from ppy.run.collector import set_aside
from ppy.run.program import Program
from ppy.run.shadow import unless_shadowed
from ppy.snapshot import take

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ppy.artifact.model import Artifact
    from ppy.build.pipeline import Project
    from ppy.config import Config
    from ppy.request import RunRequest
    from ppy.run.timings import Timings
    from ppy.runtime import Runtime

__all__ = ["Prepared", "launch", "prepare", "run"]


@dataclass(frozen=True)
class Prepared:
    """Everything a run needs besides the program: the project root, the
    artifact to bind from (None: run the plain program) and a runtime per kind."""

    root: Path
    artifact: Artifact | None
    runtimes: Mapping[str, Runtime]


def run(request: RunRequest) -> int:
    """``ppy run`` as a warm server's child runs it: the request the client
    parsed, run here, cold, whatever its warm wish (this process is the warm
    run). Its exit code, as ``ppy.cli.main.main`` gives it.

    The program runs in this frame, as ``ppy.cli.main.main`` runs it in its
    own: called from the server's entry, the frames a program sees above its
    own are the entry's and this one, as under the ``ppy`` script."""
    configure(request.verbosity, request.log_format)
    try:
        program = launch(request)
    except PpyError as error:
        if sys.stderr is not None:
            print(f"ppy: error: {error}", file=sys.stderr)
        return error.exit_code
    except KeyboardInterrupt:
        return 130
    try:
        with program as ran:
            ran()
        return program.end()
    except BrokenPipeError:
        return reader_gone()


def launch(request: RunRequest, *, config: Config | None = None) -> Program:
    """Prepare ``request``'s run, and give the program ready to run (the
    caller runs it, in its own frame: ``ppy.run.program.Program``). The
    program is the path as typed, which the program sees as ``sys.argv[0]``;
    ``config``, the program's configuration where it was read already."""
    timings = _timings()
    prepared = prepare(Path(request.program), build=request.build, config=config)
    argv = list(request.argv)
    unless_shadowed(request.program, argv)
    set_aside(prepared.root)
    program = Program(
        request.program,
        argv,
        artifact=prepared.artifact,
        runtimes=prepared.runtimes,
        root=prepared.root,
        ended=timings.ended if timings is not None else None,
    )
    if timings is not None:
        timings.mark("ready")
    return program


def _timings() -> Timings | None:
    """The run's timings, where ``ppy doctor --program`` asks for them."""
    if not os.environ.get("PPY_TIMINGS"):
        return None
    from ppy.run.timings import start  # for start-up speed: only the doctor's runs

    return start()


def prepare(program: Path, *, build: bool = True, config: Config | None = None) -> Prepared:
    """Read the configuration (unless given) and artifact, rebuild a stale one
    when ``build``, and load the runtimes for the kinds it holds."""
    if not program.is_file():
        raise UsageError(f"{program}: no such file", remedy="give the path of a .ppy program")
    if config is None:
        config = config_of(take(program))  # the project's files, read once for the run
    unusable = _unusable_state(config)
    if unusable is not None:
        get_logger().warning("run.state_unusable", path=unusable.path, error=str(unusable))
        return Prepared(config.root, None, {})
    artifact = _read(config)
    if build:
        # Here for start-up speed: ``--no-build`` imports neither.
        from ppy.build.freshness import staleness
        from ppy.registry import installed_plugins

        try:
            stale = staleness(config, artifact, installed_plugins)
            if stale is not None:
                artifact = _rebuilt(config, stale, artifact)
        except ConfigError:
            raise
        except PpyError as error:
            get_logger().warning("run.build_failed", error=str(error))
    kinds: set[str] = set()
    if artifact is not None:
        # The kinds of the candidates that stay too: a runtime may serve a
        # program with nothing bound (the jax runtime's compile cache).
        kinds = {entry.kind for entry in artifact.entries}
        kinds |= {d.kind for d in artifact.decisions if d.kind is not None}
        _say_if_nothing_staged(artifact)
    runtimes = _runtimes(kinds) if kinds else {}
    return Prepared(config.root, artifact, runtimes)


def _runtimes(kinds: set[str]) -> Mapping[str, Runtime]:
    # Here for start-up speed: stevedore is imported only where the artifact
    # holds a kind to load.
    from ppy.registry import load_runtimes

    return load_runtimes(kinds).by_name


def _say_if_nothing_staged(artifact: Artifact) -> None:
    """One warning when the program has candidate functions and none is staged."""
    found = nothing_staged(artifact.decisions)
    if found is not None:
        reason, remedy = found
        get_logger().warning(
            "run.nothing_staged",
            candidates=len(artifact.decisions),
            reason=reason,
            remedy=remedy,
        )


def _unusable_state(config: Config) -> ConfigError | None:
    """Why ppy's state in the project cannot be used (the recording cannot be
    read, or a folder on the artifact's path is a file), naming the real
    cause; None where it can.

    The program runs all the same, every call on jit's path: with the
    recording unread, nothing tells whether an artifact describes the
    project, nor can a build stage it. ``ppy build`` and ``ppy record``
    stop on the same error instead, since they cannot do their work."""
    recording = config.files().recording
    if recording.error is not None:
        # Here for start-up speed: only a recording that could not be read
        # imports its reader.
        from ppy.record.signatures import unreadable

        return unreadable(recording)
    return not_a_folder(config.artifact)


def _read(config: Config) -> Artifact | None:
    # Here for start-up speed: a project with no artifact never imports the reader.
    from ppy.artifact.read import read_artifact

    if not config.artifact.exists():
        return None
    try:
        return read_artifact(config.artifact)
    except PpyError as error:
        get_logger().warning("run.artifact_unreadable", path=str(config.artifact), error=str(error))
        return None


def _imports_work(project: Project) -> tuple[str, str] | None:
    """A module the build would import to stage a function whose import runs
    the program's work (``ppy.discovery.work``), and that work; or None."""
    # Here for start-up speed, as all a rebuild needs: only a stale artifact
    # imports discovery and the build.
    from ppy.discovery.work import importing_work

    working = importing_work(project.modules)
    for decision in project.decisions:
        plugin = project.plugins.by_name.get(decision.plugin or "")
        if (
            decision.outcome is Outcome.ALLOWED
            and plugin is not None
            and plugin.requirements.build_execution
            and decision.module in working
        ):
            return working[decision.module]
    return None


def _rebuilt(config: Config, stale: str, artifact: Artifact | None) -> Artifact | None:
    """The rebuilt artifact; or, where no plugin is installed, the one there was.

    A runtime-only install cannot stage anything, so a build there would only
    replace an artifact made elsewhere by one with no entries.
    """
    # Here for start-up speed: only a stale artifact imports the build.
    from ppy.artifact.lock import build_lock
    from ppy.build.pipeline import build_project, load_project
    from ppy.registry import load_plugins

    log = get_logger()
    plugins = load_plugins()
    if not plugins.by_name:
        log.warning(
            "run.stale",
            reason=stale,
            remedy="no ppy plugin is installed here to rebuild it; run `ppy build` where "
            "they are, or install them",
        )
        return artifact
    project = load_project(config, plugins)
    working = _imports_work(project)
    if working is not None:
        module, line = working
        log.warning(
            "run.build_skipped",
            reason=f"{stale}; {module} does the program's work when imported ({line}), and "
            "building imports it, so a build started here would run that work a second time",
            remedy="run `ppy build` yourself, or move the work into main() under "
            'if __name__ == "__main__":',
        )
        return artifact
    log.info("run.build", reason=stale)
    with build_lock(config.artifact):  # writes take turns with a `ppy build`
        result = build_project(project, artifact)
    for decision in result.failed:
        log.warning(
            "run.build_failed",
            module=decision.module,
            function=decision.qualname,
            reason=decision.reason,
        )
    return result.artifact
