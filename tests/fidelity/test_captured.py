"""Values a trace read from the program's globals: a file loaded at import, the environment,
argv and the clock, a flag set in main(), a helper module's attribute, ``__name__``, a class, an
instance and a weak scalar set under the main guard; and globals ppy cannot compare.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from ppy.artifact.read import read_artifact

from tests.conftest import run_ppy
from tests.support.differential import differential, project

HEAD = """\
from typing import Annotated

import jax
import jax.numpy as jnp

import ppy

Batch = Annotated[jax.Array, ppy.Shape("B", 4), ppy.DType("float32")]
"""


def _build(root: Path, cache: Path) -> str:
    built = run_ppy("build", cwd=root, env={"PPY_CACHE_DIR": str(cache)})
    assert built.returncode == 0, built.stdout + built.stderr
    return built.stdout


def test_an_array_loaded_at_import_from_a_file_that_changed(tmp_path: Path) -> None:
    root = project(
        tmp_path / "p",
        {
            "model.ppy": HEAD
            + """
import numpy as np
W = np.load("w.npy")

@jax.jit
def score(x: Batch) -> jax.Array:
    return x @ W

print(score(jnp.ones((2, 4), jnp.float32)))
"""
        },
    )
    np.save(root / "w.npy", np.arange(4, dtype=np.float32))
    assert " exported " in _build(root, tmp_path / "c")
    same = differential(root, cache=tmp_path / "c", build=False)
    assert same.bound() == {"score"} and same.staged_calls("score") == 1

    np.save(root / "w.npy", np.arange(4, dtype=np.float32) * 10)
    changed = differential(root, cache=tmp_path / "c", build=False)
    (fallback,) = changed.fallbacks()
    assert fallback["category"] == "captured" and "model.W" in str(fallback["reason"])


def test_a_value_from_the_environment_argv_and_the_clock(tmp_path: Path) -> None:
    root = project(
        tmp_path / "p",
        {
            "model.ppy": HEAD
            + """
import os, sys, time
SCALE = float(os.environ.get("SCALE", "1"))
MODE = sys.argv[1:]
STARTED = time.time() > 0

@jax.jit
def score(x: Batch) -> jax.Array:
    return x.sum(axis=-1) * SCALE * (2 if MODE else 1) * STARTED

print(score(jnp.ones((2, 4), jnp.float32)))
"""
        },
    )
    _build(root, tmp_path / "c")
    assert differential(root, cache=tmp_path / "c", build=False).staged_calls("score") == 1
    for argv, env in (((), {"SCALE": "3"}), (("fast",), {})):
        compared = differential(root, *argv, cache=tmp_path / "c", build=False, env=env)
        assert [f["category"] for f in compared.fallbacks()] == ["captured"]


def test_a_global_main_sets_before_the_first_call(tmp_path: Path) -> None:
    root = project(
        tmp_path / "p",
        {
            "model.ppy": HEAD
            + """
OFFSET = 0.0

@jax.jit
def score(x: Batch) -> jax.Array:
    return x.sum(axis=-1) + OFFSET

def main():
    global OFFSET
    OFFSET = 5.0
    print(score(jnp.ones((2, 4), jnp.float32)))

if __name__ == "__main__":
    main()
"""
        },
    )
    compared = differential(root, cache=tmp_path / "c")
    assert compared.bound() == {"score"}
    assert "model.OFFSET" in str(compared.fallbacks()[0]["reason"])


def test_a_trace_that_reads_name_sees_what_the_run_gives_each_module(tmp_path: Path) -> None:
    # The build imports each module under its own name; python runs the
    # program as ``__main__`` and an imported module under its name.
    root = project(
        tmp_path / "p",
        {
            "helper.ppy": HEAD
            + """
@jax.jit
def tagged(x: Batch) -> jax.Array:
    return x.sum(axis=-1) * (2.0 if __name__ == "helper" else 5.0)
""",
            "model.ppy": HEAD
            + """
import helper

@jax.jit
def score(x: Batch) -> jax.Array:
    return x.sum(axis=-1) * (3.0 if __name__ == "__main__" else 7.0)

