"""The floor: what every process that uses jax pays before the program's own work.

Two modes, fresh processes interleaved: ``import jax`` alone, and ``import
jax`` followed by ``jax.devices()``, which starts the backend (on a TPU, opens
the chip). The second is the floor the accelerator issue measures the
whole-process targets against: no program that computes with jax ends
sooner, and a forked child cannot inherit an open chip, so neither ``ppy run``
nor a warm-start server can take it away. On the CPU the two differ by the
CPU client's start, a few milliseconds.
"""

from __future__ import annotations

import sys
from pathlib import Path

from . import measure
from .measure import Comparison, Mode

__all__ = ["FLOOR", "FLOOR_LABEL", "FLOOR_MODE", "IMPORT_MODE", "floor"]

FLOOR = "floor"
FLOOR_LABEL = "whole process"
IMPORT_MODE = "import jax"
FLOOR_MODE = "import jax, open the backend"


def floor(scratch: Path, rounds: int) -> list[Comparison]:
    scratch.mkdir(parents=True, exist_ok=True)
    modes = [
        Mode(IMPORT_MODE, [sys.executable, "-c", "import jax"], scratch),
        Mode(FLOOR_MODE, [sys.executable, "-c", "import jax; jax.devices()"], scratch),
    ]
    runs = measure.interleave(modes, rounds, scratch)
    samples = {name: [run.wall_s for run in mode_runs] for name, mode_runs in runs.items()}
    return [Comparison(FLOOR, FLOOR_LABEL, "s", IMPORT_MODE, samples)]
