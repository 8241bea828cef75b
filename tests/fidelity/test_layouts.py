"""Projects laid out as python allows: a program in a subfolder importing its
neighbour, a package's ``__init__.ppy``, a function defined under ``if
__name__ == "__main__":``, and static values ``Literal`` holds that a build
cannot stage. Each is run or refused with a reason that names the
user's line, never an error located inside ppy."""

from __future__ import annotations

from pathlib import Path

from ppy.artifact.read import read_artifact

from tests.support.differential import differential, project

HEAD = """\
from functools import partial
from typing import Annotated, Literal

import jax
import jax.numpy as jnp
import ppy

Batch = Annotated[jax.Array, ppy.Shape("B", 4), ppy.DType("float32")]
"""


def test_a_program_in_a_subfolder_imports_its_neighbour_and_is_staged(tmp_path: Path) -> None:
    """``python app/model.ppy`` puts app/ first on sys.path: the build does too."""
    root = project(
        tmp_path / "p",
        {
            "app/util.ppy": "SCALE = 2.0\n",
            "app/model.ppy": HEAD
            + """
import util

@jax.jit
def scaled(x: Batch) -> jax.Array:
    return x * util.SCALE

print(scaled(jnp.ones((2, 4), jnp.float32)))
""",
        },
    )
    compared = differential(root, cache=tmp_path / "c", program="app/model.ppy")
    assert compared.bound() == {"scaled"} and compared.staged_calls("scaled") == 1


def test_what_the_build_cannot_stage_is_said_in_the_users_terms(tmp_path: Path) -> None:
    root = project(
        tmp_path / "p",
        {
            "model.ppy": HEAD
            + """
import pkg

@partial(jax.jit, static_argnames=("mode",))
def coded(x: Batch, mode: Literal[b"a", b"b"]) -> jax.Array:
    return x

@partial(jax.jit, static_argnames=("k",))
def mixed(x: Batch, k: Literal[0, 1, 2, 1.0]) -> jax.Array:
    return x * k

print(coded(jnp.ones((1, 4)), b"a"), mixed(jnp.ones((1, 4)), 1.0), hasattr(pkg, "inner"))

if __name__ == "__main__":

    @jax.jit
    def local(x: Batch) -> jax.Array:
        return x * 2

    print(local(jnp.ones((1, 4))))
""",
            "pkg/__init__.ppy": HEAD
            + """
@jax.jit
def inner(x: Batch) -> jax.Array:
    return x + 1
""",
        },
    )
    compared = differential(root, cache=tmp_path / "c", quiet_stderr=None)
    # Under the main guard: staged where jax.jit makes it, as the program runs.
    assert compared.bound() == {"local"} and compared.staged_calls("local") == 1
    decisions = {d.qualname: d for d in read_artifact(root / ".ppy" / "artifact.ppyz").decisions}
    assert decisions["coded"].rule == "invalid-spec"
    assert "model.ppy:13: Literal[b'a', b'b'] holds b'a', a bytes" in decisions["coded"].reason
    assert decisions["mixed"].rule == "invalid-spec"
    assert "Literal[0, 1, 2, 1.0] holds 1.0, a float" in decisions["mixed"].reason
    assert decisions["local"].rule == "staged"
    (scope,) = [c for c in decisions["local"].trail if c.rule == "scope"]
    assert scope.detail == (
        'defined under the if __name__ == "__main__" guard: staged each time jax.jit makes it'
    )
    assert decisions["inner"].rule == "package-init"
    assert "pkg/__init__.ppy is never run by import pkg" in decisions["inner"].reason
    assert all(
        "ppy_plugin" not in d.reason and "raised" not in d.reason for d in decisions.values()
    )