print(score(jnp.ones((2, 4), jnp.float32)), helper.tagged(jnp.ones((3, 4), jnp.float32)))
""",
        },
    )
    compared = differential(root, cache=tmp_path / "c")
    assert compared.python.stdout == "[12. 12.] [8. 8. 8.]\n"
    assert compared.staged_calls("score") == 1 and compared.staged_calls("tagged") == 1
    assert not compared.fallbacks()


def test_a_function_called_by_two_names_is_compared_under_each(tmp_path: Path) -> None:
    """``scale`` and ``helper.scale`` are one function when the build traces;
    the program rebinds one name only, and python calls the new function
    there: each name a staged function reaches a function by is compared."""
    root = project(
        tmp_path / "p",
        {
            "helper.ppy": "def scale(x):\n    return x * 2.0\n",
            "model.ppy": HEAD
            + """
import helper
from helper import scale

@jax.jit
def score(x: Batch) -> jax.Array:
    return (scale(x) + helper.scale(x)).sum(axis=-1)

if __name__ == "__main__":
    import sys
    if sys.argv[1:] == ["module"]:
        helper.scale = lambda x: x * 3.0
    if sys.argv[1:] == ["imported"]:
        scale = lambda x: x * 3.0
    print(score(jnp.ones((2, 4), jnp.float32)))
""",
        },
    )
    _build(root, tmp_path / "c")
    assert differential(root, cache=tmp_path / "c", build=False).staged_calls("score") == 1
    for argv in ("module", "imported"):
        compared = differential(root, argv, cache=tmp_path / "c", build=False)
        assert compared.staged_calls("score") == 0, argv
        (fallback,) = compared.fallbacks()
        assert fallback["category"] == "captured", fallback


def test_a_helper_modules_attribute_and_a_called_functions_global(tmp_path: Path) -> None:
    root = project(
        tmp_path / "p",
        {
            "helper.ppy": """
import jax.numpy as jnp
K = 3.0
EPS = 1e-3

def shift(x):
    return x + EPS
""",
            "model.ppy": HEAD
            + """
import helper

@jax.jit
def score(x: Batch) -> jax.Array:
    return helper.shift(x).sum(axis=-1) * helper.K

def main():
    print(score(jnp.ones((2, 4), jnp.float32)))

if __name__ == "__main__":
    import sys
    if sys.argv[1:] == ["k"]:
        helper.K = 4.0
    if sys.argv[1:] == ["eps"]:
        helper.EPS = 1.0
    main()
""",
        },
    )
    _build(root, tmp_path / "c")
    assert differential(root, cache=tmp_path / "c", build=False).staged_calls("score") == 1
    for argv, name in (("k", "helper.K"), ("eps", "helper.EPS")):
        compared = differential(root, argv, cache=tmp_path / "c", build=False)
        (fallback,) = compared.fallbacks()
        assert name in str(fallback["reason"]), fallback


def test_a_global_with_no_fingerprint_or_too_large_stays_unstaged(tmp_path: Path) -> None:
    root = project(
        tmp_path / "p",
        {
            "model.ppy": HEAD
            + """
import threading
import numpy as np
LOCK = threading.Lock()
BIG = np.ones((512, 1024), np.float32)

@jax.jit
def locked(x: Batch) -> jax.Array:
    return x * (1 if LOCK else 0)

@jax.jit
def heavy(x: Batch) -> jax.Array:
    return x.sum() + BIG.sum()

print(locked(jnp.ones((2, 4))), heavy(jnp.ones((2, 4))))
"""
        },
    )
    built = _build(root, tmp_path / "c")
    lines = {line.split()[1]: line for line in built.splitlines() if line.startswith("model ")}
    assert " stays " in lines["locked"] and "model.LOCK" in lines["locked"], built
    assert " stays " in lines["heavy"] and "model.BIG" in lines["heavy"], built
    assert "pass the value to the function as a parameter" in built
    decisions = read_artifact(root / ".ppy" / "artifact.ppyz").decisions
    assert {d.rule for d in decisions} == {"captures-runtime-value"}
    # Nothing is staged, and a quiet run says so once (run.nothing_staged).
    assert differential(root, cache=tmp_path / "c", build=False, quiet_stderr=None).bound() == set()


def test_a_trace_that_reads_the_clock_or_the_environment_stays_or_is_compared(
    tmp_path: Path,
) -> None:
    root = project(
        tmp_path / "p",
        {
            "model.ppy": HEAD
            + """
