"""Small programs with nothing in them for ppy, in the style of jax's
examples folder, recorded with ``ppy record``, built and run: the same
output as python's (cold and warm), and the calls the recording lets ppy
stage served staged.

The programs (``foreign/``) are written as jax's ``examples/`` writes its
programs: everything in ``main()`` or under the main guard, jitted functions
made there that close over the optimizer's functions,
``jax.example_libraries``' ``stax`` and ``optimizers``, absl flags, globals
the main guard sets, and no annotations. Their
data are small synthetic arrays (``datasets.py``, a fixed NumPy seed), and
they print a loss or an accuracy as they go, so that the comparison with
python's output means something. The counts pinned here are what ppy stages
of them; a regression fails, and a fix raises them here.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import jax
import pytest

from tests.support.differential import differential

pytestmark = pytest.mark.slow

FOREIGN = Path(__file__).parent / "foreign"

#: Per program, the calls served staged, by function (the programs that
#: use PRNG keys are in test_foreign_keys.py, so that the two files run side
#: by side). Every call of every function not named here or counted short
#: takes jit's path, for the reason on its line.
STAGED = {
    "stax_classifier": {"main.<locals>.update": 12, "loss_and_accuracy": 6},
    # update's last batch of each epoch is short: one export, symbolic in it.
    "scratch_mlp": {"update": 9, "accuracy": 6},
    # residuals' plain calls, and its calls under jax.jacrev by jit's primal
    # program; jacrev batches the pullback, which is traced as jit traces it.
    "curve_fits": {"gauss_newton": 5, "newton": 4, "main.<locals>.at": 1, "residuals": 10},
    # evidence, jit(partial(...)) of main()'s variables, exported by the recorded
    # run; predict is made anew for each length: its export holds the last
    # kernel, and the first call, which reads the other, takes jit's path.
    # On jax 0.12, jit gives predict's program the kernel matrix of the data
    # it closes over as an argument, and predict stays (rule constants).
    "kernel_regression": {"main.<locals>.evidence": 1, "main.<locals>.predict": 1},
}

#: What jit hands its program as arguments where this jax does (the
#: ``constants`` rule): those functions stay.
HOISTED = {"kernel_regression": {"main.<locals>.predict"}}


@pytest.mark.parametrize("program", sorted(STAGED))
def test_a_foreign_program_recorded_as_written_is_staged_with_the_same_output(
    tmp_path: Path, program: str
) -> None:
    expected = STAGED[program]
    if jax.config.values.get("jax_use_simplified_jaxpr_constants", False):
        expected = {k: v for k, v in expected.items() if k not in HOISTED.get(program, ())}
    assert staged_calls(tmp_path, program) == expected


def staged_calls(tmp_path: Path, program: str) -> dict[str, int]:
    """Record ``program`` as written, build, run it both ways (asserting the
    same output as python's): the calls served staged, by function."""
    root = tmp_path / "project"
    shutil.copytree(FOREIGN, root)
    cache = tmp_path / "cache"
    # On the CPU, as the suite runs: absl's logging, which one of them imports,
    # would print jax's search for a TPU with the time of day.
    platform = {"JAX_PLATFORMS": "cpu"}
    environ = {**os.environ, "PPY_CACHE_DIR": str(cache), **platform}
    recorded = subprocess.run(
        [sys.executable, "-m", "ppy", "--log-format", "json", "record", f"{program}.ppy"],
        cwd=root,
        env=environ,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert recorded.returncode == 0, recorded.stderr
    assert "Traceback" not in recorded.stderr
    compared = differential(
        root, cache=cache, program=f"{program}.ppy", env=platform, quiet_stderr=None
    )
    staged: dict[str, int] = {}
    for call in compared.named("run.call"):
        if call.get("path") == "staged":
            name = str(call["function"])
            staged[name] = staged.get(name, 0) + 1
    return staged
