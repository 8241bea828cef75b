"""Typed PRNG key arrays (``jax.random.key``) as ppy names their dtypes.

A key array's dtype is one of jax's extended dtypes: ``key<fry>`` for the
default threefry implementation. NumPy has no such dtype, so
``jnp.dtype("key<fry>")`` does not read one back; this module does, for the
implementations jax itself registers. An export takes a key array as its
key data (``uint32[..., 2]`` for threefry) and jax's ``Exported.call`` wraps
and unwraps it, so a key is an input like any other once its dtype reads.

Nothing here imports jax until a dtype is resolved: core stays free of it.
"""

from __future__ import annotations

import functools
from typing import Any, Final

__all__ = ["KEY_DTYPES", "is_key", "jax_dtype", "key_array_type"]

#: The key dtypes ppy stages, by name, and the implementation each names
#: (``jax.random.key(seed, impl=...)``). A key of another implementation
#: (one a program registered itself) is not described, and stays jit's.
KEY_DTYPES: Final = {
    "key<fry>": "threefry2x32",
    "key<rbg>": "rbg",
    "key<urbg>": "unsafe_rbg",
}


def is_key(dtype: Any) -> bool:
    """Whether ``dtype`` is jax's dtype of typed PRNG keys (``key<fry>``),
    which NumPy cannot hold: only a key made by jax has one."""
    return type(dtype).__module__.startswith("jax") and str(dtype).startswith("key<")


def jax_dtype(name: str) -> Any:
    """The dtype ``name`` names in this process's jax: a key dtype of
    ``KEY_DTYPES``, or what ``jnp.dtype`` reads (TypeError where it reads none)."""
    if name in KEY_DTYPES:
        return _key_dtype(KEY_DTYPES[name])
    import jax.numpy as jnp

    return jnp.dtype(name)


@functools.cache
def _key_dtype(impl: str) -> Any:
    import jax

    # Abstractly: no key is made, no device touched.
    return jax.eval_shape(lambda: jax.random.key(0, impl=impl)).dtype


@functools.cache
def key_array_type() -> type | None:
    """The type of jax's key arrays, which a staged call may take as an
    input; None where this jax keeps it elsewhere. Found by its module, not
    by making a key: that would start jax's backend, which a program that
    calls ``jax.distributed.initialize`` has not done yet when ppy binds."""
    try:
        from jax._src.random.prng import PRNGKeyArray  # jax 0.10 to 0.12
    except ImportError:
        return None
    return PRNGKeyArray
