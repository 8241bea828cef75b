"""``ppy explain NAME``: the decisions for a function, and where they come from.

The built decisions when the artifact is current (the rule ``ppy run``
applies, ``ppy.build.freshness.staleness``); else what the policy decides
now, before any staging. ``ppy.cli.report`` prints each trail.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ppy.artifact.read import ArtifactError, read_artifact
from ppy.build.freshness import staleness
from ppy.build.pipeline import load_project
from ppy.config import config_of
from ppy.decision import Decision
from ppy.errors import UsageError
from ppy.snapshot import take

__all__ = ["Explained", "explain"]


@dataclass(frozen=True)
class Explained:
    """The decisions that ``NAME`` names, and a note of where they come from."""

    decisions: tuple[Decision, ...]
    note: str


def _matches(name: str, decision: Decision) -> bool:
    return name in (
        decision.qualname,
        f"{decision.module}.{decision.qualname}",
        f"{decision.module}:{decision.qualname}",
    )


def explain(name: str, target: Path) -> Explained:
    """The decisions for ``name`` in the project at or above ``target``;
    ``UsageError`` saying what the project has where it has no such function."""
    project = load_project(config_of(take(target)))
    decisions: Sequence[Decision] = project.decisions
    note = "from the policy (not built yet)"
    config = project.config
    if config.artifact.exists():
        try:
            artifact = read_artifact(config.artifact)
        except ArtifactError:
            artifact = None
        installed = {p.name: p for p in project.plugins.by_name.values()}
        stale = staleness(config, artifact, lambda _names: installed)
        if artifact is not None and stale is None:
            decisions, note = artifact.decisions, f"from the artifact {config.artifact}"
        elif stale:
            note = f"from the policy; the artifact is stale: {stale}"
    found = tuple(d for d in decisions if _matches(name, d))
    if not found:
        raise _not_found(name, config.root, decisions, [m.path for m in project.modules])
    return Explained(found, note)


def _not_found(
    name: str, root: Path, decisions: Sequence[Decision], sources: Sequence[str]
) -> UsageError:
    """Why ``name`` has no trail: another name, no candidate at all, or no
    ``.ppy`` file where ppy looked."""
    if decisions:
        known = ", ".join(sorted({d.qualname for d in decisions}))
        return UsageError(
            f"no candidate function named {name!r} in {root}", remedy=f"candidates are: {known}"
        )
    if not sources:
        return UsageError(
            f"no .ppy files in {root}, so no candidate function named {name!r}",
            remedy="give the project's folder or a file in it (ppy explain NAME PATH); the "
            "project is the folder of the nearest pyproject.toml, and ppy reads the .ppy "
            "files under it",
        )
    read = f"{len(sources)} .ppy file{'s' if len(sources) != 1 else ''} read"
    return UsageError(
        f"no candidate functions in {root} ({read}), so none named {name!r}",
        remedy="a candidate is a function decorated with @jax.jit, @ppy.xla.jit or a "
        "plugin's decorator, or a module-level f = jax.jit(g); `ppy plugins` lists the "
        "decorators installed (docs/cli.md)",
    )
