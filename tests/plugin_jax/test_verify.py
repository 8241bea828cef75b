"""The sampled size check (``verify-sizes = "sample"``, ``ppy_plugin_jax.verify``)
on real exports: what it draws and how it compares outputs."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import export, random
from ppy_plugin_jax.verify import specialized


def _exported(fn: object, *avals: object) -> export.Exported:
    return export.export(fn)(*avals)  # type: ignore[arg-type]


def test_a_function_of_typed_prng_keys_is_checked_with_drawn_keys() -> None:
    """Keys in and out (jax's mnist_vae passes one): the check draws key data
    for each size and compares the keys returned by their data."""

    @jax.jit
    def noisy(key: jax.Array, x: jax.Array) -> tuple[jax.Array, jax.Array]:
        key, sub = random.split(key)
        return key, x + random.normal(sub, x.shape)

    (b,) = export.symbolic_shape("B")
    key = jax.ShapeDtypeStruct((), random.key(0).dtype)
    assert (
        specialized(noisy, _exported(noisy, key, jax.ShapeDtypeStruct((b,), jnp.float32))) is None
    )


def test_a_body_that_singles_out_a_size_is_found() -> None:
    @jax.jit
    def odd(key: jax.Array, x: jax.Array) -> jax.Array:
        return x + (random.normal(key, x.shape) if x.shape[0] == 3 else 0.0)

    (b,) = export.symbolic_shape("B")
    key = jax.ShapeDtypeStruct((), random.key(0).dtype)
    exported = _exported(odd, key, jax.ShapeDtypeStruct((b,), jnp.float32))
    found = specialized(odd, exported)
    assert found is not None and found[0] == {"B": 3}, found