import os
import time

@jax.jit
def stamped(x: Batch) -> jax.Array:
    return x.sum(axis=-1) + (time.time() > 0)

@jax.jit
def configured(x: Batch) -> jax.Array:
    return x.sum(axis=-1) * float(os.environ.get("SCALE", "1"))

@jax.jit
def shifted(x: Batch) -> jax.Array:
    return x.sum(axis=-1) + float(os.getenv("SHIFT", "0"))

@jax.jit
def offset(x: Batch) -> jax.Array:
    return x.sum(axis=-1) + float(getenv("SHIFT", "0"))

from os import getenv
print(stamped(jnp.ones((2, 4))), configured(jnp.ones((2, 4))))
print(shifted(jnp.ones((2, 4))), offset(jnp.ones((2, 4))))
"""
        },
    )
    built = _build(root, tmp_path / "c")
    line = next(ln for ln in built.splitlines() if " stamped " in ln)
    assert " stays " in line and "model.time.time" in line, built
    env = {"SCALE": "3", "SHIFT": "5"}
    compared = differential(root, cache=tmp_path / "c", build=False, env=env)
    # The build's environment is not the program's, however the trace reads it.
    fallbacks = {str(f["function"]): f for f in compared.fallbacks()}
    assert set(fallbacks) == {"configured", "shifted", "offset"}
    for fallback in fallbacks.values():
        assert fallback["category"] == "captured" and "os.environ" in str(fallback["reason"])


def test_a_library_function_the_program_patches(tmp_path: Path) -> None:
    """``jnp.tanh = jnp.sin`` in main(), before the first call: the trace reads
    ``jnp.tanh`` and ``jax.nn.relu``, which are compared like globals."""
    root = project(
        tmp_path / "p",
        {
            "model.ppy": HEAD
            + """
import sys

@jax.jit
def squash(x: Batch) -> jax.Array:
    return jax.nn.relu(jnp.tanh(x))

def main():
    if "tanh" in sys.argv:
        jnp.tanh = jnp.sin
    if "relu" in sys.argv:
        jax.nn.relu = jnp.abs
    print(squash(jnp.linspace(-3.0, 3.0, 8, dtype=jnp.float32).reshape(2, 4)))

main()
"""
        },
    )
    # Unpatched, every example's run takes the staged path with no fallback
    # (tests/integration/test_examples.py): library captures match there.
    assert " exported " in _build(root, tmp_path / "c")
    for patched, name in (("tanh", "jnp.tanh"), ("relu", "jax.nn.relu")):
        changed = differential(root, patched, cache=tmp_path / "c", build=False)
        (fallback,) = changed.fallbacks()
        assert fallback["category"] == "captured" and name in str(fallback["reason"])


def test_a_global_changed_between_calls_jit_serves_from_one_trace(tmp_path: Path) -> None:
    """jit traces once per abstract signature: a NumPy input after a jax one
    reuses the first trace, so a global changed between them is not read
    again. The staged path answers the same, and a shape jit would trace
    afresh, or a cleared cache, reads the new value on both sides."""
    root = project(
        tmp_path / "p",
        {
            "model.ppy": HEAD
            + """
import numpy as np

ARR = np.array([1.0, 2.0, 3.0, 4.0], dtype=np.float32)

@jax.jit
def shift(x: Batch) -> jax.Array:
    return x + ARR

if __name__ == "__main__":
    print(shift(jnp.ones((2, 4), jnp.float32)))
    ARR[0] = 100.0
    print(shift(np.ones((2, 4), np.float32)))
    print(shift(jnp.ones((2, 4), jnp.float32)))
    print(shift(np.ones((3, 4), np.float32)))
    ARR[1] = 200.0
    shift.clear_cache()  # jit traces again, and reads ARR again
    print(shift(jnp.ones((2, 4), jnp.float32)))
    ARR[2] = 300.0
    jax.clear_caches()
    print(shift(jnp.ones((2, 4), jnp.float32)))
