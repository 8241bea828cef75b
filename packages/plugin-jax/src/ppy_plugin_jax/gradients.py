"""Does an export's VJP give the gradients jit gives, bit for bit?

A function the program differentiates is exported with its VJP
(``serialize(vjp_order=1)``): ``jax.grad`` of the staged function is then
served by the export's own backward pass, not by a trace of the body. That
pass is another program than the one jax differentiates the jitted function
into, and XLA may compile it otherwise, so it is compared before it is
trusted: on inputs drawn from a fixed seed, shaped by the description (each
symbol at the first size of ``refinement.PROBES`` both compute), the
gradients through the deserialized export and through the jitted function,
by ``jax.value_and_grad`` for a function of one scalar output, as the
program's ``jax.grad`` computes them, else by ``jax.vjp`` with a cotangent of
ones. The values and each input's gradient are compared byte for byte (NaNs
by their bits, ``-0.0`` apart from ``0.0``). Where one differs, the function
stays jitted, as the refinement rule keeps one whose forward pass differs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ppy_plugin_jax.refinement import PROBES

__all__ = ["vjp_differs"]


def _probe(rng: Any, leaf: Any, sizes: dict[str, int]) -> Any:
    """A value for ``leaf`` (a ``ShapeDtypeStruct``, its symbols at ``sizes``):
    normal draws of its dtype; a weakly typed scalar as the Python scalar jit
    traces weakly."""
    import numpy as np

    from ppy_plugin_jax.verify import sample

    shape = tuple(d if isinstance(d, int) else int(d._evaluate(sizes)) for d in leaf.shape)
    value = sample(rng, shape, leaf.dtype)
    if getattr(leaf, "weak_type", False) and shape == ():
        return np.asarray(value).item()
    return value


def _symbols(leaves: Sequence[Any]) -> list[str]:
    names: set[str] = set()
    for leaf in leaves:
        for dim in leaf.shape:
            if not isinstance(dim, int):
                names.update(dim.get_vars())
    return sorted(names)


def _pulled(function: Callable[..., Any], values: list[Any], wrt: list[int]) -> tuple[Any, Any]:
    """The outputs of ``function`` at ``values`` and their pullback to the
    inputs ``wrt``: as ``jax.grad`` has it for one scalar output, else by a
    cotangent of ones (zeros of ``float0`` for an output with no tangent)."""
    import jax
    import numpy as np

    def of(*diff: Any) -> Any:
        full = list(values)
        for index, value in zip(wrt, diff, strict=True):
            full[index] = value
        return function(*full)

    primals = [values[i] for i in wrt]
    outputs = jax.eval_shape(of, *primals)
    inexact = [jax.numpy.issubdtype(o.dtype, jax.numpy.inexact) for o in outputs]
    if len(outputs) == 1 and outputs[0].shape == () and inexact[0]:
        value, grads = jax.value_and_grad(lambda *d: of(*d)[0], argnums=tuple(range(len(wrt))))(
            *primals
        )
        return [value], grads
    out, pullback = jax.vjp(of, *primals)
    cotangents = [
        jax.numpy.ones_like(o) if keep else np.zeros(o.shape, jax.dtypes.float0)
        for o, keep in zip(out, inexact, strict=True)
    ]
    return out, pullback(cotangents)


def _bits_differ(want: Any, got: Any) -> int | None:
    """How many elements of ``got`` differ from ``want`` in their bits; None
    where the shape or dtype differs."""
    import numpy as np

    a, b = np.asarray(want), np.asarray(got)
    if (a.shape, a.dtype) != (b.shape, b.dtype):
        return None
    if a.tobytes() == b.tobytes():
        return 0
    width = a.dtype.itemsize
    raw_a = np.frombuffer(a.tobytes(), dtype=np.uint8).reshape(-1, width)
    raw_b = np.frombuffer(b.tobytes(), dtype=np.uint8).reshape(-1, width)
    return int((raw_a != raw_b).any(axis=1).sum())


def vjp_differs(
    jitted: Callable[..., Any],
    exported: Any,
    leaves: Sequence[Any],
    names: Sequence[str],
    *,
    seed: int = 0,
) -> str | None:
    """Why the VJP of ``exported`` (deserialized, with its VJP) is not the
    jitted function's, bit for bit; None where they agree.

    ``jitted`` takes the export's leaves and returns the list of its output
    leaves; ``leaves`` are the export's inputs (``ShapeDtypeStruct``),
    ``names`` each one's name for the reason.
    """
    import jax
    import numpy as np

    wrt = [
        i for i, leaf in enumerate(leaves) if jax.numpy.issubdtype(leaf.dtype, jax.numpy.inexact)
    ]
    if not wrt:
        return None  # nothing to differentiate: jax.grad refuses it both ways
    symbols = _symbols(leaves)
    tried: list[str] = []
    for size in PROBES if symbols else (0,):
        sizes = dict.fromkeys(symbols, size)
        rng = np.random.default_rng(seed)
        values = [_probe(rng, leaf, sizes) for leaf in leaves]
        at = f" at {', '.join(f'{s}={size}' for s in symbols)}" if symbols else ""
        try:
            want = _pulled(lambda *v: list(jitted(*v)), values, wrt)
        except Exception:  # the jitted function refuses these sizes
            continue
        try:
            got = _pulled(lambda *v: jax.tree_util.tree_leaves(exported.call(*v)), values, wrt)
        except Exception as error:
            tried.append(f"{type(error).__name__}{at}")
            continue
        for index, (a, b) in enumerate(zip(want[0], got[0], strict=True)):
            count = _bits_differ(a, b)
            if count != 0:
                return f"output {index} differs{at} under jax.vjp from the jitted function's"
        for index, a, b in zip(wrt, want[1], got[1], strict=True):
            count = _bits_differ(a, b)
            if count != 0:
                many = f" in {count} of {np.size(a)} elements" if count else ""
                return (
                    f"the gradient of {names[index]} through its VJP differs{at} from the "
                    f"jitted function's{many}"
                )
        return None
    if tried:
        return f"its VJP could not be compared with the jitted function's: {tried[0]}"
    return "its VJP could not be compared: the jitted function refuses every size tried"
