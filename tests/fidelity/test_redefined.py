"""A name defined twice at module level: a function, or an alias its annotation reads."""

from __future__ import annotations

from pathlib import Path

from ppy.artifact.read import read_artifact

from tests.conftest import run_ppy
from tests.support.differential import differential, project

PROGRAM = """\
from typing import Annotated

import jax
import jax.numpy as jnp

import ppy
from jaxtyping import Array, Float16, Float32

Batch = Annotated[jax.Array, ppy.Shape("B", 4), ppy.DType("float32")]
Vec = Float32[Array, "n"]


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


@jax.jit
def norm(v: Vec) -> jax.Array:
    return jnp.sqrt(jnp.sum(v * v))


# The def above read Vec as float32; a build that read this binding would
# export a float16 variant no call uses.
Vec = Float16[Array, "n"]
print("norm", norm(jnp.ones(3, jnp.float32)))
"""


def _lines(source: str, start: str) -> list[int]:
    """The numbers of the lines of ``source`` that start with ``start``."""
    return [n for n, text in enumerate(source.splitlines(), 1) if text.startswith(start)]


def test_a_function_defined_twice_is_bound_to_neither(tmp_path: Path) -> None:
    root = project(tmp_path / "p", {"model.ppy": PROGRAM})
    built = run_ppy("build", cwd=root, env={"PPY_CACHE_DIR": str(tmp_path / "c")})
    assert built.returncode == 0, built.stderr
    lines = [line for line in built.stdout.splitlines() if " score " in line]
    assert len(lines) == 2 and all(" stays " in line for line in lines), built.stdout
    # The lines that bind it, first to last, as they come in the file.
    first, second = _lines(PROGRAM, "def score(")
    listed = (
        f"score is bound 2 times at module level, at model.ppy:{first} and "
        f"model.ppy:{second}; which definition a call reaches depends on when it is made, "
        "so neither is staged"
    )
    assert all(listed in line for line in lines), (listed, lines)
    assert "1 staged, 0 reused, 3 stay" in built.stdout
    entries = read_artifact(root / ".ppy" / "artifact.ppyz").entries
    assert [e.qualname for e in entries] == ["other"]
    (norm,) = [line for line in built.stdout.splitlines() if " norm " in line]
    assert " stays " in norm and "Vec is bound 2 times at module level" in norm, norm

    compared = differential(root, cache=tmp_path / "c", build=False)
    assert compared.bound() == {"other"}


def test_a_function_rebound_by_assignment_stays(tmp_path: Path) -> None:
    source = PROGRAM.split("\n\n@jax.jit\ndef score", 2)
    program = "\n\n@jax.jit\ndef score".join(source[:2]) + "\nscore = jax.jit(lambda x: x[:, 0])\n"
    program += 'print("third", score(jnp.ones((2, 4))))\n'
    root = project(tmp_path / "p", {"model.ppy": program})
    built = run_ppy("build", cwd=root, env={"PPY_CACHE_DIR": str(tmp_path / "c")})
    reasons = [line for line in built.stdout.splitlines() if " score " in line]
    (defined,) = _lines(program, "def score(")
    (assigned,) = _lines(program, "score = ")
    listed = f"score is bound 2 times at module level, at model.ppy:{defined} and "
    listed += f"model.ppy:{assigned};"
    assert reasons and all(listed in line for line in reasons), (listed, reasons)
    # Nothing is staged, and a quiet run says so (run.nothing_staged).
    compared = differential(root, cache=tmp_path / "c", quiet_stderr=None)
    assert compared.bound() == set()
    assert compared.named("run.nothing_staged")
