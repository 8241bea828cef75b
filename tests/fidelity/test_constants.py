"""Constants jit hands its program as arguments, where an export embeds them."""

from __future__ import annotations

from pathlib import Path

import jax
from ppy.artifact.read import read_artifact

from tests.support.differential import differential, project

PROGRAM = """\
from typing import Annotated

import jax
import jax.numpy as jnp
import numpy as np

import ppy

Vector = Annotated[jax.Array, ppy.Shape(30), ppy.DType("float32")]

GRID = jnp.asarray(np.linspace(-3, 3, 900, dtype=np.float32).reshape(30, 30))


@jax.jit
def smooth(x: Vector) -> jax.Array:
    # Nothing here depends on x but the product: an export embeds GRID, and
    # XLA computes the exp at compile time; jit's program computes it.
    return jnp.exp(-0.5 * GRID**2) @ x


@jax.jit
def project(x: Vector) -> jax.Array:
    # GRID as it is: XLA has nothing to compute with it at compile time.
    return GRID @ x


x = jnp.asarray(np.random.default_rng(0).normal(size=30).astype(np.float32))
print(np.asarray(smooth(x)).view(np.uint32).tolist())
print(np.asarray(project(x)).view(np.uint32).tolist())
"""


def test_a_function_whose_constants_jit_passes_as_arguments_stays(tmp_path: Path) -> None:
    """On jax 0.12.1, ``smooth`` served from its export printed other bits
    than python in 6 of its 30 elements, and stays; ``project``, whose
    export XLA compiles to jit's program, is staged. On jax 0.10, where jit
    embeds its constants as an export does, both are."""
    root = project(tmp_path / "p", {"model.ppy": PROGRAM})
    compared = differential(root, cache=tmp_path / "c")
    decisions = {d.qualname: d for d in read_artifact(root / ".ppy" / "artifact.ppyz").decisions}
    if jax.config.values.get("jax_use_simplified_jaxpr_constants", False):
        assert compared.bound() == {"project"}
        assert decisions["smooth"].rule == "constants"
        assert "jit gives its program constants of the trace as arguments" in (
            decisions["smooth"].reason
        )
    else:
        assert compared.staged_calls("smooth") == 1
    assert compared.staged_calls("project") == 1
