"""Export jit's own programs for the calls a recording saw under ``jax.grad``.

For each such call (its leaves, which of them carried a tangent, its static
values) and each pattern of output cotangents its backward passes had, the
worker reads the programs jax compiles for it out of a trace of ``jax.vjp``
(``ppy.kinds.linearized.capture``) and exports them at the recorded shapes:
one primal program per call, one transposed program per pattern. A staged
call under ``jax.grad`` then runs python's programs, and its gradients are
python's to the bit, where an export's own VJP is another program
(``staged-vjp``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["linearized"]


def linearized(
    call_with: Callable[[Mapping[str, Any], Sequence[Any]], Any],
    names: Sequence[str],
    variants: Sequence[Any],
    recorded: Sequence[Mapping[str, Any]],
    platforms: Sequence[str],
) -> tuple[list[Any], list[str]]:
    """The ``Linearized`` records of the ``recorded`` calls (a function's
    ``gradients``), and why any call was left out.

    ``call_with(static, leaves)`` calls the jitted function with the traced
    parameters ``names`` (in the export's order) made of ``leaves``.
    """
    import jax
    from ppy.kinds.linearized import Linearized, Transposed, Unlinearizable, capture

    found: list[Linearized] = []
    left: list[str] = []
    for call in recorded[: Linearized.MAX]:
        static = dict(call["static"])
        at = _variant(variants, static)
        if at is None or set(call["inputs"]) != set(names):
            left.append(f"a call with {static or 'its inputs'} matches no export")
            continue
        avals = [
            jax.ShapeDtypeStruct(tuple(dims), dtype, weak_type=weak)  # type: ignore[no-untyped-call]
            for name in names
            for dtype, dims, weak in call["inputs"][name]
        ]
        perturbed = tuple(p for name in names for p in call["perturbed"][name])

        def function(*leaves: Any, static: Mapping[str, Any] = static) -> list[Any]:
            return jax.tree_util.tree_leaves(call_with(static, leaves))

        primal: Any = None
        transposed = []
        constants: list[Any] = []
        try:
            for pattern in call["cotangents"][: Linearized.MAX_TRANSPOSED]:
                captured = capture(function, avals, perturbed, tuple(pattern))
                if primal is None:
                    primal = captured
                transposed.append(
                    Transposed(
                        tuple(pattern),
                        _renumbered(captured.residuals, len(constants)),
                        captured.gradients,
                        _exported(captured.transposed, platforms),
                    )
                )
                constants += captured.constants
        except Unlinearizable as error:
            left.append(str(error))
            continue
        if primal is None:
            continue
        found.append(
            Linearized(
                variant=at,
                inputs=tuple((str(a.dtype), tuple(a.shape), bool(a.weak_type)) for a in avals),
                perturbed=perturbed,
                primal_inputs=primal.primal_inputs,
                outputs=primal.outputs,
                primal=_exported(primal.primal, platforms),
                transposed=tuple(transposed),
                constants=_constants(constants, platforms),
            )
        )
    return found, left


def _renumbered(sources: Sequence[Any], before: int) -> tuple[Any, ...]:
    """``sources`` of one capture, its constants numbered after ``before``
    of the captures before it: one constants program serves them all."""
    return tuple((kind, i + before if kind == "constant" else i) for kind, i in sources)


def _constants(values: Sequence[Any], platforms: Sequence[str]) -> bytes:
    """A program of no inputs that gives ``values``, exported; empty for none."""
    if not values:
        return b""
    import jax

    exported = jax.export.export(jax.jit(lambda: list(values)), platforms=platforms)()
    return bytes(exported.serialize())


def _variant(variants: Sequence[Any], static: Mapping[str, Any]) -> int | None:
    """The position of the first variant for these static values."""
    wanted = json.dumps(dict(static), sort_keys=True)
    for index, variant in enumerate(variants):
        if json.dumps(dict(variant.static), sort_keys=True) == wanted:
            return index
    return None


def _exported(closed: Any, platforms: Sequence[str]) -> bytes:
    """A closed jaxpr exported as jit compiles it: its equations traced
    again under ``jax.jit``, for the given platforms; ``Unlinearizable``
    where jit gives the program constants as arguments, which the export
    would embed (``ppy_plugin_jax.constants``)."""
    import jax
    from jax.extend.core import jaxpr_as_fun
    from ppy.kinds.linearized import Unlinearizable

    from ppy_plugin_jax.constants import hoisted

    avals = [
        jax.ShapeDtypeStruct(  # type: ignore[no-untyped-call]
            a.shape, a.dtype, weak_type=getattr(a, "weak_type", False)
        )
        for a in closed.in_avals
    ]
    jitted = jax.jit(jaxpr_as_fun(closed))
    found = hoisted(jitted, avals)
    if found:
        raise Unlinearizable(
            f"jit gives its program the constants {', '.join(found)} as arguments, "
            "which an export would embed"
        )
    exported = jax.export.export(jitted, platforms=platforms)(*avals)
    return bytes(exported.serialize())
