"""``ppy build`` with the jax plugin, on small real projects, reading the real artifact."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax import export
from ppy.artifact.read import read_artifact
from ppy.kinds.jax_export import JaxExport

Run = Callable[..., subprocess.CompletedProcess[str]]

KINDS = """\
import functools
from typing import Annotated

import jax
import jax.numpy as jnp
import ppy
from jax import jit

Batch = Annotated[jax.Array, ppy.Shape("B", 4), ppy.DType("float32")]
Rows = Batch

@jax.jit
def aliased(x: Rows) -> jax.Array:
    return x * 2

@jit
def inline(x: Annotated[jax.Array, ppy.Shape("N"), ppy.DType("float32")]) -> jax.Array:
    return x + 1

@jax.jit
def pair(x: Batch, y: Batch):
    return x - y, jnp.sum(x * y, axis=-1)

@jax.jit
def fixed(x: Annotated[jax.Array, ppy.Shape(2, 3), ppy.DType("float32")]):
    return x.T

@jax.jit
def doubled(x: Annotated[jax.Array, ppy.Shape("2*B"), ppy.DType("float32")]):
    return x.reshape(2, -1)

@jax.jit
def ints(x: Annotated[jax.Array, ppy.Shape("B"), ppy.DType("int32")]):
    return x // 2

@jax.jit
def flags(x: Annotated[jax.Array, ppy.Shape("B"), ppy.DType("bool")]):
    return jnp.logical_not(x)

@jax.jit
def brain(x: Annotated[jax.Array, ppy.Shape("B"), ppy.DType("bfloat16")]):
    return x * 3

@jax.jit
def no_dtype(x: Annotated[jax.Array, ppy.Shape("B")]):
    return x

@jax.jit
def loss(x: Batch):
    return jnp.sum(x ** 2)

@jax.jit
def inner(x: Batch):
    return jnp.sin(x)

@functools.partial(jax.jit, static_argnums=1)
def static(x: Batch, n: int):
    return x * n

slope = jax.grad(loss)
other = jax.jacrev(lambda x: inner(x).sum())
"""

FAILING = {
    "raises.ppy": """\
        import jax, ppy
        from typing import Annotated
        print("about to fail")
        raise RuntimeError("bad import")

        @jax.jit
        def f(x: Annotated[jax.Array, ppy.Shape(2), ppy.DType("float32")]):
            return x
        """,
    "exits.ppy": """\
        import sys, jax, ppy
        from typing import Annotated

        @jax.jit
        def f(x: Annotated[jax.Array, ppy.Shape(2), ppy.DType("float32")]):
            return x

        sys.exit(3)
        """,
    "dies.ppy": """\
        import os, jax, ppy
        from typing import Annotated

        @jax.jit
        def f(x: Annotated[jax.Array, ppy.Shape(2), ppy.DType("float32")]):
            return x

        print("dying now", flush=True)
        os._exit(7)
        """,
    "hangs.ppy": """\
        import time, jax, ppy
        from typing import Annotated

        @jax.jit
        def f(x: Annotated[jax.Array, ppy.Shape(2), ppy.DType("float32")]):
            return x

        time.sleep(600)
        """,
    "secret.ppy": """\
        import os, jax, ppy
        from typing import Annotated

        @jax.jit
        def f(x: Annotated[jax.Array, ppy.Shape(2), ppy.DType("float32")]):
            return x

        raise RuntimeError(f"secret={os.environ.get('PPY_TEST_SECRET')!r}")
        """,
}

PYPROJECT = """\
[tool.ppy]
build-execution = "allow"

