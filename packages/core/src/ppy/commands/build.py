"""``ppy build``: the project read, discovered and decided, each function
staged, and the artifact written, under the project's build lock.

``ppy.build.pipeline`` does each step; this puts them in order for the
command, and ``ppy.cli`` prints the result.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ppy.artifact.lock import build_lock
from ppy.build.pipeline import BuildResult, build_project, load_project, read_previous
from ppy.config import config_of
from ppy.errors import UsageError
from ppy.progress import SILENT, Progress
from ppy.snapshot import take

if TYPE_CHECKING:
    from ppy.registry import Registry

__all__ = ["build"]


def build(
    target: Path, *, plugins: Registry | None = None, progress: Progress = SILENT
) -> BuildResult:
    """Build the artifact for the project at ``target`` and write it.

    The project's files are read once, first (``ppy.snapshot``): the
    configuration's digest and what is staged come from the same bytes.
    Loading comes first, outside the build lock, so a configuration error is
    found before anything is created in the project; then, under the lock,
    the previous artifact is read and the build made: a second build waits,
    then reuses what the first wrote.
    """
    if not target.exists():
        raise UsageError(f"{target}: no such file or folder", remedy="give a project folder")
    project = load_project(config_of(take(target)), plugins)
    with build_lock(project.config.artifact):
        return build_project(project, read_previous(project.config), progress)
