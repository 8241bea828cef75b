"""Cases 6 and 7: start-up of real programs, staged and not.

- ``optax training``: an MLP trained with optax, whose ``train_step(params,
  opt_state, x, y)`` takes pytrees described with ``ppy.Like``; the whole
  process and the first ``train_step`` as the program times it, in the four
  start-up modes of ``startup``.
- ``nothing staged``: the same program in a project that has not opted in,
  so ``ppy build`` stages nothing; ``ppy run`` must still not be slower than
  python (its compiles come from ppy's unstaged cache once warm).
"""

from __future__ import annotations

import sys
from pathlib import Path

from . import measure, projects
from .machine import ppy_command
from .measure import Comparison, Mode
from .startup import _jax_cache, _modes

__all__ = ["nothing_staged", "optax_training"]


def _first_calls(runs: dict[str, list[measure.Run]], case: str) -> dict[str, list[float]]:
    first: dict[str, list[float]] = {}
    for name, mode_runs in runs.items():
        values = [run.first_call_s for run in mode_runs]
        if any(value is None for value in values):
            raise SystemExit(f"{case}, {name}: no first_call_s= on its stderr")
        first[name] = [float(value) for value in values if value is not None]
    return first


def optax_training(scratch: Path, rounds: int) -> list[Comparison]:
    """Case 6: the optax training program, staged through ppy.Like."""
    project = projects.optax_training(scratch / "optax")
    runs = measure.interleave(_modes(project, scratch / "optax-caches"), rounds, scratch)
    case = "optax training"
    wall = {name: [run.wall_s for run in mode_runs] for name, mode_runs in runs.items()}
    params = {"hidden": projects.OPTAX_HIDDEN, "steps": projects.OPTAX_STEPS}
    return [
        Comparison(case, "first call", "s", "python", _first_calls(runs, case), params),
        Comparison(case, "whole process", "s", "python", wall, params),
    ]


def nothing_staged(scratch: Path, rounds: int) -> list[Comparison]:
    """Case 7: the same program with nothing staged (the project is not opted in)."""
    project = projects.optax_training(scratch / "unstaged", opted_in=False)
    caches = scratch / "unstaged-caches"
    ppy = ppy_command()
    measure.run_once([*ppy, "build"], project, {"PPY_CACHE_DIR": str(caches / "build")})
    if projects.staged_count(project) != 0:
        raise SystemExit(f"ppy build staged something in {project}, which has not opted in")
    run = [*ppy, "run", "model.ppy"]
    python = [sys.executable, "model.ppy"]
    filled = caches / "ppy-filled"
    jax_filled = caches / "jax-filled"
    measure.run_once(run, project, {"PPY_CACHE_DIR": str(filled)})
    measure.run_once(python, project, _jax_cache(jax_filled))
    copy_ppy = measure.warm_copy(filled)
    copy_jax = measure.warm_copy(jax_filled)
    modes = [
        Mode("python", python, project, lambda p: {"PPY_CACHE_DIR": str(p / "ppy-cache")}),
        Mode(
            "python + jax cache",
            python,
            project,
            lambda p: {"PPY_CACHE_DIR": str(p / "ppy-cache"), **_jax_cache(copy_jax(p))},
        ),
        Mode("ppy run cold", run, project, lambda p: {"PPY_CACHE_DIR": str(p / "ppy-cache")}),
        Mode("ppy run warm", run, project, lambda p: {"PPY_CACHE_DIR": str(copy_ppy(p))}),
    ]
    runs = measure.interleave(modes, rounds, scratch)
    wall = {name: [r.wall_s for r in mode_runs] for name, mode_runs in runs.items()}
    return [Comparison("nothing staged", "whole process", "s", "python", wall)]
