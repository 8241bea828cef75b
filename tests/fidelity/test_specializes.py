"""A description that claims more sizes than the body serves (shape specialization)."""

from __future__ import annotations

from pathlib import Path

from ppy.artifact.read import read_artifact

from tests.conftest import PERMISSIONS, run_ppy
from tests.fidelity.support import differential, project

PROGRAM = """\
from typing import Annotated

import jax
import jax.numpy as jnp

import ppy

Batch = Annotated[jax.Array, ppy.Shape("B", 4), ppy.DType("float32")]


@jax.jit
def branches(x: Batch) -> jax.Array:
    if x.shape[0] == 1:  # the trace sees B, a symbol: this is never true there
        return x.sum(axis=-1) * 100
    return x.sum(axis=-1)


@jax.jit
def head(x: Batch) -> jax.Array:
    return x[:2].sum(axis=-1)  # jax exports this as min(B, 2) rows: honest too


@jax.jit
def honest(x: Batch) -> jax.Array:
    return jnp.tanh(x).sum(axis=-1)


for rows in (1, 2, 3):
    x = jnp.arange(rows * 4, dtype=jnp.float32).reshape(rows, 4)
    print(branches(x), head(x), honest(x))
"""


def test_an_export_that_disagrees_with_jit_at_some_size_stays(tmp_path: Path) -> None:
    root = project(tmp_path / "p", {"model.ppy": PROGRAM})
    compared = differential(root, cache=tmp_path / "c")
    assert compared.bound() == {"head", "honest"} and compared.staged_calls("honest") == 3
    decisions = {d.qualname: d for d in read_artifact(root / ".ppy" / "artifact.ppyz").decisions}
    assert decisions["branches"].rule == "specializes"
    assert "at B=1" in decisions["branches"].reason
    assert decisions["head"].rule == "staged"


def test_verify_sizes_off_stages_it_anyway(tmp_path: Path) -> None:
    pyproject = PERMISSIONS + "verify-sizes = false\n"
    root = project(tmp_path / "p", {"model.ppy": PROGRAM}, pyproject=pyproject)
    built = run_ppy("build", cwd=root, env={"PPY_CACHE_DIR": str(tmp_path / "c")})
    # The user's call: ``branches`` is now staged as traced, for every B.
    assert "3 staged, 0 reused, 0 stay" in built.stdout, built.stdout
