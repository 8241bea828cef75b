"""Python scalars passed to a jitted function: a step counter and a learning
rate. jit traces each as a weakly typed scalar (int32, float32), once for
every value; a parameter annotated ``int`` or ``float``, or recorded with
Python scalars, is staged the same way."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import run_ppy
from tests.fidelity.support import differential, project

STEPS = """\
from typing import Annotated

import jax
import jax.numpy as jnp

import ppy

Params = Annotated[jax.Array, ppy.Shape(4), ppy.DType("bfloat16")]


@jax.jit
def update(step: int, params: Params, lr: float) -> jax.Array:
    # A weak lr keeps bfloat16: a strong float32 would promote params.
    return params - lr * params / (step + 1)


params = jnp.ones(4, jnp.bfloat16)
for step in range(3):
    params = update(step, params, 0.1)
    print(params, params.dtype)
print(update(jnp.int32(3), params, 0.1))  # a strong int32: jit traces it apart
"""


def test_a_step_counter_and_a_learning_rate_are_staged(tmp_path: Path) -> None:
    root = project(tmp_path / "p", {"model.ppy": STEPS})
    compared = differential(root, cache=tmp_path / "c")
    assert compared.bound() == {"update"} and compared.staged_calls("update") == 3
    (fallback,) = compared.fallbacks()
    assert fallback["category"] == "dtype" and "strongly typed int32[]" in str(fallback["reason"])
    built = run_ppy("build", cwd=root, env={"PPY_CACHE_DIR": str(tmp_path / "c")})
    assert "update(step: weak int32[], params: bfloat16[4], lr: weak float32[])" in built.stdout


UNANNOTATED = """\
import jax
import jax.numpy as jnp


@jax.jit
def update(step, params, lr):
    return params - lr * params / (step + 1)


params = jnp.ones(4, jnp.bfloat16)
for step in range(3):
    params = update(step, params, 0.1)
print(params, params.dtype)
"""


def test_a_recorded_step_counter_is_staged(tmp_path: Path) -> None:
    root = project(tmp_path / "p", {"model.ppy": UNANNOTATED})
    cache = tmp_path / "c"
    recorded = run_ppy("record", "model.ppy", cwd=root, env={"PPY_CACHE_DIR": str(cache)})
    assert recorded.returncode == 0, recorded.stderr
    built = run_ppy("build", cwd=root, env={"PPY_CACHE_DIR": str(cache)})
    assert "update(step: weak int32[], params: bfloat16[4], lr: weak float32[])" in built.stdout
    compared = differential(root, cache=cache, build=False)
    assert compared.staged_calls("update") == 3 and not compared.fallbacks()
