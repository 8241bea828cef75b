"""Programs written with the model libraries people ship: optax, flax (linen and nnx),
equinox. Each is staged through ``ppy.Like`` and prints what python prints; what a
function reads of a module-level model (a linen Module's configuration, an equinox
model's static part, an nnx graph) is compared at run time, not its weights.
"""

from __future__ import annotations

from pathlib import Path

from tests.conftest import models, run_ppy
from tests.support.differential import differential, project

pytestmark = models

OPTAX = """\
from typing import Annotated, Any

import jax
import jax.numpy as jnp
import optax

import ppy

optimizer = optax.adam(1e-2)


def init_params():
    return {"w": jnp.full((4, 1), 0.1, jnp.float32), "b": jnp.zeros(1)}


def init_opt_state():
    return optimizer.init(init_params())


Params = Annotated[Any, ppy.Like(init_params)]
OptState = Annotated[Any, ppy.Like(init_opt_state)]
X = Annotated[jax.Array, ppy.Shape("B", 4), ppy.DType("float32")]
Y = Annotated[jax.Array, ppy.Shape("B", 1), ppy.DType("float32")]


def loss_fn(params, x, y):
    return jnp.mean((x @ params["w"] + params["b"] - y) ** 2)


@jax.jit
def train_step(params: Params, opt_state: OptState, x: X, y: Y):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss


params, opt_state = init_params(), init_opt_state()
x = jnp.linspace(-1, 1, 32 * 4).reshape(32, 4)
y = x @ jnp.array([[1.0], [-2.0], [0.5], [3.0]]) + 0.25
for step in range(20):
    params, opt_state, loss = train_step(params, opt_state, x, y)
print(float(loss), params["b"], opt_state[0].count)
"""


def test_an_optax_training_step_is_staged(tmp_path: Path) -> None:
    root = project(tmp_path / "p", {"model.ppy": OPTAX})
    compared = differential(root, cache=tmp_path / "c")
    assert compared.bound() == {"train_step"}
    assert compared.staged_calls("train_step") == 20 and compared.fallbacks() == []


LINEN = """\
import os
from typing import Annotated, Any

import flax.linen as nn
import jax
import jax.numpy as jnp

import ppy


class MLP(nn.Module):
    scale: float = 1.0

    @nn.compact
    def __call__(self, x):
        return nn.Dense(2)(nn.relu(nn.Dense(8)(x))) * self.scale


model = MLP(scale=float(os.environ.get("SCALE", "1")))


def example_variables():
    return model.init(jax.random.key(0), jnp.ones((1, 4)))


Batch = Annotated[jax.Array, ppy.Shape("B", 4), ppy.DType("float32")]


@jax.jit
def predict(variables: Annotated[Any, ppy.Like(example_variables)], x: Batch) -> jax.Array:
    return model.apply(variables, x)


print(predict(example_variables(), jnp.ones((3, 4))))
"""


def test_a_flax_linen_model_is_staged_and_its_configuration_compared(tmp_path: Path) -> None:
    root = project(tmp_path / "p", {"model.ppy": LINEN})
    compared = differential(root, cache=tmp_path / "c")
    assert compared.bound() == {"predict"} and compared.staged_calls("predict") == 1
    # The Module's configuration is part of the trace: another scale, another program.
    rescaled = differential(root, cache=tmp_path / "c", build=False, env={"SCALE": "3"})
    (fallback,) = rescaled.fallbacks()
    assert fallback["category"] == "captured" and "model.model" in str(fallback["reason"])


EQUINOX = """\
import os
from typing import Annotated, Any

import equinox as eqx
import jax
import jax.numpy as jnp

import ppy

activation = jax.nn.tanh if os.environ.get("ACT") == "tanh" else jax.nn.relu
model = eqx.nn.MLP(4, 2, 8, 2, activation=activation, key=jax.random.key(0))
params, static = eqx.partition(model, eqx.is_array)


def example_params():
    return eqx.filter(eqx.nn.MLP(4, 2, 8, 2, key=jax.random.key(0)), eqx.is_array)


Batch = Annotated[jax.Array, ppy.Shape("B", 4), ppy.DType("float32")]


@jax.jit
def predict(params: Annotated[Any, ppy.Like(example_params)], x: Batch) -> jax.Array:
    return jax.vmap(eqx.combine(params, static))(x)


@jax.jit
def shrink(params: Annotated[Any, ppy.Like(example_params)]):
    return jax.tree_util.tree_map(lambda p: p * 0.5, params)


@eqx.filter_jit
def predict_filtered(net, x):
    return jax.vmap(net)(x)


x = jnp.linspace(-1, 1, 12).reshape(3, 4)
print(predict(params, x))
smaller = shrink(params)
print(type(smaller).__name__, smaller.layers[0].bias.sum())
print(predict_filtered(model, x))
"""


def test_an_equinox_model_is_staged_and_its_static_part_compared(tmp_path: Path) -> None:
    root = project(tmp_path / "p", {"model.ppy": EQUINOX})
    built = run_ppy("build", cwd=root, env={"PPY_CACHE_DIR": str(tmp_path / "c")})
    line = next(ln for ln in built.stdout.splitlines() if " predict_filtered " in ln)
    assert " stays " in line and "eqx.filter_jit" in line and "eqx.partition" in built.stdout
    compared = differential(root, cache=tmp_path / "c", build=False)
    assert compared.bound() == {"predict", "shrink"}
    assert compared.staged_calls("predict") == 1 and compared.staged_calls("shrink") == 1
    tanh = differential(root, cache=tmp_path / "c", build=False, env={"ACT": "tanh"})
    (fallback,) = tanh.fallbacks()
    assert fallback["category"] == "captured" and "model.static" in str(fallback["reason"])


NNX = """\
from typing import Annotated, Any

import jax
import jax.numpy as jnp
from flax import nnx

import ppy


class MLP(nnx.Module):
    def __init__(self, rngs):
        self.hidden = nnx.Linear(4, 8, rngs=rngs)
        self.out = nnx.Linear(8, 2, rngs=rngs)

    def __call__(self, x):
        return self.out(nnx.relu(self.hidden(x)))


graphdef, state = nnx.split(MLP(nnx.Rngs(0)))


def example_state():
    return nnx.split(MLP(nnx.Rngs(0)))[1]


Batch = Annotated[jax.Array, ppy.Shape("B", 4), ppy.DType("float32")]


@jax.jit
def predict(state: Annotated[Any, ppy.Like(example_state)], x: Batch) -> jax.Array:
    return nnx.merge(graphdef, state)(x)


@nnx.jit
def predict_nnx(model, x):
    return model(x)


print(predict(state, jnp.ones((3, 4))))
print(predict_nnx(nnx.merge(graphdef, state), jnp.ones((3, 4))))
"""


def test_a_flax_nnx_model_is_staged_through_split_and_merge(tmp_path: Path) -> None:
    root = project(tmp_path / "p", {"model.ppy": NNX})
    built = run_ppy("build", cwd=root, env={"PPY_CACHE_DIR": str(tmp_path / "c")})
    line = next(ln for ln in built.stdout.splitlines() if " predict_nnx " in ln)
    assert " stays " in line and "nnx.jit" in line and "nnx.split" in built.stdout
    compared = differential(root, cache=tmp_path / "c", build=False)
    assert compared.bound() == {"predict"} and compared.staged_calls("predict") == 1
