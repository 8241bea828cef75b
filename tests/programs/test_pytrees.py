"""Functions of pytrees: described by a class of described fields, or by ``ppy.Like``.

Each program runs under python and under ``ppy run`` (``differential``); the
functions must be staged and their calls must take the staged path.
"""

from __future__ import annotations

from pathlib import Path

from tests.conftest import models
from tests.support.differential import differential, project

CLASSES = """\
from dataclasses import dataclass, field
from typing import Annotated, NamedTuple, TypedDict

import jax
import jax.numpy as jnp
from flax import struct

import ppy
from shapes import Layer

F32 = ppy.DType("float32")


class Params(NamedTuple):
    w: Annotated[jax.Array, ppy.Shape(4, 3), F32]
    b: Annotated[jax.Array, ppy.Shape(3), F32]


@jax.tree_util.register_dataclass
@dataclass
class Model:
    first: Params
    second: Layer
    scale: float = field(default=2.0, metadata={"static": True})


@struct.dataclass
class Shift:
    by: Annotated[jax.Array, ppy.Shape(3), F32]
    label: str = struct.field(pytree_node=False, default="shift")


class Batch(TypedDict):
    x: Annotated[jax.Array, ppy.Shape("B", 4), F32]
    y: Annotated[jax.Array, ppy.Shape("B"), ppy.DType("int32")]


@jax.jit
def forward(params: Params, batch: Batch) -> jax.Array:
    return batch["x"] @ params.w + params.b


@jax.jit
def shifted(params: Params, shift: Shift, batch: Batch):
    return shift, forward(params, batch) + shift.by


@jax.jit
def deep(model: Model, batch: Batch) -> dict:
    hidden = jnp.tanh(batch["x"] @ model.first.w + model.first.b)
    out = hidden @ model.second.w
    return {"out": out * model.scale, "labels": batch["y"], "model": model}


def main() -> None:
    params = Params(jnp.arange(12.0, dtype=jnp.float32).reshape(4, 3) / 7, jnp.ones(3))
    layer = Layer(jnp.full((3, 2), 0.5, jnp.float32))
    model = Model(params, layer)
    for n in (2, 5):
        batch = {"x": jnp.ones((n, 4), jnp.float32) * n, "y": jnp.arange(n, dtype=jnp.int32)}
        print(forward(params, batch))
        same, out = shifted(params, Shift(jnp.arange(3.0, dtype=jnp.float32)), batch)
        print(same.label, out.sum())
        result = deep(model, batch)
        print(result["out"], result["labels"], type(result["model"]).__name__)
        print(result["model"].second.w.sum(), result["model"].scale)


if __name__ == "__main__":
    main()
"""

SHAPES = """\
from typing import Annotated, NamedTuple

import jax
import ppy


class Layer(NamedTuple):
    w: Annotated[jax.Array, ppy.Shape(3, 2), ppy.DType("float32")]
"""


@models  # flax.struct
def test_classes_of_described_fields_are_staged(tmp_path: Path) -> None:
    root = project(tmp_path / "p", {"model.ppy": CLASSES, "shapes.py": SHAPES})
    compared = differential(root, cache=tmp_path / "c")
    assert compared.bound() == {"forward", "shifted", "deep"}
    assert compared.staged_calls("forward") == 2 and compared.staged_calls("deep") == 2
    assert compared.staged_calls("shifted") == 2
    assert compared.fallbacks() == []


LIKE = """\
from typing import Annotated, Any

import jax
import jax.numpy as jnp

import ppy


def init_params():
    key = jax.random.key(0)
    return {
        "hidden": {"w": jax.random.normal(key, (4, 8)), "b": jnp.zeros(8)},
        "out": {"w": jax.random.normal(key, (8, 2)), "b": jnp.zeros(2)},
        "steps": jnp.zeros((), jnp.int32),
    }


Params = Annotated[Any, ppy.Like(init_params)]
Batch = Annotated[jax.Array, ppy.Shape("B", 4), ppy.DType("float32")]


@jax.jit
def predict(params: Params, x: Batch) -> jax.Array:
    h = jax.nn.relu(x @ params["hidden"]["w"] + params["hidden"]["b"])
    return h @ params["out"]["w"] + params["out"]["b"]


@jax.jit
def bump(params: Annotated[Any, ppy.Like("init_params")]) -> tuple:
    return params, jax.tree_util.tree_map(lambda p: p + 1, params)


params = init_params()
print(predict(params, jnp.ones((3, 4), jnp.float32)))
same, bumped = bump(params)
print(sorted(bumped), bumped["steps"], bumped["out"]["b"])
wrong = dict(params, extra=jnp.ones(2))
print(predict(wrong, jnp.ones((3, 4), jnp.float32)))
"""


