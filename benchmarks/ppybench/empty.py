"""Case 12: what a warm run costs of itself, on a program that does nothing.

``model.ppy`` is ``print("hi")`` in a project with a pyproject and a built
(empty) artifact. Three modes, fresh processes interleaved: ``python -c``,
``python model.ppy`` and ``ppy run --warm model.ppy`` from a server that one
untimed run started. With no jax to import and nothing to bind, what is left
of ``ppy run --warm`` is ppy's own path: the client's imports and its
connection, the fork, and what the child does before the program's first line.
"""

from __future__ import annotations

import sys
from pathlib import Path

from . import measure, projects
from .machine import ppy_command
from .measure import Comparison, Mode
from .startup import served_cache, warm_server

__all__ = ["EMPTY", "empty_program"]

EMPTY = "warm run, empty program"
PROGRAM = 'print("hi")\n'


def empty_program(scratch: Path, rounds: int) -> list[Comparison]:
    project = projects.empty_program(scratch / "empty")
    caches = scratch / "empty-caches"
    served = served_cache(caches)
    measure.run_once([*ppy_command(), "build"], project, {"PPY_CACHE_DIR": str(served)})
    env = {"PPY_CACHE_DIR": str(served)}
    modes = [
        Mode("python -c", [sys.executable, "-c", PROGRAM], project, lambda _p: env),
        Mode("python", [sys.executable, "model.ppy"], project, lambda _p: env),
        Mode(
            "ppy run --warm",
            [*ppy_command(), "run", "--warm", "model.ppy"],
            project,
            lambda _p: env,
        ),
    ]
    with warm_server(project, caches):
        runs = measure.interleave(modes, rounds, scratch)
    wall = {name: [run.wall_s for run in mode_runs] for name, mode_runs in runs.items()}
    return [Comparison(EMPTY, "whole process", "s", "python", wall)]