"""
        },
    )
    compared = differential(root, cache=tmp_path / "c")
    assert compared.staged_calls("shift") == 3
    (fallback,) = compared.fallbacks()
    assert fallback["category"] == "captured" and "model.ARR" in str(fallback["reason"])


def test_classes_instances_and_weak_scalars_set_under_the_main_guard(tmp_path: Path) -> None:
    """What the build cannot see, as a user writes it: a class's data read
    through a classmethod (``cls.scale``), a class's callable
    (``act = staticmethod(jnp.tanh)``) replaced, an attribute set on a
    dataclass instance after it was made, a scalar weakly typed at build
    and strongly typed in the run (``x_bf16 * s`` then computes in float32),
    a NamedTuple's class attribute, int4 codes read as uint4 (numpy writes
    both ``<V1``) and a nan of the other sign (``repr`` shows both ``nan``).
    Unchanged, each is served staged; changed, python and ppy print the
    same, each function falling back and naming what it read."""
    root = project(
        tmp_path / "p",
        {
            "model.ppy": HEAD
            + """
import dataclasses
import sys
from typing import NamedTuple

import numpy as np

class Config:
    scale = 1.0

    @classmethod
    def factor(cls):
        return cls.scale

class Layer:
    act = staticmethod(jnp.tanh)

LAYER = Layer()

@dataclasses.dataclass
class Options:
    k: float = 1.0
    boost = 1.0

    def factor(self):
        return self.k * self.boost

OPTIONS = Options()
S = jnp.asarray(2.0)

class Pair(NamedTuple):
    a: float
    b: float
    gain = 1.0

PAIR = Pair(1.0, 2.0)
CODES = np.array([-1, 2], dtype=jnp.int4)
NAN = float("nan")

@jax.jit
def by_class(x: Batch) -> jax.Array:
    return x.sum(axis=-1) * Config.factor()

@jax.jit
def by_callable(x: Batch) -> jax.Array:
    return LAYER.act(x).sum(axis=-1)

@jax.jit
def by_instance(x: Batch) -> jax.Array:
    return x.sum(axis=-1) * OPTIONS.factor()

@jax.jit
def by_weak(x: Batch) -> jax.Array:
    return x.astype(jnp.bfloat16).sum(axis=-1) * S

@jax.jit
def by_namedtuple(x: Batch) -> jax.Array:
    return x.sum(axis=-1) * PAIR.a * PAIR.gain

@jax.jit
def by_codes(x: Batch) -> jax.Array:
    return x.sum(axis=-1) * CODES.astype(jnp.float32).sum()

@jax.jit
def by_nan(x: Batch) -> jax.Array:
    return x.sum(axis=-1) * jnp.copysign(1.0, NAN)

if __name__ == "__main__":
    if sys.argv[1:] == ["set"]:
        Config.scale = 3.0
        Layer.act = staticmethod(jnp.sin)
        OPTIONS.boost = 5.0
        S = jnp.float32(2.0)
        Pair.gain = 4.0
        CODES = CODES.view(jnp.uint4)
        NAN = -NAN
    x = jnp.linspace(-1.0, 1.0, 8, dtype=jnp.float32).reshape(2, 4) + 0.5
    print(by_class(x), by_callable(x), by_instance(x))
    print(by_namedtuple(x), by_codes(x), by_nan(x))
    print(by_weak(x).dtype, by_weak(x))
"""
        },
    )
    _build(root, tmp_path / "c")
    functions = ("by_class", "by_callable", "by_instance", "by_weak")
    functions += ("by_namedtuple", "by_codes", "by_nan")
    same = differential(root, cache=tmp_path / "c", build=False)
    assert [same.staged_calls(name) for name in functions] == [1, 1, 1, 2, 1, 1, 1]
    assert not same.fallbacks()
    changed = differential(root, "set", cache=tmp_path / "c", build=False)
    assert "float32" in changed.python.stdout
    reasons = {str(f["function"]): str(f["reason"]) for f in changed.fallbacks()}
    assert set(reasons) == set(functions), reasons
    read_by = ("Config", "LAYER", "OPTIONS", "model.S", "PAIR", "model.CODES", "model.NAN")
    for name, read in zip(functions, read_by, strict=True):
        assert read in reasons[name], reasons[name]
