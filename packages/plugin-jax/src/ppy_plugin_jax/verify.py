"""Does an export with symbolic dims compute what the jitted function does, at every size?

An annotation can claim ``Shape("B", 4)`` for a body that depends on
``x.shape[0]``. jax then exports what the trace saw, and a staged call
would silently compute something else at the sizes the body singles out.

Where Python code asks a size something, the export's trace is watched
(``ppy_plugin_jax.dependence``, the ``verify-sizes`` default). What no
question shows (a body that tells a symbol from a size by its type) is
left to ``verify-sizes = "sample"``, at a price of two compiles per size:
each export is run against the original jitted function on generated
inputs, with each symbol at several sizes (``SIZES``, every symbol at each
of them in turn): same output structure, shapes, dtypes and values, bit for
bit (NaNs equal to NaNs). Sizes the export refuses are skipped (a staged
call of them falls back to the original), and so are sizes the original
refuses, unless the export computes them. The inputs are drawn from a fixed
seed, so a build is repeatable.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final, cast

from ppy.kinds.keys import KEY_DTYPES, is_key

__all__ = ["SIZES", "sample", "specialized", "symbols"]

#: The sizes each symbolic dim is checked at: the smallest, a few small ones
#: (where code special-cases 1, or takes x[:2]) and a larger one.
SIZES: Final = (1, 2, 3, 7)


def sample(rng: Any, shape: tuple[int, ...], dtype: Any) -> Any:
    """Draws of ``dtype`` in ``shape``: normal for floats, small ints, coin
    flips, typed PRNG keys of random key data."""
    import numpy as np

    if is_key(dtype):
        import jax

        words = jax.eval_shape(jax.random.key_data, jax.ShapeDtypeStruct(shape, dtype)).shape  # type: ignore[no-untyped-call]
        data = rng.integers(0, 2**32, size=words, dtype=np.uint32)
        return jax.random.wrap_key_data(data, impl=KEY_DTYPES[str(dtype)])
    kind = np.dtype(dtype).kind
    if kind == "b":
        return rng.random(shape) < 0.5
    if kind in "iu":
        return rng.integers(0, 8, size=shape).astype(dtype)
    if kind == "c":
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def symbols(exported: Any) -> list[str]:
    """The names of the export's symbolic dims, sorted."""
    names: set[str] = set()
    for aval in exported.in_avals:
        for dim in aval.shape:
            if not isinstance(dim, int):
                names.update(dim.get_vars())
    return sorted(names)


def _differs(want: Any, got: Any) -> str | None:
    import jax
    import numpy as np

    wanted, want_tree = jax.tree_util.tree_flatten(want)
    gotten, got_tree = jax.tree_util.tree_flatten(got)
    if cast(Any, want_tree) != got_tree:  # jax's stubs give PyTreeDef no __ne__
        return f"the export returns {got_tree}, the jitted function {want_tree}"
    for index, (a, b) in enumerate(zip(wanted, gotten, strict=True)):
        if is_key(getattr(a, "dtype", None)) and is_key(getattr(b, "dtype", None)):
            if a.dtype != b.dtype:
                return f"output {index} is a {b.dtype} key from the export, {a.dtype} from jit"
            a, b = jax.random.key_data(a), jax.random.key_data(b)
        a, b = np.asarray(a), np.asarray(b)
        if (a.shape, a.dtype) != (b.shape, b.dtype):
            return (
                f"output {index} is {b.dtype}{list(b.shape)} from the export, "
                f"{a.dtype}{list(a.shape)} from the jitted function"
            )
        same = np.array_equal(a, b, equal_nan=a.dtype.kind in "fc")
        if not same:
            return f"output {index} has other values from the export than from the jitted function"
    return None


def specialized(
    fn: Callable[..., Any], exported: Any, *, seed: int = 0
) -> tuple[Mapping[str, int], str] | None:
    """The first sizes at which ``exported`` and the jitted ``fn`` disagree,
    and how; None when they agree at every size tried (or have no symbol)."""
    import numpy as np

    names = symbols(exported)
    rng = np.random.default_rng(seed)
    for turn in range(len(SIZES)):
        sizes = {name: SIZES[(turn + i) % len(SIZES)] for i, name in enumerate(names)}
        shapes = [
            tuple(d if isinstance(d, int) else int(d._evaluate(sizes)) for d in aval.shape)
            for aval in exported.in_avals
        ]
        if not names or any(n < 0 for shape in shapes for n in shape):
            continue
        args = [
            sample(rng, shape, aval.dtype)
            for shape, aval in zip(shapes, exported.in_avals, strict=True)
        ]
        try:
            want = fn(*args)
        except Exception:  # the original refuses these sizes
            try:
                exported.call(*args)
            except Exception:
                continue
            return sizes, "the jitted function refuses these sizes, the export computes them"
        try:
            got = exported.call(*args)
        except Exception:  # a constraint of the export: a staged call falls back
            continue
        why = _differs(want, got)
        if why is not None:
            return sizes, why
    return None
