"""The jax configuration a trace depends on, read the same way at build and at run time.

A jitted function is traced under the configuration in force at its call:
``jax_enable_x64`` changes the dtypes it produces, the promotion and
precision settings the ops it emits, ``jax_debug_nans`` and
``jax_disable_jit`` how it runs at all. An export froze the build's. The
export worker records the values of ``OPTIONS`` and of every option jax
itself counts in its trace context; the runtime takes the staged path only
while each recorded option has the same value.

Values are compared as ``repr`` text, which for jax's options (bools, enums,
strings, None) says all there is. This module needs no jax: the caller hands
in ``jax.config`` and the names jax puts in its trace context.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

__all__ = ["OPTIONS", "differences", "read"]

#: Options that change what a trace computes or whether it runs, whether or
#: not this jax counts them in its trace context.
OPTIONS: Final = (
    "jax_enable_x64",
    "jax_numpy_rank_promotion",
    "jax_numpy_dtype_promotion",
    "jax_default_matmul_precision",
    "jax_debug_nans",
    "jax_debug_infs",
    "jax_disable_jit",
    "jax_default_prng_impl",
    "jax_enable_custom_prng",
    "jax_threefry_partitionable",
    "jax_softmax_custom_jvp",
    "jax_enable_checks",
    "jax_dynamic_shapes",
)


def _value(config: Any, name: str) -> Any:
    """The option's value as the calling thread sees it (a ``with`` block's
    value inside one); ``KeyError`` where this jax has no such option."""
    from_values = getattr(config, "values", {})
    if name not in from_values:
        raise KeyError(name)
    try:
        return getattr(config, name)
    except AttributeError:
        return from_values[name]


def read(config: Any, traced: Iterable[str] = ()) -> dict[str, str]:
    """Name -> ``repr`` of each option of ``OPTIONS`` and ``traced`` this jax has."""
    found = {}
    for name in sorted({*OPTIONS, *traced}):
        try:
            found[name] = repr(_value(config, name))
        except KeyError:
            continue
    return found


def differences(config: Any, recorded: Mapping[str, str]) -> list[str]:
    """``name: now X, traced with Y`` for each recorded option whose value
    differs now; an option this jax does not have is not compared."""
    changed = []
    for name, then in sorted(recorded.items()):
        try:
            now = repr(_value(config, name))
        except KeyError:
            continue
        if now != then:
            changed.append(f"{name} is {now}, traced with {then}")
    return changed
