"""Static flags (``bool``, ``Literal``) exported once per value, and calls by keyword."""

from __future__ import annotations

from pathlib import Path

from ppy.artifact.read import read_artifact

from tests.conftest import run_ppy
from tests.support.differential import differential, project

FLAGS = """\
import functools
from typing import Annotated, Literal

import jax
import jax.numpy as jnp

import ppy

Batch = Annotated[jax.Array, ppy.Shape("B", 4), ppy.DType("float32")]


@functools.partial(jax.jit, static_argnames=("training",))
def layer(x: Batch, training: bool = False) -> jax.Array:
    return x * 0.5 if training else x + 1


@functools.partial(jax.jit, static_argnums=(1,))
def pool(x: Batch, how: Literal["mean", "max"]) -> jax.Array:
    return x.mean(axis=1) if how == "mean" else x.max(axis=1)


@jax.jit
def affine(x: Batch, *, scale: Annotated[jax.Array, ppy.Shape(4), ppy.DType("float32")]):
    return x * scale


x = jnp.arange(8.0, dtype=jnp.float32).reshape(2, 4)
print(layer(x), layer(x, True), layer(x, training=True), layer(x=x, training=False))
print(pool(x, "mean"), pool(x, how="max"))
print(affine(x, scale=jnp.full(4, 3.0, jnp.float32)))
print(affine(scale=jnp.ones(4, jnp.float32), x=x))
print(pool(x, "min") if False else "skip")
print(layer(x, 1))


class Mode(str):
    pass


print(pool(x, Mode("mean")))
"""


def test_static_flags_and_keyword_calls_take_the_staged_path(tmp_path: Path) -> None:
    root = project(tmp_path / "p", {"model.ppy": FLAGS})
    compared = differential(root, cache=tmp_path / "c")
    assert compared.bound() == {"layer", "pool", "affine"}
    assert compared.staged_calls("layer") == 4
    assert compared.staged_calls("pool") == 2 and compared.staged_calls("affine") == 2
    # ``1`` is not ``True``, nor a str subclass a str: jit keys static values
    # by type too, traces them again, and so the original runs.
    first, second = compared.fallbacks()
    assert first["function"] == "layer" and first["category"] == "static"
    assert second["function"] == "pool" and second["category"] == "static"
    assert "how='mean' (a __main__.Mode) is not among the values staged" in str(second["reason"])
    artifact = read_artifact(root / ".ppy" / "artifact.ppyz")
    layer = artifact.entry("model", "layer")
    assert layer is not None
    statics = [v["static"] for v in layer.metadata["variants"]]
    assert statics == [{"training": False}, {"training": True}]


OPEN = """\
import functools
from typing import Annotated

import jax
import ppy

Batch = Annotated[jax.Array, ppy.Shape("B", 4), ppy.DType("float32")]


@functools.partial(jax.jit, static_argnames=("n",))
def repeat(x: Batch, n: int) -> jax.Array:
    return x * n
"""


def test_a_static_argument_of_any_value_says_how_to_stage_it(tmp_path: Path) -> None:
    root = project(tmp_path / "p", {"model.ppy": OPEN})
    built = run_ppy("build", cwd=root, env={"PPY_CACHE_DIR": str(tmp_path / "c")})
    assert built.returncode == 0, built.stderr
    assert "static argument 'n' may take any value" in built.stdout
    assert "annotate n as bool or Literal[...]" in built.stdout
    assert "jax.Array" not in built.stdout.split("remedy:")[1]
