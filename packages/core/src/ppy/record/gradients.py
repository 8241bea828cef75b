"""What a recording notes of a jitted call under ``jax.grad``.

jit serves such a call by programs of its own (``ppy.kinds.linearized``),
which depend on which inputs carry a tangent and on which outputs the
backward pass gives a cotangent. The first is known at the call; the
second only when the backward pass runs. So the recording passes each
traced leaf in and out of the call through an identity of its own (a
``jax.custom_vjp`` whose backward pass hands the cotangent on as it is, a
symbolic zero as a symbolic zero): the outputs' note which were given a
cotangent, and the inputs', whose backward passes run after the call's own
transpose, write the pattern down. One identity per leaf keeps what jax
prunes before it transposes the call what it would be without them: an
output nothing uses is pruned with its identity.

The values are python's: the identity computes nothing either way.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ppy.kinds.linearized import leaf_aval
from ppy.kinds.tracers import perturbed
from ppy.record.format import FunctionCalls

__all__ = ["watch"]

#: Static values the file holds: JSON literals.
_LITERALS = (bool, int, float, str, type(None))


def watch(
    calls: FunctionCalls,
    positional: Sequence[str],
    static: frozenset[str],
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
) -> Callable[[Callable[..., Any]], Any] | None:
    """What makes a call under reverse-mode differentiation at concrete
    points (``ppy.kinds.tracers.primals`` found them), given the jitted
    function, so that its backward passes are noted in ``calls``; None where
    a static value is not one the file holds."""
    import jax

    values = dict(zip(positional, args, strict=False)) | dict(kwargs)
    fixed = {name: v for name, v in values.items() if name in static}
    if not all(type(v) in _LITERALS for v in fixed.values()):
        return None
    inputs: dict[str, list[Any]] = {}
    flags: dict[str, list[bool]] = {}
    for name, value in values.items():
        if name not in static:
            leaves = jax.tree_util.tree_leaves(value)
            inputs[name] = [_aval(getattr(leaf, "primal", leaf)) for leaf in leaves]
            flags[name] = [perturbed(leaf) for leaf in leaves]
    call = {"inputs": inputs, "perturbed": flags, "static": fixed}
    return lambda original: _watched(original, args, dict(kwargs), calls, call)


def _watched(
    original: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    calls: FunctionCalls,
    call: dict[str, Any],
) -> Any:
    """``original`` called with its traced inputs and outputs passed through
    identities (``_identity``). Each output's backward pass notes its
    position; each input's, which runs after the call's own transpose and so
    after every output's, notes the pattern in ``calls``."""
    import jax

    given: set[int] = set()

    def noted() -> None:
        if given:
            calls.differentiated(call, tuple(sorted(given)))

    leaves, tree = jax.tree_util.tree_flatten((args, kwargs))
    leaves = [_identity(leaf, noted, zero_too=True) if perturbed(leaf) else leaf for leaf in leaves]
    args, kwargs = jax.tree_util.tree_unflatten(tree, leaves)
    outputs, tree = jax.tree_util.tree_flatten(original(*args, **kwargs))
    outputs = [
        _identity(leaf, functools.partial(given.add, i))
        if isinstance(leaf, jax.core.Tracer)
        else leaf
        for i, leaf in enumerate(outputs)
    ]
    return jax.tree_util.tree_unflatten(tree, outputs)


def _aval(value: Any) -> list[Any]:
    dtype, shape, weak = leaf_aval(value)
    return [dtype, list(shape), weak]


def _identity(leaf: Any, given: Callable[[], Any], *, zero_too: bool = False) -> Any:
    """``leaf`` through a ``jax.custom_vjp`` identity whose backward pass
    calls ``given`` where its cotangent is not a symbolic zero (or always,
    ``zero_too``), and hands the cotangent on as it is."""
    import jax
    from jax.custom_derivatives import SymbolicZero

    @jax.custom_vjp
    def same(x: Any) -> Any:
        return x

    def forward(x: Any) -> tuple[Any, None]:
        return x.value, None

    def backward(_: None, cotangent: Any) -> tuple[Any]:
        if zero_too or not isinstance(cotangent, SymbolicZero):
            given()
        return (cotangent,)

    same.defvjp(forward, backward, symbolic_zeros=True)
    return same(leaf)
