"""A recording's symbol where the body depends on the size: the recorded
sizes are staged instead, and any other size takes the original path.

A recording turns the dims that moved between calls into symbols; the user
wrote none. Where the trace asks such a symbol something whose answer
depends on its size (a dict keyed by sizes, ``in {16, 32}``, ``bool``, a
comparison caught), an export with the symbol would answer otherwise than
jit at the size the question singles out, silently. Each function here is
recorded at 4 and 8 and run at 4, 8 and 16: python's answer at 16 is the
one the symbol would have got wrong.
"""

from __future__ import annotations

from pathlib import Path

from ppy.artifact.read import read_artifact

from tests.record.test_record import _file, _ppy, _project
from tests.support.differential import differential

DEPENDENT = """
import sys
import jax
import jax.numpy as jnp

SCALES = {16: 10.0}


@jax.jit
def keyed(x):
    return jnp.sum(x) * SCALES.get(x.shape[0], 1.0)


@jax.jit
def member(x):
    return jnp.sum(x) * (2.0 if x.shape[0] in {16, 32} else 1.0)


@jax.jit
def truth(x):
    return jnp.sum(x) * (1.0 if x.shape[0] - 16 else 5.0)


@jax.jit
def caught(x):
    try:
        big = x.shape[0] > 12
    except Exception:
        big = False
    return jnp.sum(x) * (3.0 if big else 1.0)


@jax.jit
def ordered(x):
    return jnp.sum(x) * (3.0 if x.shape[0] > 12 else 1.0)


@jax.jit
def equal(x):
    return jnp.sum(x) * (7.0 if x.shape[0] == 16 else 1.0)


@jax.jit
def honest(x):
    return jnp.sum(jnp.tanh(x))


for n in [int(a) for a in sys.argv[1:]]:
    x = jnp.ones((n, 2), jnp.float32)
    print(n, keyed(x), member(x), truth(x), caught(x), ordered(x), equal(x), honest(x))
"""

#: Each value-dependent function, the line that asks, and what it asks.
ASKED = {
    "keyed": (10, "looks B up by its hash"),
    "member": (15, "looks B up by its hash"),
    "truth": (20, "asks bool(B - 16)"),
    "caught": (26, "asks whether B > 12"),
    "ordered": (34, "asks whether B > 12"),
    "equal": (39, "compares B with 16"),
}


def test_a_symbol_the_body_depends_on_is_staged_at_the_recorded_sizes(tmp_path: Path) -> None:
    root = _project(tmp_path, DEPENDENT)
    cache = tmp_path / "cache"
    assert _ppy(root, cache, "record", "model.ppy", "4", "8").returncode == 0
    assert _file(root)["functions"]["model.keyed"]["description"] == {"x": "float32[B,2]"}
    built = _ppy(root, cache, "build")
    assert built.returncode == 0, built.stdout + built.stderr
    for name, (line, asked) in ASKED.items():
        (shown,) = [s for s in built.stdout.splitlines() if f" {name}(" in s]
        assert f"{name}(x: float32[B,2])" in shown, shown
        assert "exported for cpu at the recorded sizes B=4, 8; recorded: 2 calls" in shown
        explained = _ppy(root, cache, "explain", name).stdout
        assert f"model.ppy:{line} {asked}" in explained, explained
        assert "exported at the recorded sizes B=4, 8 instead" in explained
    # Python's answers at 16 are what a symbol would have got wrong: 320, 64, 160, 96.
    compared = differential(root, "4", "8", "16", cache=cache, build=False)
    last = compared.python.stdout.splitlines()[-1]
    assert last == "16 320.0 64.0 160.0 96.0 96.0 224.0 24.371014"
    for name in ASKED:
        assert compared.staged_calls(name) == 2, name  # 4 and 8, as jit traced them
    assert compared.staged_calls("honest") == 3  # no question asked: the symbol serves 16
    fallbacks = {str(f["function"]): f for f in compared.fallbacks()}
    assert set(fallbacks) == set(ASKED)
    for fallback in fallbacks.values():
        assert fallback["category"] == "dim"
        assert fallback["reason"] == (
            "called with x [16, 2], a size the recording did not see: "
            "staged for x: float32[4,2] or x: float32[8,2]"
        )


STATIC = """
import sys
from functools import partial
import jax
import jax.numpy as jnp

SCALES = {3: 10.0}


@partial(jax.jit, static_argnames=("mode",))
def keyed(x, mode):
    scaled = jnp.sum(x) * SCALES.get(x.shape[0], 1.0)
    return scaled if mode == "sum" else -scaled


for n in [int(a) for a in sys.argv[1:]]:
    x = jnp.ones((n,), jnp.float32)
    print(n, keyed(x, "sum"), keyed(x, "neg"), keyed(x, "sum"))
"""


def test_sizes_beyond_what_an_entry_holds_take_the_original_path(tmp_path: Path) -> None:
    """An entry holds 16 exports: with two static values, the 8 sizes called
    most; the others fall back, as any size the recording did not see."""
    root = _project(tmp_path, STATIC)
    cache = tmp_path / "cache"
    sizes = [str(n) for n in range(1, 11)]
    assert _ppy(root, cache, "record", "model.ppy", *sizes, *sizes[:8]).returncode == 0
    recorded = _file(root)["functions"]["model.keyed"]
    assert recorded["dims"] == {"B": list(range(1, 11))}
    built = _ppy(root, cache, "build")
    (line,) = [s for s in built.stdout.splitlines() if " keyed(" in s]
    assert "at the recorded sizes B=1, 2, 3, 4, 5, 6, 7, 8 (the 8 most called of 10)" in line
    compared = differential(root, "3", "9", "5", cache=cache, build=False)
    assert compared.staged_calls("keyed") == 6  # 3 and 5, each mode, each call
    (fallback,) = compared.fallbacks()
    assert "called with x [9]" in str(fallback["reason"])
    # The entry holds 16 exports, as many as the contract allows.
    artifact = read_artifact(root / ".ppy" / "artifact.ppyz")
    (entry,) = [e for e in artifact.entries if e.qualname == "keyed"]
    assert len(entry.metadata["variants"]) == 16
