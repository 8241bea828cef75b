"""The sizes a recording saw, for a function whose symbols would not be faithful.

A recording generalises the dims that moved between calls into symbols
(``x: float32[B,2]``, ``B`` seen as 24 and 64): that is ppy's claim, not the
program's, that the function computes the same at every ``B``. Where the
export with the symbol would not compute what jit does (its trace asks ``B``
something whose answer depends on the size, ``ppy_plugin_jax.dependence``;
XLA compiles it to another program, ``ppy_plugin_jax.refinement``), the
function is exported at the sizes the recording saw instead, one variant
per set of sizes: each is what jit traces at that size, and a call of any
other size takes the original path.

Only the descriptions that came from the recording are given sizes. A
symbol the source wrote (``ppy.Shape("B", 4)``) is the program's own claim,
and stays one: such a function is not exported at recorded sizes. This
module is pure: JSON in, JSON out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["named", "sized"]

#: One set of recorded sizes: symbol -> size.
Sizes = Mapping[str, int]


def sized(param: Mapping[str, Any], sizes: Sizes) -> dict[str, Any]:
    """``param`` (a worker request's parameter) with the recorded symbols of
    its recorded description at ``sizes``; any other description as it is."""
    array = param.get("array")
    if array is not None and array.get("recorded"):
        return {**param, "array": {**array, "dims": _dims(array["dims"], sizes)}}
    if param.get("nest") is not None:  # a pytree is described by a recording only
        return {**param, "nest": _nest(param["nest"], sizes)}
    return dict(param)


def _dims(dims: Sequence[int | str], sizes: Sizes) -> list[int | str]:
    return [sizes.get(d, d) if isinstance(d, str) else d for d in dims]


def _nest(value: Any, sizes: Sizes) -> Any:
    """A recorded pytree's description with each array leaf's symbols at ``sizes``."""
    if isinstance(value, Mapping):
        if "dims" in value and "dtype" in value:
            return {**value, "dims": _dims(value["dims"], sizes)}
        return {key: _nest(item, sizes) for key, item in value.items()}
    if isinstance(value, list):
        return [_nest(item, sizes) for item in value]
    return value


def named(sizes: Sequence[Sizes]) -> str:
    """The sets of sizes as a build line says them, smallest first:
    ``B=24, 64``, or with several symbols ``(B=4, N=3), (B=8, N=5)``."""
    symbols = list(dict.fromkeys(symbol for each in sizes for symbol in each))
    sizes = sorted(sizes, key=lambda each: [each.get(symbol, 0) for symbol in symbols])
    if len(symbols) == 1:
        (symbol,) = symbols
        return f"{symbol}={', '.join(str(each[symbol]) for each in sizes)}"
    return ", ".join(
        "(" + ", ".join(f"{symbol}={each[symbol]}" for symbol in symbols if symbol in each) + ")"
        for each in sizes
    )
