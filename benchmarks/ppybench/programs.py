"""Cases 6 to 11: start-up of real programs, staged and not, and what recording costs.

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
from .startup import first_calls, interleaved

__all__ = [
    "MAIN_BLOCK",
    "RECORDED",
    "SHARDED",
    "UNANNOTATED",
    "nothing_staged",
    "optax_training",
    "main_block",
    "optax_unannotated",
    "recording",
    "sharded",
]

SHARDED = "4-device data-parallel MLP"
RECORDED = "recording, examples/80_recorded"
UNANNOTATED = "optax training, unannotated"
MAIN_BLOCK = "unannotated program in the style of jax's examples"


def optax_training(scratch: Path, rounds: int) -> list[Comparison]:
    """Case 6: the optax training program, staged through ppy.Like."""
    project = projects.optax_training(scratch / "optax")
    return _training(project, scratch / "optax-caches", rounds, "optax training")


def optax_unannotated(scratch: Path, rounds: int) -> list[Comparison]:
    """Case 10: the same program with no annotation at all, staged from one
    ``ppy record`` run; and what recording costs on it, interleaved with python."""
    project = projects.optax_unannotated(scratch / "optax-unannotated")
    found = _training(project, scratch / "optax-unannotated-caches", rounds, UNANNOTATED)
    env = {"PPY_CACHE_DIR": str(scratch / "optax-unannotated-record")}
    python = Mode("python", [sys.executable, "model.ppy"], project, lambda _p: env)
    record = Mode("ppy record", [*ppy_command(), "record", "model.ppy"], project, lambda _p: env)
    runs = measure.interleave([python, record], rounds, scratch)
    wall = {name: [r.wall_s for r in mode_runs] for name, mode_runs in runs.items()}
    return [*found, Comparison(UNANNOTATED, "recording", "s", "python", wall)]


def main_block(scratch: Path, rounds: int) -> list[Comparison]:
    """Case 11: examples/85_main_block, written as jax's own examples are
    (everything in main(), example_libraries.optimizers), staged from one
    ``ppy record`` run; and what recording costs on it, interleaved with python."""
    project = projects.main_block(scratch / "main-block")
    found = _training(project, scratch / "main-block-caches", rounds, MAIN_BLOCK)
    env = {"PPY_CACHE_DIR": str(scratch / "main-block-record")}
    python = Mode("python", [sys.executable, "model.ppy"], project, lambda _p: env)
    record = Mode("ppy record", [*ppy_command(), "record", "model.ppy"], project, lambda _p: env)
    runs = measure.interleave([python, record], rounds, scratch)
    wall = {name: [r.wall_s for r in mode_runs] for name, mode_runs in runs.items()}
    return [*found, Comparison(MAIN_BLOCK, "recording", "s", "python", wall)]


def _training(project: Path, caches: Path, rounds: int, case: str) -> list[Comparison]:
    runs, start = interleaved(project, caches, rounds, case)
    wall = {name: [run.wall_s for run in mode_runs] for name, mode_runs in runs.items()}
    params = {"hidden": projects.OPTAX_HIDDEN, "steps": projects.OPTAX_STEPS}
    return [
        Comparison(case, "first call", "s", "python", first_calls(runs, case), params),
        Comparison(case, "whole process", "s", "python", wall, params),
        start,
    ]


def nothing_staged(scratch: Path, rounds: int) -> list[Comparison]:
    """Case 7: the same program with nothing staged (the project is not opted in)."""
    project = projects.optax_training(scratch / "unstaged", opted_in=False)
    case = "nothing staged"
    runs, start = interleaved(project, scratch / "unstaged-caches", rounds, case, staged=False)
    wall = {name: [r.wall_s for r in mode_runs] for name, mode_runs in runs.items()}
    return [Comparison(case, "whole process", "s", "python", wall), start]


def recording(scratch: Path, rounds: int) -> list[Comparison]:
    """Case 9: what ``ppy record`` costs over python, on examples/80_recorded
    (400 jitted calls), whole process, interleaved; each recording starts afresh."""
    project = projects.recorded_example(scratch / "recorded")
    env = {"PPY_CACHE_DIR": str(scratch / "recorded-cache")}
    python = Mode("python", [sys.executable, "model.ppy"], project, lambda _p: env)
    record = Mode(
        "ppy record", [*ppy_command(), "record", "--replace", "model.ppy"], project, lambda _p: env
    )
    runs = measure.interleave([python, record], rounds, scratch)
    wall = {name: [r.wall_s for r in mode_runs] for name, mode_runs in runs.items()}
    return [Comparison(RECORDED, "whole process", "s", "python", wall)]


def sharded(scratch: Path, rounds: int) -> list[Comparison]:
    """Case 8: examples/60_sharded, the data-parallel MLP on four devices."""
    project = projects.sharded_example(scratch / "sharded")
    runs, start = interleaved(project, scratch / "sharded-caches", rounds, SHARDED)
    wall = {name: [r.wall_s for r in mode_runs] for name, mode_runs in runs.items()}
    return [Comparison(SHARDED, "whole process", "s", "python", wall, {"devices": 4}), start]
