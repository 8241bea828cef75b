"""jaxtyping annotations are descriptions: read from the source, jaxtyping never imported
by ppy."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import models, run_ppy
from tests.support.differential import differential, project

pytestmark = models

JAXTYPED = """\
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Float32, Int

Batch = Float32[Array, "batch 4"]


class Params(NamedTuple):
    w: Float[Array, "4 classes"]
    b: Float[Array, "classes"]


@jax.jit
def logits(params: Params, x: Batch) -> Float[Array, "batch classes"]:
    return x @ params.w + params.b


@jax.jit
def pick(scores: Float[Array, "batch classes"], labels: Int[Array, " batch"]) -> Float[Array, ""]:
    return jnp.take_along_axis(scores, labels[:, None], axis=1).sum()


params = Params(jnp.ones((4, 3)), jnp.arange(3.0))
for n in (2, 6):
    x = jnp.arange(4.0 * n).reshape(n, 4)
    scores = logits(params, x)
    print(scores.shape, pick(scores, jnp.arange(n) % 3))
print(pick(scores, (jnp.arange(6) % 3).astype(jnp.int8)))
"""


def test_jaxtyping_annotations_are_staged(tmp_path: Path) -> None:
    root = project(tmp_path / "p", {"model.ppy": JAXTYPED})
    compared = differential(root, cache=tmp_path / "c")
    assert compared.bound() == {"logits", "pick"}
    assert compared.staged_calls("logits") == 2 and compared.staged_calls("pick") == 2
    # Int means int32 without x64: an int8 argument is another dtype.
    (fallback,) = compared.fallbacks()
    assert fallback["function"] == "pick" and fallback["category"] == "dtype"


UNEXPORTABLE = """\
import jax
from jaxtyping import Array, Float

@jax.jit
def total(x: Float[Array, "*batch 4"]) -> jax.Array:
    return x.sum()
"""


def test_an_axis_jax_cannot_export_is_named(tmp_path: Path) -> None:
    root = project(tmp_path / "p", {"model.ppy": UNEXPORTABLE})
    built = run_ppy("build", cwd=root, env={"PPY_CACHE_DIR": str(tmp_path / "c")})
    assert "axis 0 '*batch' is not exportable" in built.stdout, built.stdout


TYPECHECKED = """\
import sys

import jax
import jax.numpy as jnp
import jaxtyping
from beartype import beartype
from jaxtyping import Array, Float, jaxtyped


@jax.jit
@jaxtyped(typechecker=beartype)
def total(x: Float[Array, "batch 4"]) -> Float[Array, " batch"]:
    return x.sum(axis=-1)


if "off" in sys.argv:
    jaxtyping.config.update("jaxtyping_disable", True)
print(total(jnp.ones((2, 4))), total(jnp.ones((3, 4))))
"""


def test_jaxtyped_with_beartype_under_jit_is_staged(tmp_path: Path) -> None:
    """jaxtyping's own pattern: the trace reads jaxtyping's config, which is
    compared by its values; a program that turns the checks off takes jit's path."""
    root = project(tmp_path / "p", {"model.ppy": TYPECHECKED})
    compared = differential(root, cache=tmp_path / "c")
    assert compared.bound() == {"total"} and compared.staged_calls("total") == 2
    off = differential(root, "off", cache=tmp_path / "c", build=False)
    (fallback,) = off.fallbacks()
    assert fallback["category"] == "captured" and "config" in str(fallback["reason"])
