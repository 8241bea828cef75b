"""A name defined twice at module level."""

from __future__ import annotations

from pathlib import Path

from ppy.artifact.read import read_artifact

from tests.conftest import run_ppy
from tests.fidelity.support import differential, project

PROGRAM = """\
from typing import Annotated

import jax
import jax.numpy as jnp

import ppy

Batch = Annotated[jax.Array, ppy.Shape("B", 4), ppy.DType("float32")]


@jax.jit
def score(x: Batch) -> jax.Array:
    return jnp.sum(x, axis=-1)


print("first", score(jnp.ones((2, 4))))


@jax.jit
def score(x: Batch) -> jax.Array:
    return jnp.max(x, axis=-1) * 10


@jax.jit
def other(x: Batch) -> jax.Array:
    return x * 2


print("second", score(jnp.ones((2, 4))), other(jnp.ones((1, 4))))
"""


def test_a_function_defined_twice_is_bound_to_neither(tmp_path: Path) -> None:
    root = project(tmp_path / "p", {"model.ppy": PROGRAM})
    built = run_ppy("build", cwd=root, env={"PPY_CACHE_DIR": str(tmp_path / "c")})
    assert built.returncode == 0, built.stderr
    lines = [line for line in built.stdout.splitlines() if " score " in line]
    assert len(lines) == 2 and all(" stays " in line for line in lines), built.stdout
    assert all("bound again at model.ppy:" in line for line in lines), lines
    assert "1 staged, 0 reused, 2 stay" in built.stdout
    entries = read_artifact(root / ".ppy" / "artifact.ppyz").entries
    assert [e.qualname for e in entries] == ["other"]

    compared = differential(root, cache=tmp_path / "c", build=False)
    assert compared.bound() == {"other"}


def test_a_function_rebound_by_assignment_stays(tmp_path: Path) -> None:
    source = PROGRAM.split("\n\n@jax.jit\ndef score", 2)
    program = "\n\n@jax.jit\ndef score".join(source[:2]) + "\nscore = jax.jit(lambda x: x[:, 0])\n"
    program += 'print("third", score(jnp.ones((2, 4))))\n'
    root = project(tmp_path / "p", {"model.ppy": program})
    # Nothing is staged, and a quiet run says so (run.nothing_staged).
    compared = differential(root, cache=tmp_path / "c", quiet_stderr=None)
    assert compared.bound() == set()
    assert compared.named("run.nothing_staged")
