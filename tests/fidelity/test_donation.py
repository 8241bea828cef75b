"""Donated arguments: a staged call deletes the arrays a jitted call deletes.

jit gives a donated input's buffer to an output of its shape and dtype, and
the array is deleted: reading it afterwards raises. The staged executable
donates the same leaves, by position and by name, so the program reads and
fails where python's does. A donation jit cannot use (no output of that
shape) makes jit warn at its first call; such a function stays jit's, and
the warning is python's.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from tests.support.differential import differential, project

PROGRAM = """
import functools
import warnings
from typing import Annotated

import jax
import jax.numpy as jnp
import numpy as np

import ppy

Rows = Annotated[jax.Array, ppy.Shape("B", 4), ppy.DType("float32")]


@functools.partial(jax.jit, donate_argnums=0)
def step(params: Rows, x: Rows):
    return params * 2.0 + x


@functools.partial(jax.jit, donate_argnames="state")
def advance(x: Rows, state: Rows):
    return state - x, x.sum()


@functools.partial(jax.jit, donate_argnums=(0, 1))
def unusable(params: Rows, x: Rows):
    return params + x


def read(name, array):
    try:
        print(name, array.sum())
    except RuntimeError as error:
        print(name, "deleted:", error)


if __name__ == "__main__":
    for rows in (8, 8, 16):
        params, x = jnp.ones((rows, 4)), jnp.full((rows, 4), 0.5, jnp.float32)
        new = step(params, x)
        read("params", params)
        read("x", x)
        read("new", new)
        state = jnp.zeros((rows, 4))
        moved, total = advance(x, state=state)
        read("state", state)
        print(moved[0], total)
        kept = np.ones((rows, 4), np.float32)
        print(step(kept, x)[0], kept.sum())

    warnings.simplefilter("always")
    a, b = jnp.ones((8, 4)), jnp.ones((8, 4))
    print(unusable(a, b)[0])
    read("a", a)
    read("b", b)
"""


def test_a_staged_call_deletes_the_donated_arrays_python_deletes(tmp_path: Path) -> None:
    root = project(tmp_path / "p", {"model.ppy": textwrap.dedent(PROGRAM).lstrip()})
    compared = differential(root, cache=tmp_path / "cache", quiet_stderr=None)
    assert "params deleted: Array has been deleted" in compared.python.stdout
    assert "state deleted:" in compared.python.stdout
    assert "donated buffers were not usable" in compared.python.stderr
    assert compared.staged_calls("step") == 6
    assert compared.staged_calls("advance") == 3
    assert compared.staged_calls("unusable") == 0
    assert compared.bound() == {"step", "advance"}
