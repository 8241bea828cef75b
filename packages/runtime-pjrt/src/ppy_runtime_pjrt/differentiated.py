"""Is a call of tracers ``jax.grad`` of the staged function at a concrete point?

An export built with its VJP (``serialize(vjp_order=1)``) is differentiable
by reverse mode only: ``Exported.call`` under ``jax.grad``,
``jax.value_and_grad`` or ``jax.vjp`` runs the export forward and its own
VJP backward, with no trace of the function's body. jax differentiates in
reverse by linearizing: the traced leaves are a ``LinearizeTracer`` of a
trace marked ``is_vjp`` (jax 0.10 to 0.12), each carrying the concrete
array it is evaluated at. Such a call is served by the export (``primals``
gives the arrays the guard checks); every other tracer (``jax.jvp``,
``jax.linearize``, ``jax.vmap``, a trace of an outer ``jax.jit``, or grad
inside any of them, where a primal is itself a tracer) goes to the
original, as before: the export has no forward-mode or batching rule, and
inside an outer jit XLA compiles the caller around it otherwise than jit.

What the pullback is then handed is not known at the call: ``jax.grad``
calls it once, on concrete cotangents, but ``jax.jacrev`` (in a module the
build did not read, or a library) batches it with ``vmap``, and a pullback
called inside an outer ``jax.jit`` is traced. The export's VJP has no
batching rule, and inside a trace XLA would compile it otherwise than jit's
transposed function. So ``reverse`` serves the forward pass by the export
and decides at the pullback: concrete cotangents are answered by the
export's own VJP, anything else by the original's VJP (``jax.vjp`` of the
jitted function at the same point), which is what python computes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["reverse"]


def reverse(exported: Any, original: Callable[..., list[Any]]) -> Callable[..., list[Any]]:
    """``exported.call`` on leaves, differentiable in reverse: the export's VJP
    for concrete cotangents, ``original``'s (a function of the same leaves
    to the same output leaves) for traced or batched ones."""
    import jax

    @jax.custom_vjp
    def call(*leaves: Any) -> list[Any]:
        return list(exported.call(*leaves))

    def forward(*leaves: Any) -> tuple[list[Any], tuple[Any, ...]]:
        return list(exported.call(*leaves)), leaves

    def backward(leaves: tuple[Any, ...], cotangents: list[Any]) -> tuple[Any, ...]:
        concrete = not any(
            isinstance(value, jax.core.Tracer)
            for value in jax.tree_util.tree_leaves((leaves, cotangents))
        )
        served = (lambda *at: list(exported.call(*at))) if concrete else original
        _, pullback = jax.vjp(served, *leaves)
        return tuple(pullback(cotangents))

    call.defvjp(forward, backward)
    return call
