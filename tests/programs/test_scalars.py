"""Python scalars passed to a jitted function: a step counter and a learning
rate. jit traces each as a weakly typed scalar (int32, float32), once for
every value; a parameter annotated ``int`` or ``float``, or recorded with
Python scalars, is staged the same way."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import run_ppy
from tests.support.differential import differential, project

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


WEAK_LEAVES = """\
from typing import Annotated, Any

import jax
import jax.numpy as jnp

import ppy


def init_params():
    # No dtype: w is a weakly typed float32, as jnp.full(s, 0.1) makes it.
    return {"w": jnp.full((3,), 0.5), "b": jnp.zeros(3, jnp.float32)}


Params = Annotated[Any, ppy.Like(init_params)]


@jax.jit
def step(params: Params) -> Any:
    # A weak w stays weak (w * 2), and b + w is strong: the first call's
    # outputs are typed as jit's trace of that call types them.
    return {"w": params["w"] * 2, "b": params["b"] + params["w"]}


params = init_params()
for _ in range(3):
    params = step(params)
    w = params["w"]
    print(w, w.weak_type, (w + jnp.ones(3, jnp.bfloat16)).dtype, params["b"])
strong = {"w": jnp.ones(3, jnp.float32), "b": jnp.ones(3, jnp.float32)}
print(step(strong)["w"].weak_type)
"""


def test_a_weakly_typed_leaf_of_the_example_gets_a_variant_of_its_own(tmp_path: Path) -> None:
    root = project(tmp_path / "p", {"model.ppy": WEAK_LEAVES})
    compared = differential(root, cache=tmp_path / "c")
    # The first three calls pass the example's weak w, the last a strong one:
    # each is traced apart by jit, and each is staged.
    assert "True bfloat16" in compared.python.stdout
    assert compared.bound() == {"step"} and compared.staged_calls("step") == 4
    assert not compared.fallbacks()


STRONG_EXAMPLE = """\
from typing import Annotated, Any

import jax
import jax.numpy as jnp

import ppy


def init_params():
    # Explicit dtypes, as examples/71_optax_training builds its example.
    return {"w": jnp.full((4, 1), 0.1, jnp.float32), "b": jnp.zeros(1, jnp.float32)}


Params = Annotated[Any, ppy.Like(init_params)]


@jax.jit
def step(params: Params) -> Any:
    # b is float32, so w comes back float32 whatever w came in as (as an
    # optimizer's update makes it).
    return {"w": params["w"] * 0.5 + params["b"] + 1.0, "b": params["b"] - params["w"].sum()}


params = {"w": jnp.full((4, 1), 0.1), "b": jnp.zeros(1, jnp.float32)}  # w weakly typed
for _ in range(3):
    params = step(params)
    print(params["w"].weak_type, [round(float(v), 4) for v in params["w"][:, 0]])
"""


def test_a_weakly_typed_leaf_in_a_call_of_a_strongly_typed_example_takes_jits_path(
    tmp_path: Path,
) -> None:
    """What examples/71_optax_training/README.md says: the export was traced
    with the example's float32 leaves; the first call, whose w is weak, takes
    the jitted path, and the calls after it, whose w is the float32 the step
    returned, are staged."""
    root = project(tmp_path / "p", {"model.ppy": STRONG_EXAMPLE})
    compared = differential(root, cache=tmp_path / "c")
    assert compared.bound() == {"step"} and compared.staged_calls("step") == 2
    (fallback,) = compared.fallbacks()
    assert fallback["category"] == "dtype"
    assert fallback["reason"] == "params['w'] is a weakly typed float32 (made from a Python scalar)"
