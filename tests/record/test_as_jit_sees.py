"""A recorded program's inputs as jit sees them: NumPy arrays and scalars
of 64-bit dtypes, which jit canonicalises (float64 to float32 where x64 is
off), and a Python int step counter, which jit traces as a weakly typed
scalar. Recorded, built and run: staged, and the same bits as python's."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.record.test_record import _recorded
from tests.support.differential import differential

NUMPY = """
import sys
import numpy as np
import jax
import jax.numpy as jnp

if "x64" in sys.argv:
    jax.config.update("jax_enable_x64", True)


@jax.jit
def update(i, w, x, lr):
    return w - lr * i * jnp.tanh(x @ w).sum(0) / 3, i + 1


def main():
    rng = np.random.RandomState(0)
    w = np.linspace(0.1, 1.3, 12).reshape(4, 3)
    lr = np.float64(0.0123456789)
    for i in range(3):
        x = rng.rand(8, 4)
        new, j = update(i, w, x, lr)
        print(i, j, new.dtype, np.asarray(new).tobytes().hex())
        w = np.asarray(new).astype(np.float64)
    big = 2**63 if jax.config.jax_enable_x64 else 2**31
    try:
        update(big, w, x, lr)
    except OverflowError as error:
        print("OverflowError:", error)


if __name__ == "__main__":
    main()
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    ("argv", "described"),
    [
        ((), {"i": "weak int32[]", "w": "float32[4,3]", "x": "float32[8,4]", "lr": "float32[]"}),
        (
            ("x64",),
            {"i": "weak int64[]", "w": "float64[4,3]", "x": "float64[8,4]", "lr": "float64[]"},
        ),
    ],
    ids=["x64-off", "x64-on"],
)
def test_numpy_inputs_and_a_python_step_are_recorded_and_served_as_jit_sees_them(
    tmp_path: Path, argv: tuple[str, ...], described: dict[str, str]
) -> None:
    root, cache, recorded = _recorded(tmp_path, NUMPY, *argv)
    assert recorded["model.update"]["description"] == described
    compared = differential(root, *argv, cache=cache)
    assert "OverflowError:" in compared.python.stdout
    assert compared.staged_calls("update") == 3
    # The int beyond the scalar's range goes to jit, which raises as python's does.
    assert [e["category"] for e in compared.fallbacks()] == ["scalar"]
