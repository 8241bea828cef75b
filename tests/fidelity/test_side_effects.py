"""A function whose trace prints; a decorator around a jitted function that counts its calls."""

from __future__ import annotations

from pathlib import Path

from ppy.artifact.read import read_artifact

from tests.conftest import run_ppy
from tests.support.differential import differential, project

PROGRAM = """\
import sys
from typing import Annotated

import jax
import jax.numpy as jnp

import ppy

Batch = Annotated[jax.Array, ppy.Shape("B", 4), ppy.DType("float32")]


@jax.jit
def loud(x: Batch) -> jax.Array:
    print("tracing loud with", x.shape)
    return x.sum(axis=-1)


@jax.jit
def warns(x: Batch) -> jax.Array:
    sys.stderr.write("tracing warns\\n")
    return x.max(axis=-1)


@jax.jit
def quiet(x: Batch) -> jax.Array:
    return x.min(axis=-1)


CALLS = []


def counted(fn):
    def wrapper(*args, **kwargs):
        CALLS.append(fn.__name__)
        return fn(*args, **kwargs)

    return wrapper


@counted
@jax.jit
def tallied(x: Batch) -> jax.Array:
    return x.mean(axis=-1)


x = jnp.ones((2, 4), jnp.float32)
print(loud(x), warns(x), quiet(x), tallied(x))
print(loud(x), warns(x), quiet(x), tallied(x))
print("calls counted:", len(CALLS))
"""


def test_a_function_whose_trace_prints_stays_and_the_build_does_not_fail(
    tmp_path: Path,
) -> None:
    root = project(tmp_path / "p", {"model.ppy": PROGRAM})
    built = run_ppy("build", cwd=root, env={"PPY_CACHE_DIR": str(tmp_path / "c")})
    assert built.returncode == 0, built.stderr
    assert "1 staged, 0 reused, 3 stay" in built.stdout
    compared = differential(root, cache=tmp_path / "c", build=False)
    assert compared.python.stdout.count("tracing loud") == 1
    assert compared.python.stderr.count("tracing warns") == 1
    assert "calls counted: 2" in compared.python.stdout
    assert compared.bound() == {"quiet"}
    decisions = {d.qualname: d for d in read_artifact(root / ".ppy" / "artifact.ppyz").decisions}
    assert decisions["loud"].rule == decisions["warns"].rule == "trace-side-effect"
    assert "tracing loud with" in decisions["loud"].reason
    # The name holds counted's wrapper: staging the jit in its place would
    # drop the count. It stays, and says which decorator is in the way.
    assert decisions["tallied"].rule == "decorated"
    assert "@counted wraps the jitted function" in decisions["tallied"].reason


WORKS_AT_IMPORT = """\
import os
from typing import Annotated

import jax
import jax.numpy as jnp

import ppy


@jax.jit
def double(x: Annotated[jax.Array, ppy.Shape("B"), ppy.DType("float32")]) -> jax.Array:
    return x * 2


with open("log.txt", "a") as log:
    log.write("ran\\n")
if os.path.exists("inbox.txt"):
    os.rename("inbox.txt", "processed.txt")
print(double(jnp.arange(3, dtype=jnp.float32)))
"""


def test_ppy_run_does_not_build_a_module_that_works_when_imported(tmp_path: Path) -> None:
    """A build imports the module, which would append to the log and move the
    inbox a second time: ``ppy run`` does not start one, and says why."""
    root = project(tmp_path / "p", {"model.ppy": WORKS_AT_IMPORT})
    env = {"PPY_CACHE_DIR": str(tmp_path / "c")}
    (root / "inbox.txt").write_text("mail\n")
    ran = run_ppy("run", "model.ppy", cwd=root, env=env)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == "[0. 2. 4.]\n"
    assert (root / "log.txt").read_text() == "ran\n"
    assert (root / "processed.txt").read_text() == "mail\n"
    assert "run.build_skipped" in ran.stderr and "line 15: with open" in ran.stderr
    assert not (root / ".ppy" / "artifact.ppyz").exists()
    # Asked for, the build runs it (the opt-ins say project code runs then).
    built = run_ppy("build", cwd=root, env=env)
    assert " exported " in built.stdout, built.stdout + built.stderr
