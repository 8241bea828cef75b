"""Case 3: per-call cost of a staged call against the jitted call, in process.

The program is built with ``ppy build`` and run with ``ppy run``; inside it,
each staged function is timed against its own jitted original
(``__ppy_original__``) on the same arrays: a small input, a medium one, a
params tree of ten arrays (``ppy.Like``), and an input the description
refuses, whose call falls back to the jitted one.
Each figure is the best of five rounds of many calls after warm-up; the
samples are one per fresh process. Each round also runs the program with
``ppy run --warm``, forked from a warm-start server, whose calls must cost
what they cost in a process of its own.
"""

from __future__ import annotations

import json
from pathlib import Path

from . import measure, projects
from .machine import ppy_command
from .measure import Comparison
from .startup import served_cache, warm_server

__all__ = ["call_overhead"]

#: The figures of a run forked from a warm-start server, by side.
WARM = {"jitted": "jitted (--warm)", "staged": "staged (--warm)"}
INPUTS = {
    "small": "small input (8x4)",
    "medium": "medium input (64x256)",
    "tree": "10-leaf params tree",
    "fallback": "fallback (refused input)",
}


def call_overhead(scratch: Path, processes: int, calls: int) -> list[Comparison]:
    project = projects.overhead(scratch / "overhead", calls)
    ppy = ppy_command()
    measure.run_once([*ppy, "build"], project, {"PPY_CACHE_DIR": str(scratch / "overhead-build")})
    samples: dict[str, dict[str, list[float]]] = {
        name: {side: [] for side in ("jitted", "staged", *WARM.values())} for name in INPUTS
    }
    with warm_server(project, scratch / "overhead-caches"):
        served = {"PPY_CACHE_DIR": str(served_cache(scratch / "overhead-caches"))}
        for index in range(processes):
            cache = {"PPY_CACHE_DIR": str(scratch / f"overhead-cache-{index}")}
            for command, env, sides in (
                ([*ppy, "run", "model.ppy"], cache, {"jitted": "jitted", "staged": "staged"}),
                ([*ppy, "run", "--warm", "model.ppy"], served, WARM),
            ):
                run = measure.run_once(command, project, env)
                figures = json.loads(run.stdout.strip().splitlines()[-1])
                for name in INPUTS:
                    for side, mode in sides.items():
                        samples[name][mode].append(figures[name][side])
    return [
        Comparison("per-call overhead", label, "s", "jitted", samples[name], {"calls": calls})
        for name, label in INPUTS.items()
    ]
