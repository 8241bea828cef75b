"""Dim constraints: what jax cannot decide of two symbols, the project states."""

from __future__ import annotations

from pathlib import Path

from ppy.artifact.read import read_artifact

from tests.conftest import PERMISSIONS, run_ppy
from tests.support.differential import differential, project

PROGRAM = """\
from typing import Annotated

import jax
import jax.numpy as jnp

import ppy

Short = Annotated[jax.Array, ppy.Shape("F"), ppy.DType("float32")]
Long = Annotated[jax.Array, ppy.Shape("N"), ppy.DType("float32")]


@jax.jit
def padded(x: Short, y: Long) -> jax.Array:
    return jnp.pad(x, (0, y.shape[0] - x.shape[0])) + y  # needs F <= N


for short, long in ((2, 4), (3, 3), (1, 6)):
    print(padded(jnp.ones(short), jnp.arange(float(long))))
try:
    padded(jnp.ones(5), jnp.ones(4))
except ValueError as error:
    print("ValueError")
"""


def test_a_constraint_stages_what_jax_finds_inconclusive(tmp_path: Path) -> None:
    root = project(tmp_path / "p", {"model.ppy": PROGRAM})
    run_ppy("build", cwd=root, env={"PPY_CACHE_DIR": str(tmp_path / "c")})
    (decision,) = read_artifact(root / ".ppy" / "artifact.ppyz").decisions
    assert decision.rule == "export-failed" and "inconclusive" in decision.reason
    assert decision.remedy is not None and "constraints = [" in decision.remedy
    # Stated, the export assumes it, and a call where it does not hold is jit's.
    (root / "pyproject.toml").write_text(PERMISSIONS + 'constraints = ["F <= N"]\n')
    compared = differential(root, cache=tmp_path / "c")
    assert compared.bound() == {"padded"} and compared.staged_calls("padded") == 3
    (fallback,) = compared.fallbacks()
    assert fallback["category"] == "constraint"
    assert fallback["reason"] == "F <= N does not hold for F=5, N=4"