def test_like_describes_a_tree_by_an_example(tmp_path: Path) -> None:
    root = project(tmp_path / "p", {"model.ppy": LIKE})
    compared = differential(root, cache=tmp_path / "c")
    assert compared.bound() == {"predict", "bump"}
    assert compared.staged_calls("predict") == 1 and compared.staged_calls("bump") == 1
    (fallback,) = compared.fallbacks()
    assert fallback["function"] == "predict" and fallback["category"] == "tree"


LIKE_BATCH = """\
from typing import Annotated, Any

import jax
import jax.numpy as jnp

import ppy


def init_params():
    return {"w": jnp.full((4, 2), 0.5, jnp.float32), "b": jnp.ones(2, jnp.float32)}


def make_batch():
    return {"x": jnp.zeros((32, 4), jnp.float32), "label": jnp.zeros(32, jnp.int32)}


def make_tokens():
    return (jnp.zeros((8, 16), jnp.int32), jnp.zeros((8, 16), jnp.float32))


Params = Annotated[Any, ppy.Like(init_params)]
Batch = Annotated[Any, ppy.Like(make_batch, axes={0: "B"})]
Weights = Annotated[jax.Array, ppy.Shape("B"), ppy.DType("float32")]


@jax.jit
def loss(params: Params, batch: Batch, weights: Weights) -> jax.Array:
    logits = batch["x"] @ params["w"] + params["b"]
    picked = jnp.take_along_axis(logits, batch["label"][:, None], axis=1)[:, 0]
    return jnp.sum(picked * weights) / batch["x"].shape[0]


@jax.jit
def masked_mean(tokens: Annotated[Any, ppy.Like(make_tokens, axes={0: "B", -1: "T"})]):
    ids, mask = tokens
    return jnp.sum(ids * mask, axis=-1) / jnp.maximum(jnp.sum(mask, axis=-1), 1.0)


def main() -> None:
    params = init_params()
    for n in (32, 5):  # the example's batch, and one the build never saw
        batch = {
            "x": jnp.arange(n * 4, dtype=jnp.float32).reshape(n, 4) / 10,
            "label": jnp.arange(n, dtype=jnp.int32) % 2,
        }
        weights = jnp.linspace(0, 1, n, dtype=jnp.float32)
        print(n, round(float(loss(params, batch, weights)), 4))
    for b, t in ((8, 16), (3, 7)):
        ids = jnp.arange(b * t, dtype=jnp.int32).reshape(b, t)
        print(b, t, masked_mean((ids, (ids % 3 == 0).astype(jnp.float32))).tolist())
    # One symbol, two sizes: the batch's B is 5, the weights' 1 (jit broadcasts it).
    batch = {"x": jnp.ones((5, 4), jnp.float32), "label": jnp.zeros(5, jnp.int32)}
    print(float(loss(params, batch, jnp.ones(1, jnp.float32))))


if __name__ == "__main__":
    main()
"""


def test_like_axes_export_a_batch_tree_for_every_batch_size(tmp_path: Path) -> None:
    root = project(tmp_path / "p", {"model.ppy": LIKE_BATCH})
    compared = differential(root, cache=tmp_path / "c")
    assert compared.bound() == {"loss", "masked_mean"}
    assert compared.staged_calls("loss") == 2 and compared.staged_calls("masked_mean") == 2
    (fallback,) = compared.fallbacks()
    assert (fallback["function"], fallback["category"]) == ("loss", "symbolic")
