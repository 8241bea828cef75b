"""The concrete arrays behind a reverse-mode differentiation's tracers.

jax differentiates in reverse by linearizing: under ``jax.grad``,
``jax.value_and_grad`` or ``jax.vjp`` a jitted function is called with
``LinearizeTracer``s of one trace marked ``is_vjp`` (jax 0.10 to 0.12), each
carrying the concrete array it is evaluated at. Such a call is one a staged
export can serve (``ppy_runtime_pjrt.differentiated``), so the runtime's
guard checks those arrays, and a recording notes them, as it notes any call.
Every other tracer (``jax.jvp``, ``jax.vmap``, an outer ``jax.jit``'s, a
grad inside any of them, where a primal is itself a tracer) has none.

Nothing here imports jax: the caller passes jax's ``Tracer`` type.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["perturbed", "primals"]


def primals(leaves: Sequence[Any], tracer_type: type) -> list[Any] | None:
    """The concrete arrays a reverse-mode differentiation evaluates ``leaves``
    at, where every tracer among them is one of a single such trace; None
    where any tracer is anything else, or none is a tracer."""
    found: list[Any] = []
    trace: Any = None
    for leaf in leaves:
        if not isinstance(leaf, tracer_type):
            found.append(leaf)
            continue
        if type(leaf).__name__ != "LinearizeTracer":
            return None
        own = getattr(leaf, "_trace", None)
        if getattr(own, "is_vjp", None) is not True or (trace is not None and own is not trace):
            return None
        trace = own
        primal = getattr(leaf, "primal", None)
        if primal is None or isinstance(primal, tracer_type):
            return None
        found.append(primal)
    return found if trace is not None else None


def perturbed(leaf: Any) -> bool:
    """Whether a leaf of a call under reverse-mode differentiation carries a
    tangent: a ``LinearizeTracer`` whose tangent is not jax's symbolic zero."""
    return (
        type(leaf).__name__ == "LinearizeTracer"
        and type(getattr(leaf, "tangent", None)).__name__ != "Zero"
    )
