"""Weak types as jit keys them: jit traces a weakly typed input (``jnp.asarray(1.5)``,
``jnp.full(3, 0.5)``) apart from a strongly typed one of the same dtype and
shape, and what it returns is weakly typed only in the weak call, which then
promotes otherwise (``r + bf16`` is bfloat16, not float32). A recording that
saw both kinds is served by a variant of each kind, 0-d and n-d; a kind it did
not see takes jit's path, and the reason is named. One recording, one build."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.record.test_record import _recorded
from tests.support.differential import differential

WEAK_AND_STRONG = """
import sys
import jax
import jax.numpy as jnp


@jax.jit
def double(x):
    return x * 2


@jax.jit
def same(x):
    return x


@jax.jit
def scale(v):
    return v * 3


@jax.jit
def strong_only(x):
    return x + 1


@jax.jit
def pair(a, b):
    return a * b


def show(name, r):
    print(name, r, r.dtype, r.weak_type, jax.typeof(r), (r + jnp.ones(3, jnp.bfloat16)).dtype)


for kind in sys.argv[1:]:
    weak = kind != "strong"
    s = jnp.asarray(1.5) if weak else jnp.float32(1.5)
    v = jnp.full((3,), 0.5) if weak else jnp.ones(3, jnp.float32) / 2
    if kind == "unseen":  # kinds of weak types the recording did not see
        show(f"strong_only {kind}", strong_only(s))
        show(f"pair {kind}", pair(s, v))
        continue
    show(f"double {kind}", double(s))
    show(f"same {kind}", same(s))
    show(f"scale {kind}", scale(v))
    other = jnp.ones(3, jnp.float32) / 2 if weak else jnp.full((3,), 0.5)
    show(f"pair {kind}", pair(s, other))  # one of the two weak: a kind each
    if not weak:
        show(f"strong_only {kind}", strong_only(s))
"""


@pytest.mark.slow
def test_an_input_seen_weak_and_strong_is_served_by_the_variant_of_its_own_kind(
    tmp_path: Path,
) -> None:
    # Recorded weak first; run strong first, then weak, then strong again:
    # each call's outputs are weakly typed as jit types them, whichever
    # kind's executable was made first. ``pair`` is called with one input
    # weak, then the other: each combination is a kind of its own.
    root, cache, recorded = _recorded(tmp_path, WEAK_AND_STRONG, "weak", "strong", "strong")
    assert recorded["model.double"]["description"] == {"x": "(weak) float32[]"}
    assert recorded["model.scale"]["description"] == {"v": "(weak) float32[3]"}
    assert recorded["model.strong_only"]["description"] == {"x": "float32[]"}
    assert recorded["model.pair"]["description"] == {
        "a": "(weak) float32[]",
        "b": "(weak) float32[3]",
    }
    compared = differential(root, "strong", "weak", "strong", "unseen", cache=cache)
    lines = compared.python.stdout.splitlines()
    assert lines[0] == "double strong 3.0 float32 False float32[] float32"
    assert "double weak 3.0 float32 True ~float32[] bfloat16" in lines
    for name in ("double", "same", "scale", "pair"):
        assert compared.staged_calls(name) == 3, name
    assert compared.staged_calls("strong_only") == 2
    # A kind the recording did not see is jit's to trace, and the log says why.
    assert [(e["function"], e["category"], e["reason"]) for e in compared.fallbacks()] == [
        ("strong_only", "dtype", "x is a weakly typed float32 (made from a Python scalar)"),
        ("pair", "dtype", "a is a weakly typed float32 (made from a Python scalar)"),
    ]
