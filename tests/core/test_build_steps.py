"""The build's reuse step works from the artifact it is handed, not only the file.

``ppy run`` reads the configuration and the artifact to decide that a build
is needed, and hands both to ``build_project``; the build must reuse from
that artifact and settle every function, without reading the file again.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ppy.build.pipeline import build_project, load_project
from ppy.commands.build import build
from ppy.config import load_config
from ppy.decision import Outcome

SOURCE = """\
from ppy import xla

@xla.jit
def double(x: int) -> int:
    return 2 * x

@xla.jit
def half(x: float) -> float:
    return x / 2.0
"""
#: Functions this small stay Python by default (``not-worth-staging``).
FORCED = '[project]\nname = "demo"\n[tool.ppy.plugins.xla]\nforce-staging = true\n'


def test_build_project_reuses_entries_from_the_artifact_it_is_given(
    make_project: Callable[..., Path], cache_dir: Path
) -> None:
    root = make_project({"model.ppy": SOURCE}, pyproject=FORCED)
    first = build(root)
    assert [d.outcome for d in first.decisions] == [Outcome.STAGED, Outcome.STAGED]
    config = load_config(root)
    config.artifact.unlink()  # only the in-memory artifact is left to reuse from

    again = build_project(load_project(config), first.artifact)

    assert [d.outcome for d in again.decisions] == [Outcome.REUSED, Outcome.REUSED]
    payloads = [(e.key, dict(e.payload)) for e in again.artifact.entries]
    assert payloads == [(e.key, dict(e.payload)) for e in first.artifact.entries]
    assert config.artifact.is_file()


def test_build_project_without_a_previous_artifact_stages_again(
    make_project: Callable[..., Path], cache_dir: Path
) -> None:
    root = make_project({"model.ppy": SOURCE}, pyproject=FORCED)
    build(root)  # the file exists, but the caller says there is nothing to reuse

    again = build_project(load_project(load_config(root)), None)

    assert [d.outcome for d in again.decisions] == [Outcome.STAGED, Outcome.STAGED]
    assert [m.stage_keys for m in again.artifact.modules] == [
        {"xla": again.artifact.modules[0].stage_keys["xla"]}
    ]
