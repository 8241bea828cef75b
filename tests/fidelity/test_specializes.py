"""A description that claims more sizes than the body serves (shape specialization)."""

from __future__ import annotations

from pathlib import Path

from ppy.artifact.read import read_artifact

from tests.conftest import PERMISSIONS, run_ppy
from tests.support.differential import differential, project

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
def five(x: Batch) -> jax.Array:
    # B = 5 is not among the sizes a sample would try: the comparison is seen.
    return (x * 2 if x.shape[0] == 5 else x * 3).sum(axis=-1)


@jax.jit
def honest(x: Batch) -> jax.Array:
    return jnp.tanh(x).sum(axis=-1)


for rows in (1, 2, 3, 5):
    x = jnp.arange(rows * 4, dtype=jnp.float32).reshape(rows, 4)
    print(branches(x), head(x), five(x), honest(x))
"""


def test_an_export_that_disagrees_with_jit_at_some_size_stays(tmp_path: Path) -> None:
    root = project(tmp_path / "p", {"model.ppy": PROGRAM})
    compared = differential(root, cache=tmp_path / "c")
    assert compared.bound() == {"head", "honest"} and compared.staged_calls("honest") == 4
    decisions = {d.qualname: d for d in read_artifact(root / ".ppy" / "artifact.ppyz").decisions}
    for name, line, size in (("branches", 13, 1), ("five", 26, 5)):
        assert decisions[name].rule == "specializes"
        assert f"model.ppy:{line} compares B with {size}" in decisions[name].reason
    assert decisions["head"].rule == "staged"


def test_verify_sizes_off_stages_it_anyway(tmp_path: Path) -> None:
    pyproject = PERMISSIONS + "verify-sizes = false\n"
    root = project(tmp_path / "p", {"model.ppy": PROGRAM}, pyproject=pyproject)
    built = run_ppy("build", cwd=root, env={"PPY_CACHE_DIR": str(tmp_path / "c")})
    # The user's call: ``branches`` is now staged as traced, for every B.
    assert "4 staged, 0 reused, 0 stay" in built.stdout, built.stdout


ASKED = """\
from typing import Annotated

import jax
import jax.numpy as jnp

import ppy

Batch = Annotated[jax.Array, ppy.Shape("B", 4), ppy.DType("float32")]
SCALES = {5: 10.0}


@jax.jit
def keyed(x: Batch) -> jax.Array:
    return x.sum(axis=-1) * SCALES.get(x.shape[0], 1.0)


@jax.jit
def member(x: Batch) -> jax.Array:
    return x.sum(axis=-1) * (2.0 if x.shape[0] in {5, 7} else 1.0)


@jax.jit
def truth(x: Batch) -> jax.Array:
    return x.sum(axis=-1) * (1.0 if x.shape[0] - 5 else 3.0)


@jax.jit
def caught(x: Batch) -> jax.Array:
    try:
        big = x.shape[0] > 4
    except Exception:
        big = False
    return x.sum(axis=-1) * (4.0 if big else 1.0)


@jax.jit
def named(x: Batch) -> jax.Array:
    return x.sum(axis=-1) * {"5": 6.0}.get(str(x.shape[0]), 1.0)


for rows in (1, 2, 3, 5):
    x = jnp.arange(rows * 4, dtype=jnp.float32).reshape(rows, 4)
    print(keyed(x), member(x), truth(x), caught(x), named(x))
"""


def test_a_size_used_as_a_key_a_truth_or_a_caught_comparison_stays(tmp_path: Path) -> None:
    """The symbol is the source's: a question whose answer depends on the
    size keeps the function unstaged, and the reason names the line."""
    root = project(tmp_path / "p", {"model.ppy": ASKED})
    compared = differential(root, cache=tmp_path / "c", quiet_stderr=None)
    assert not compared.bound()
    decisions = {d.qualname: d for d in read_artifact(root / ".ppy" / "artifact.ppyz").decisions}
    for name, line, asked in (
        ("keyed", 14, "looks B up by its hash (a dict key or a set member)"),
        ("member", 19, "looks B up by its hash (a dict key or a set member)"),
        ("truth", 24, "asks bool(B - 5)"),
        ("caught", 30, "asks whether B > 4"),
        ("named", 38, "writes B as text"),
    ):
        assert decisions[name].rule == "specializes", decisions[name]
        assert f"model.ppy:{line} {asked}" in decisions[name].reason, decisions[name].reason


def test_sampling_finds_a_size_singled_out_without_a_question(tmp_path: Path) -> None:
    """A body can tell a symbol from a size without asking it anything: here
    by its type. The watch sees no question; ``verify-sizes = "sample"`` runs
    the export at B=1."""
    program = (
        PROGRAM.split("\n\n\n@jax.jit")[0]
        + """


@jax.jit
def typed(x: Batch) -> jax.Array:
    return x.sum(axis=-1) * (100.0 if isinstance(x.shape[0], int) else 1.0)


print(typed(jnp.ones((1, 4), jnp.float32)), typed(jnp.ones((2, 4), jnp.float32)))
"""
    )
    pyproject = PERMISSIONS + 'verify-sizes = "sample"\n'
    root = project(tmp_path / "p", {"model.ppy": program}, pyproject=pyproject)
    # The quiet run says that nothing is staged, and why.
    compared = differential(root, cache=tmp_path / "c", quiet_stderr=None)
    assert not compared.bound()
    (decision,) = read_artifact(root / ".ppy" / "artifact.ppyz").decisions
    assert decision.rule == "specializes" and "at B=1" in decision.reason