[tool.ppy.plugins.jax]
allow-build-export = true
export-timeout = 12
platforms = ["cpu", "cuda"]
# The kinds module has a dozen functions; checking each at four sizes would
# not fit the short timeout hangs.ppy needs (tests/fidelity checks sizes).
verify-sizes = false
staged-vjp = true
"""


@pytest.fixture(scope="module")
def built(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """One build of a project with every case, so that one worker serves them all."""
    import os
    import sys
    import textwrap

    root = tmp_path_factory.mktemp("kinds")
    (root / "pyproject.toml").write_text(PYPROJECT)
    (root / "kinds.ppy").write_text(KINDS)
    for name, text in FAILING.items():
        (root / name).write_text(textwrap.dedent(text))
    env = {**os.environ, "PPY_TEST_SECRET": "hunter2", "PPY_CACHE_DIR": str(root / "cache")}
    result = subprocess.run(
        [sys.executable, "-m", "ppy", "build", str(root)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    return root, result


def _line(result: subprocess.CompletedProcess[str], module: str, name: str) -> str:
    return next(
        ln for ln in result.stdout.splitlines() if ln.startswith(f"{module} ") and f" {name} " in ln
    )


def _call(root: Path, name: str, *args: object) -> list[np.ndarray]:
    entry = read_artifact(root / ".ppy" / "artifact.ppyz").entry("kinds", name)
    assert entry is not None, f"{name} was not staged"
    exported = export.deserialize(bytearray(entry.payload["export"]))
    return [np.asarray(r) for r in jax.tree.leaves(exported.call(*args))]


def test_exported_functions_compute_what_the_jitted_ones_do(built: tuple[Path, object]) -> None:
    root, _result = built
    x = jnp.arange(12, dtype=jnp.float32).reshape(3, 4)
    assert np.array_equal(_call(root, "aliased", x)[0], np.asarray(x * 2))
    assert np.array_equal(_call(root, "aliased", x[:1])[0], np.asarray(x[:1] * 2))
    assert np.array_equal(_call(root, "inline", jnp.ones(5, jnp.float32))[0], np.full(5, 2.0))
    diff, dots = _call(root, "pair", x, x + 1)
    assert np.array_equal(diff, -np.ones((3, 4))) and dots.shape == (3,)
    assert _call(root, "fixed", jnp.ones((2, 3), jnp.float32))[0].shape == (3, 2)
    assert _call(root, "doubled", jnp.ones(6, jnp.float32))[0].shape == (2, 3)
    assert np.array_equal(_call(root, "ints", jnp.array([7, -7], jnp.int32))[0], [3, -4])
    assert np.array_equal(_call(root, "flags", jnp.array([True, False]))[0], [False, True])
    out = _call(root, "brain", jnp.array([1.5, 2.0], jnp.bfloat16))[0]
    assert out.dtype == ml_dtypes.bfloat16 and out.tolist() == [4.5, 6.0]


def test_entries_describe_inputs_outputs_and_platforms(built: tuple[Path, object]) -> None:
    root, _ = built
    artifact = read_artifact(root / ".ppy" / "artifact.ppyz")
    pair = artifact.entry("kinds", "pair")
    assert pair is not None
    assert pair.signature == "pair(x: float32[B,4], y: float32[B,4]) -> (float32[B,4], float32[B])"
    assert pair.platforms == ("cpu", "cuda")
    assert pair.metadata["jax_version"] == jax.__version__
    assert b"stablehlo" in pair.payload["stablehlo"]
    fixed = artifact.entry("kinds", "fixed")
    assert fixed is not None and str(fixed.outputs[0]) == "float32[3,2]"


def test_functions_that_cannot_be_exported_say_why(
    built: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    _, result = built
    assert "stays" in _line(result, "kinds", "no_dtype") and "ppy.DType" in _line(
        result, "kinds", "no_dtype"
    )
    assert "static" in _line(result, "kinds", "static") and "stays" in _line(
        result, "kinds", "static"
    )


def test_a_function_jax_grad_differentiates_is_exported_with_its_vjp(
    built: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    root, result = built
    assert "exported" in _line(result, "kinds", "loss")
    # jax.jacrev reaches inner through a lambda: its forward call is the
    # export's, its batched pullback the original's (tests/fidelity/test_gradients.py).
    assert " exported " in _line(result, "kinds", "inner")
    artifact = read_artifact(root / ".ppy" / "artifact.ppyz")

    def carries_vjp(name: str) -> bool:
        entry = artifact.entry("kinds", name)
        assert entry is not None
        return bool(jax.export.deserialize(JaxExport.read(entry).variants[0].export).has_vjp())

    # Only what the module differentiates pays for a VJP.
    assert carries_vjp("loss") and not carries_vjp("pair")


def test_user_code_that_fails_at_import_is_reported_and_the_build_goes_on(
    built: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    _, result = built
    assert result.returncode == 1
    raises = _line(result, "raises", "f")
    assert "RuntimeError" in raises and "bad import" in raises
    assert "about to fail" in result.stdout
    assert "sys.exit(3)" in _line(result, "exits", "f")
    assert "exited with code 7" in _line(result, "dies", "f") and "dying now" in result.stdout
    assert "timed out after 12 s" in _line(result, "hangs", "f")
    secret = _line(result, "secret", "f")
    assert "secret=None" in secret and "hunter2" not in result.stdout
    assert "exported" in _line(result, "kinds", "aliased")


def test_a_second_build_reuses_entries_without_a_worker(
    make_project: Callable[..., Path], ppy: Run
) -> None:
    root = make_project({"model.ppy": KINDS})
    first = ppy("build", str(root))
    assert first.returncode == 0, first.stderr
    second = ppy("--log-format", "json", "-v", "build", str(root))
    assert second.returncode == 0, second.stderr
    events = [json.loads(line)["event"] for line in second.stderr.splitlines()]
    assert "build.reuse" in events and "build.stage" not in events
    exported = [ln for ln in first.stdout.splitlines() if " exported " in ln]
    reused = [ln for ln in second.stdout.splitlines() if " reused " in ln]
    assert len(reused) == len(exported) == 10
    (root / "model.ppy").write_text(KINDS + "\n# changed\n")
    third = ppy("build", str(root))
    assert sum(" exported " in ln for ln in third.stdout.splitlines()) == 10


def test_build_keep_going_exits_0_and_static_args_keep_the_build_green(
    make_project: Callable[..., Path], ppy: Run
) -> None:
    root = make_project({"bad.ppy": FAILING["raises.ppy"]})
    assert ppy("build", str(root)).returncode == 1
    assert ppy("build", "--keep-going", str(root)).returncode == 0
