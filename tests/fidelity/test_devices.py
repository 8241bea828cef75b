"""Devices: outputs committed as jit's are, inputs committed to a device or sharded."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import PERMISSIONS, cpu_backend
from tests.support.differential import differential, project

#: Two CPU devices, forced; and a TPU export that must fall back on the CPU.
pytestmark = cpu_backend

PROGRAM = """\
from typing import Annotated

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

import ppy

Batch = Annotated[jax.Array, ppy.Shape("B", 4), ppy.DType("float32")]


@jax.jit
def score(x: Batch) -> jax.Array:
    return x.sum(axis=-1)


first, second = jax.devices()
there = jax.device_put(jnp.ones((2,), jnp.float32), second)
x = jnp.ones((2, 4), jnp.float32)

y = score(x)  # uncommitted in, uncommitted out: it may meet an array anywhere
print(y, (y + there).devices())
y = score(np.ones((2, 4), np.float32))
print(y, (y + there).devices())

pinned = score(jax.device_put(x, first))  # committed in, committed out
try:
    pinned + there
except ValueError as error:
    print("refused:", str(error).splitlines()[0][:40])

elsewhere = score(jax.device_put(x, second))
print(elsewhere, elsewhere.devices())

mesh = Mesh(np.array(jax.devices()), ("data",))
sharded = score(jax.device_put(x, NamedSharding(mesh, PartitionSpec("data"))))
print(sharded, sharded.sharding.spec)
"""


def test_placement_and_commitment_are_as_jits(tmp_path: Path) -> None:
    root = project(tmp_path / "p", {"model.ppy": PROGRAM})
    env = {"XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
    compared = differential(root, cache=tmp_path / "c", env=env)
    assert "refused:" in compared.python.stdout
    # Uncommitted twice, then committed to the first device and to the
    # second: served there, as jit runs them. The array sharded over both
    # devices goes to jit.
    assert compared.bound() == {"score"} and compared.staged_calls("score") == 4
    assert {f["category"] for f in compared.fallbacks()} == {"device"}
    (reason,) = [str(f["reason"]) for f in compared.fallbacks()]
    assert "laid out over 2 devices" in reason


def test_an_export_for_another_platform_takes_the_original_path(tmp_path: Path) -> None:
    """Binding does not start jax's backend to ask its platform (a program may
    still call jax.distributed.initialize); the first call asks, and falls back."""
    program = """\
        from typing import Annotated

        import jax
        import jax.numpy as jnp

        import ppy


        @jax.jit
        def score(x: Annotated[jax.Array, ppy.Shape("B", 4), ppy.DType("float32")]):
            return x.sum(axis=-1)


        print(score(jnp.ones((2, 4), jnp.float32)), score(jnp.ones((3, 4), jnp.float32)))
        """
    pyproject = PERMISSIONS + 'platforms = ["tpu"]\n'
    root = project(tmp_path / "p", {"model.ppy": program}, pyproject)
    compared = differential(root, cache=tmp_path / "c")
    assert compared.bound() == {"score"} and compared.staged_calls("score") == 0
    (fallback,) = compared.fallbacks()
    assert fallback["category"] == "platform"
    assert "exported for tpu, but this process runs on cpu" in str(fallback["reason"])
