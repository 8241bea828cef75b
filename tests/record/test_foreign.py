"""Five of jax's own examples, as their authors wrote them, recorded with
``ppy record``, built and run: the same output as python's (cold and warm),
and the calls the recording lets ppy stage served staged.

The programs (``foreign/``) are jax's ``examples/`` files with the dataset
download replaced by synthetic arrays of the same shapes (``datasets.py``),
fewer epochs, and nothing drawn or timed (matplotlib, the epoch times, the
privacy accountant): everything else as written. The counts pinned here are
what ppy stages of them; a regression fails, and a fix raises them here.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.differential import differential

pytestmark = pytest.mark.slow

FOREIGN = Path(__file__).parent / "foreign"

#: Per program, the calls served staged, by function (the programs that
#: use typed PRNG keys are in test_foreign_keys.py, so that the two files
#: run side by side).
STAGED = {
    "mnist_classifier": {"update": 6},
    "mnist_classifier_fromscratch": {"update": 6},
    "advi": {"objective": 10, "update": 10},
}


@pytest.mark.parametrize("program", sorted(STAGED))
def test_a_foreign_program_recorded_as_written_is_staged_with_the_same_output(
    tmp_path: Path, program: str
) -> None:
    assert staged_calls(tmp_path, program) == STAGED[program]


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
