"""The jax configuration a trace ran under (x64 set in main, disable_jit, rank promotion,
debug_nans, matmul precision), and 64-bit inputs.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.differential import differential, project

HEAD = """\
from typing import Annotated

import jax
import jax.numpy as jnp

import ppy

Batch = Annotated[jax.Array, ppy.Shape("B", 4), ppy.DType("float32")]


@jax.jit
def score(x: Batch) -> jax.Array:
    return jnp.sum(x * 0.1, axis=-1) + jnp.arange(x.shape[0]) / 3


x = jnp.ones((2, 4), jnp.float32)
"""


@pytest.mark.parametrize(
    ("situation", "code", "option"),
    [
        (
            "x64 set in main",
            'jax.config.update("jax_enable_x64", True)\nprint(score(x), score(x).dtype)\n',
            "jax_enable_x64",
        ),
        (
            "rank promotion",
            'with jax.numpy_rank_promotion("raise"):\n    print(score(x))\n',
            "jax_numpy_rank_promotion",
        ),
        (
            "matmul precision",
            'with jax.default_matmul_precision("highest"):\n    print(score(x))\n',
            "jax_default_matmul_precision",
        ),
    ],
)
def test_a_call_under_another_configuration_takes_the_original(
    tmp_path: Path, situation: str, code: str, option: str
) -> None:
    root = project(tmp_path / "p", {"model.ppy": HEAD + "print(score(x))\n" + code})
    compared = differential(root, cache=tmp_path / "c")
    assert compared.bound() == {"score"}
    reasons = [str(f["reason"]) for f in compared.fallbacks()]
    assert [f["category"] for f in compared.fallbacks()] == ["config"], situation
    assert option in reasons[0]


def test_under_disable_jit_the_python_function_runs_as_with_jit(tmp_path: Path) -> None:
    code = "with jax.disable_jit():\n    print(score(x), type(score(x)).__name__)\n"
    root = project(tmp_path / "p", {"model.ppy": HEAD + "print(score(x))\n" + code})
    compared = differential(root, cache=tmp_path / "c")
    assert compared.staged_calls("score") == 1  # the first call; then op by op, as jit does


NANS = """\
if __name__ == "__main__":
    with jax.debug_nans(True):
        print(score(x))  # no NaN: served, checked as jit's outputs are
        print(score(x * jnp.nan))
"""


def test_under_debug_nans_a_nan_raises_what_jit_raises(tmp_path: Path) -> None:
    root = project(tmp_path / "p", {"model.ppy": HEAD + "print(score(x))\n" + NANS})
    compared = differential(root, cache=tmp_path / "c")
    assert compared.python.returncode == 1
    assert "FloatingPointError" in compared.python.stderr
    assert compared.bound() == {"score"}


WIDE = """\
from typing import Annotated

import jax
import jax.numpy as jnp
import numpy as np

import ppy

Wide = Annotated[jax.Array, ppy.Shape("B",), ppy.DType("float64")]


@jax.jit
def total(x: Wide) -> jax.Array:
    return jnp.sum(x) / 3


values = np.arange(3, dtype=np.float64)
print(total(values))
jax.config.update("jax_enable_x64", True)
print(total(values), total(values).dtype)
"""


def test_a_float64_description_is_exported_under_x64_and_taken_only_with_it(
    tmp_path: Path,
) -> None:
    root = project(tmp_path / "p", {"model.ppy": WIDE})
    compared = differential(root, cache=tmp_path / "c")
    build = compared.named("build.staged") or compared.named("run.bind")
    assert build and compared.bound() == {"total"}
    assert compared.staged_calls("total") == 2  # both calls with x64 on
    assert [f["category"] for f in compared.fallbacks()] == ["config"]
    assert "float32" not in compared.ppy.stderr.replace("traced with", "")
