"""Exports whose symbolic dims are expressions (``2*B``, ``B + 1``, ``B*C``), end to end.

A real project is built with ``ppy build`` and run with ``ppy run``: each
entry binds, sizes that fit one value of the symbols take the staged path,
and a size that fits none goes to the original with the reason logged, while
the program prints what plain Python prints.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from ppy_runtime_pjrt.dims import Unfit, Use, parse_dim, solve

Run = Callable[..., subprocess.CompletedProcess[str]]

PROGRAM = """\
from typing import Annotated

import jax
import jax.numpy as jnp

import ppy

@jax.jit
def doubled(x: Annotated[jax.Array, ppy.Shape("2*B", 3), ppy.DType("float32")]) -> jax.Array:
    return jnp.sum(x * 2, axis=0)


@jax.jit
def shifted(
    x: Annotated[jax.Array, ppy.Shape("B", 4), ppy.DType("float32")],
    y: Annotated[jax.Array, ppy.Shape("B+1", 4), ppy.DType("float32")],
) -> jax.Array:
    return jnp.sum(x, axis=0) - jnp.sum(y, axis=0)


@jax.jit
def outer(
    a: Annotated[jax.Array, ppy.Shape("B"), ppy.DType("float32")],
    b: Annotated[jax.Array, ppy.Shape("C"), ppy.DType("float32")],
    m: Annotated[jax.Array, ppy.Shape("B*C"), ppy.DType("float32")],
) -> jax.Array:
    return jnp.sum(m) + jnp.sum(a) * jnp.sum(b)


def rows(n, width):
    return jnp.arange(n * width, dtype=jnp.float32).reshape(n, width) / 7


if __name__ == "__main__":
    print(doubled(rows(2, 3)).tolist())  # B = 1
    print(doubled(rows(6, 3)).tolist())  # B = 3
    print(doubled(rows(5, 3)).tolist())  # fits no B
    print(shifted(rows(3, 4), rows(4, 4)).tolist())
    print(shifted(rows(3, 4), rows(3, 4)).tolist())  # y is not B + 1
    print(outer(jnp.ones(2), jnp.ones(3) * 2, jnp.arange(6.0)).tolist())
    print(outer(jnp.ones(2), jnp.ones(3), jnp.arange(5.0)).tolist())  # not B*C
"""


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]], str]:
    """One build and one ``ppy run -v`` of the program, with a private cache."""
    import os

    from tests.conftest import PERMISSIONS, run_ppy

    root = tmp_path_factory.mktemp("dims")
    (root / "pyproject.toml").write_text(PERMISSIONS)
    (root / "model.ppy").write_text(PROGRAM)
    env = {**os.environ, "PPY_CACHE_DIR": str(root / "cache")}

    def ppy(*args: str) -> subprocess.CompletedProcess[str]:
        return run_ppy(*args, cwd=root, env=env)

    built = ppy("build")
    assert built.returncode == 0, built.stdout + built.stderr
    assert "3 staged" in built.stdout, built.stdout
    run = ppy("-v", "--log-format", "json", "run", "model.ppy")
    assert run.returncode == 0, run.stderr
    events = [json.loads(line) for line in run.stderr.splitlines() if line.startswith("{")]
    cache = ppy("cache").stdout
    plain = subprocess.run(
        [sys.executable, "model.ppy"], cwd=root, capture_output=True, text=True, check=True
    )
    assert run.stdout == plain.stdout
    return root, events, cache


def _of(events: list[dict[str, Any]], event: str, function: str) -> list[dict[str, Any]]:
    return [e for e in events if e["event"] == event and e.get("function") == function]


def test_every_entry_with_a_dim_expression_binds(
    ran: tuple[Path, list[dict[str, Any]], str],
) -> None:
    _, events, _ = ran
    assert [e for e in events if e["event"] == "run.unbound"] == []
    for function in ("doubled", "shifted", "outer"):
        assert len(_of(events, "run.bind", function)) == 1, function


def test_fitting_sizes_take_the_staged_path_and_others_fall_back_with_the_reason(
    ran: tuple[Path, list[dict[str, Any]], str],
) -> None:
    _, events, cache = ran
    paths = {
        f: [e["path"] for e in _of(events, "run.call", f)] for f in ("doubled", "shifted", "outer")
    }
    assert paths == {
        "doubled": ["staged", "staged", "original"],
        "shifted": ["staged", "original"],
        "outer": ["staged", "original"],
    }
    (odd,) = _of(events, "run.fallback", "doubled")
    assert odd["category"] == "size"
    assert odd["reason"] == "x has 5 in dim 0, which is 2*B for no whole B >= 1"
    (short,) = _of(events, "run.fallback", "shifted")
    assert (short["category"], short["reason"]) == (
        "symbolic",
        "B+1 is 4 for B = 3 but y has 3 in dim 0",
    )
    (product,) = _of(events, "run.fallback", "outer")
    assert product["reason"] == "B*C is 6 for B = 2, C = 3 but m has 5 in dim 0"
    # One executable per staged signature: (2, 3) and (6, 3), and one each for the others.
    assert "4 staged executables," in cache


# The solver on its own: what it binds, solves and refuses, for shapes a call could have.


def uses(*pairs: tuple[str, int]) -> list[Use]:
    return [Use(parse_dim(text), size, f"arg{i}", 0) for i, (text, size) in enumerate(pairs)]


@pytest.mark.parametrize(
    ("pairs", "values"),
    [
        ((("B", 3), ("B + 1", 4)), {"B": 3}),
        ((("B + 1", 4), ("B", 3)), {"B": 3}),
        ((("2*B", 8),), {"B": 4}),
        ((("B+1", 5),), {"B": 4}),
        ((("C*B", 12), ("C", 3)), {"B": 4, "C": 3}),
        ((("3*B - 2", 7),), {"B": 3}),
        ((("max(B, 4)", 4), ("B", 2)), {"B": 2}),
        ((("B // 2", 3), ("B", 7)), {"B": 7}),
        ((("B - 1", 0), ("B", 1)), {"B": 1}),
    ],
)
def test_the_solver_binds_and_solves(
    pairs: tuple[tuple[str, int], ...], values: dict[str, int]
) -> None:
    assert solve(uses(*pairs)) == values


@pytest.mark.parametrize(
    ("pairs", "category", "words"),
    [
        ((("2*B", 7),), "size", "arg0 has 7 in dim 0, which is 2*B for no whole B >= 1"),
        ((("B + 3", 2),), "size", "for no whole B >= 1"),
        ((("B", 3), ("B", 4)), "symbolic", "B is 3 in arg0 but 4 in arg1"),
        ((("B", 0),), "size", "staged for B >= 1"),
        ((("B*C", 6),), "symbolic", "B, C cannot be solved from the shapes (B*C)"),
        ((("B*B", 9),), "symbolic", "B cannot be solved"),
        ((("max(B, 4)", 4),), "symbolic", "B cannot be solved"),
        ((("B // 2", 2), ("B", 7)), "symbolic", "B // 2 is 3 for B = 7 but arg0 has 2"),
    ],
)
def test_the_solver_says_why_sizes_do_not_fit(
    pairs: tuple[tuple[str, int], ...], category: str, words: str
) -> None:
    unfit = solve(uses(*pairs))
    assert isinstance(unfit, Unfit)
    assert unfit.category == category and words in unfit.detail
