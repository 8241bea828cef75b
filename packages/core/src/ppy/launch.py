"""``ppy run``: make sure the artifact is current, then run the program with it.

stdout belongs to the program, so nothing here prints; problems (a damaged
artifact, a failed build) are warnings on stderr and the program runs with
whatever could be bound, the rest as ordinary calls.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ppy.errors import ConfigError, PpyError, UsageError

if TYPE_CHECKING:
    from ppy.artifact import Artifact
    from ppy.plugin import Plugin

__all__ = ["launch"]


def launch(program: Path, argv: list[str], *, build: bool = True) -> int:
    from ppy.artifact import read_artifact
    from ppy.config import load_config
    from ppy.log import get_logger
    from ppy.registry import load_runtimes
    from ppy.run import run_program

    if not program.is_file():
        raise UsageError(f"{program}: no such file", remedy="give the path of a .ppy program")
    log = get_logger()
    config = load_config(program)
    artifact: Artifact | None = None
    if config.artifact.exists():
        try:
            artifact = read_artifact(config.artifact)
        except PpyError as error:
            log.warning("run.artifact_unreadable", path=str(config.artifact), error=str(error))
    if build:
        from ppy.freshness import staleness

        try:
            stale = staleness(config, artifact, _installed_plugins)
            if stale is not None:
                artifact = _rebuilt(program, stale, artifact, log)
        except ConfigError:
            raise
        except PpyError as error:
            log.warning("run.build_failed", error=str(error))
    kinds = {entry.kind for entry in artifact.entries} if artifact is not None else set()
    runtimes = load_runtimes(kinds).by_name if kinds else {}
    code: int = run_program(
        program.resolve(), argv, artifact=artifact, runtimes=runtimes, root=config.root
    )
    return code


def _installed_plugins(names: frozenset[str]) -> dict[str, Plugin]:
    """The named plugins that are installed and load, by name."""
    from ppy.registry import load_plugins

    return {p.name: p for p in load_plugins(names).by_name.values()}


def _rebuilt(program: Path, stale: str, artifact: Artifact | None, log: Any) -> Artifact | None:
    """The rebuilt artifact; or, where no plugin is installed, the one there was.

    A runtime-only install cannot stage anything, so a build there would only
    replace an artifact made elsewhere by one with no entries.
    """
    from ppy.build import build
    from ppy.registry import load_plugins

    plugins = load_plugins()
    if not plugins.by_name:
        log.warning(
            "run.stale",
            reason=stale,
            remedy="no ppy plugin is installed here to rebuild it; run `ppy build` where "
            "they are, or install them",
        )
        return artifact
    log.info("run.build", reason=stale)
    result = build(program, plugins=plugins)
    for decision in result.failed:
        log.warning(
            "run.build_failed",
            module=decision.module,
            function=decision.qualname,
            reason=decision.reason,
        )
    return result.artifact
