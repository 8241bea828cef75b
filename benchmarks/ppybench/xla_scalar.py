"""Case 4: the xla plugin's scalar loops, CPython against staged against numba.

The program (``projects.xla_scalar``) times one call of each loop after a
small warm-up call (which, staged, compiles the module or loads it from the
executable cache; for numba, compiles it), and the per-call cost of a
trivial scalar function. Three modes, one fresh process each per round,
interleaved: ``python model.ppy`` (the Python bodies), ``ppy run model.ppy``
(staged) and numba's ``njit`` on the same bodies. All must compute the same
values.

Inside each staged process the trivial function is also timed against the
same function jitted by jax and called with a Python scalar, the two
alternated round by round: as ``jax.jit`` returns (an array whose value may
still be computing) and with the value read (``int(...)``), which is what a
staged scalar call hands back.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from . import measure, projects
from .machine import ppy_command
from .measure import Comparison, Mode

__all__ = ["TRIVIAL_VS_JAX", "scalar_loops"]

WORKER = Path(__file__).with_name("numba_worker.py")
TRIVIAL_VS_JAX = "trivial function vs jax.jit, per call (in one process)"


def scalar_loops(
    scratch: Path, rounds: int, *, limit: int, terms: int, calls: int
) -> list[Comparison]:
    project = projects.xla_scalar(scratch / "xla", limit=limit, terms=terms, calls=calls)
    ppy = ppy_command()
    measure.run_once([*ppy, "build"], project, {"PPY_CACHE_DIR": str(scratch / "xla-build")})
    if projects.staged_count(project) == 0:
        raise SystemExit("ppy build staged no scalar function; is ppy-plugin-xla installed?")

    def private(p: Path) -> dict[str, str]:
        return {"PPY_CACHE_DIR": str(p / "ppy-cache")}

    modes = [
        Mode("CPython", [sys.executable, "model.ppy"], project, private),
        Mode("staged", [*ppy, "run", "model.ppy"], project, private),
        Mode("numba", [sys.executable, str(WORKER), "model.ppy"], project, private),
    ]
    runs = measure.interleave(modes, rounds, scratch, same_output=False)
    figures = {
        name: [json.loads(run.stdout.strip().splitlines()[-1]) for run in mode_runs]
        for name, mode_runs in runs.items()
    }
    found = []
    loops = {
        "collatz": f"collatz, longest chain below {limit}",
        "series": f"Leibniz series, {terms} terms",
        "trivial": "trivial function, per call",
    }
    for key, label in loops.items():
        values = {
            name: {figure[key + "_value"] for figure in mode_figures}
            for name, mode_figures in figures.items()
        }
        if len({value for mode_values in values.values() for value in mode_values}) != 1:
            raise SystemExit(f"{label}: the modes computed different values: {values}")
        samples = {
            name: [figure[key] for figure in mode_figures] for name, mode_figures in figures.items()
        }
        found.append(Comparison("xla scalar", label, "s", "CPython", samples, {"key": key}))
    staged = figures["staged"]
    jitted = {
        "jitted jax": [figure["jitted"] for figure in staged],
        "jitted jax, value read": [figure["jitted_read"] for figure in staged],
        "staged": [figure["trivial"] for figure in staged],
    }
    found.append(
        Comparison("xla scalar", TRIVIAL_VS_JAX, "s", "jitted jax", jitted, {"key": "trivial"})
    )
    return found
