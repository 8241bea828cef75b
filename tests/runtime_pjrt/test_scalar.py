"""The xla.scalar runtime: Python scalars in and out, fallbacks, cache, JAX config untouched."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from ppy.runtime import NotBound
from ppy_runtime_pjrt.scalar import ScalarRuntime
from structlog.testing import capture_logs

from tests.plugin_xla.harness import bind_module

SOURCE = """
from ppy import xla

@xla.jit
def ratio(a: int, b: int) -> float:
    return a / b

@xla.jit
def step(x: float, n: int) -> float:
    for _ in range(n):
        x = x * 0.5 + 1.0
    return x

@xla.jit
def square(n: int) -> int:
    return n * n
"""


@pytest.fixture(scope="module")
def staged() -> dict:
    return bind_module(SOURCE)


def test_results_are_python_scalars(staged) -> None:
    value = staged["step"](3.0, 10)
    assert type(value) is float and value == staged["step"].original(3.0, 10)
    assert type(staged["square"](12)) is int and staged["square"](12) == 144
    assert staged["square"].staged_calls >= 2


def test_other_argument_types_run_the_python_body(staged) -> None:
    fn = staged["square"]
    before = fn.fallbacks
    with capture_logs() as events:
        assert fn(np.int64(5)) == 25 and type(fn(np.int64(5))) is np.int64
        assert fn(2**40) == 2**80  # the result leaves int64: the flag sends it to Python
        assert fn(10**30) == 10**60  # an argument beyond int64
        assert fn(True) == 1
        assert fn(n=3) == 9
        assert staged["step"](2, 3) == staged["step"].original(2, 3)  # int where float is staged
    assert fn.fallbacks - before >= 6
    categories = {e["category"] for e in events if e["event"] == "run.fallback"}
    assert {"type", "flag", "range", "keywords"} <= categories
    reasons = {e["reason"] for e in events if e["event"] == "run.fallback"}
    assert "an argument of type numpy.int64 where int was staged" in reasons


def test_python_raises_its_own_errors(staged) -> None:
    with pytest.raises(ZeroDivisionError):
        staged["ratio"](1, 0)
    assert staged["ratio"](1, 3) == 1 / 3


def test_bind_refuses_an_entry_of_another_convention(staged) -> None:
    entry = staged["square"].entry
    other = dataclasses.replace(entry, metadata={**entry.metadata, "calling_convention": 99})
    with pytest.raises(NotBound, match="calling convention"):
        ScalarRuntime().bind(other, lambda n: n)


PROGRAM = textwrap.dedent(
    """
    import jax.numpy as jnp
    from tests.plugin_xla.harness import bind_module
    before = (jnp.arange(3).dtype, jnp.ones(2).dtype)
    fns = bind_module('''
    from ppy import xla
    @xla.jit
    def third(x: float) -> float:
        return x / 3.0
    ''')
    value = fns["third"](1.0)
    assert fns["third"].staged_calls == 1
    assert value == 1.0 / 3.0 and type(value) is float, value
    after = (jnp.arange(3).dtype, jnp.ones(2).dtype)
    assert before == after, (before, after)
    print(before, after)
    """
)


def test_staged_call_keeps_float64_without_changing_jax_config(tmp_path: Path) -> None:
    env = {
        "PPY_CACHE_DIR": str(tmp_path / "cache"),
        "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
    }
    import os

    for _attempt in range(2):  # the second process loads the executable from the cache
        done = subprocess.run(
            [sys.executable, "-c", PROGRAM],
            capture_output=True,
            text=True,
            env={**os.environ, **env},
            check=False,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert "int32" in done.stdout and "float32" in done.stdout
    cached = list((tmp_path / "cache").glob("*.exe"))
    assert len(cached) == 1
