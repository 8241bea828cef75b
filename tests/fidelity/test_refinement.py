"""An export with symbolic dims that XLA, given sizes, compiles otherwise than jit."""

from __future__ import annotations

from pathlib import Path

from ppy.artifact.read import read_artifact

from tests.support.differential import differential, project

PROGRAM = """\
from typing import Annotated

import jax
import jax.numpy as jnp
import numpy as np

import ppy

Batch = Annotated[jax.Array, ppy.Shape("B", 64), ppy.DType("float32")]
Three = Annotated[jax.Array, ppy.Shape(3, 64), ppy.DType("float32")]


@jax.jit
def ramp(x: Batch) -> jax.Array:
    # jnp.linspace is a jitted function of its own: jit's module calls it with
    # -3 and 3, the refined export inlines it, and XLA folds 3 / 63 otherwise.
    return x + jax.nn.gelu(jnp.linspace(-3, 3, 64) * 1.3)


@jax.jit
def ramp_of_three(x: Three) -> jax.Array:
    return x + jax.nn.gelu(jnp.linspace(-3, 3, 64) * 1.3)


@jax.jit
def normalize(x: Batch) -> jax.Array:
    return (x - x.mean(-1, keepdims=True)) / (x.std(-1, keepdims=True) + 1e-6)


def bits(y: jax.Array) -> int:
    return int(np.asarray(y).view(np.uint32).sum(dtype=np.uint64))


rng = np.random.default_rng(0)
for rows in (3, 5):
    x = jnp.asarray(rng.normal(size=(rows, 64)).astype(np.float32))
    print(rows, bits(ramp(x)), bits(normalize(x)))
print(bits(ramp_of_three(jnp.ones((3, 64), jnp.float32))))
"""


def test_an_export_xla_compiles_otherwise_than_jit_stays(tmp_path: Path) -> None:
    """On jax 0.12.1, ``ramp`` served from its symbolic export printed other
    bits than python: 222 of 384 elements of ``jnp.linspace`` differ."""
    root = project(tmp_path / "p", {"model.ppy": PROGRAM})
    compared = differential(root, cache=tmp_path / "c")
    assert compared.bound() == {"ramp_of_three", "normalize"}
    assert compared.staged_calls("normalize") == 2 and compared.staged_calls("ramp_of_three") == 1
    decisions = {d.qualname: d for d in read_artifact(root / ".ppy" / "artifact.ppyz").decisions}
    assert decisions["ramp"].rule == "refinement"
    assert "at B=8, XLA compiles the export to another program" in decisions["ramp"].reason
