"""One description from a function's recorded calls.

- A parameter that is an array in every call, of one dtype and one rank, is
  described as that array; each dim that took one value in every call stays
  that number, and each dim that took several becomes a symbol.
- Dims whose values moved together (the same value in each call, across
  parameters) share one symbol: ``x: float32[B,784]`` and ``y: int32[B]``.
- A static parameter takes the values it was called with, each a variant.
- Anything else (a Python scalar, a pytree, an array sharded over several
  devices, a parameter whose dtype or rank changed between calls) is not
  described, and the reason says why; the build then keeps the function
  jitted as it keeps any undescribed one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from ppy.record.signatures import parse_array

__all__ = ["Described", "General", "generalise"]

#: Symbols in the order they are handed out: the batch first, as people write it.
_SYMBOLS: Final = ("B", "N", "M", "K", "L", "P", "Q", "R", "S", "T", "U", "V", "W")


@dataclass(frozen=True)
class Described:
    """One parameter's description: an array, static values, or why neither."""

    dims: tuple[int | str, ...] | None = None
    dtype: str | None = None
    choices: tuple[object, ...] | None = None
    why_not: str | None = None

    def rendered(self) -> str:
        if self.dtype is not None and self.dims is not None:
            return f"{self.dtype}[{','.join(str(d) for d in self.dims)}]"
        if self.choices is not None:
            return "static " + ", ".join(_json(c) for c in self.choices)
        return f"not described: {self.why_not}"


@dataclass
class General:
    """Each parameter's description, and each symbol's recorded values."""

    parameters: dict[str, Described] = field(default_factory=dict)
    dims: dict[str, tuple[int, ...]] = field(default_factory=dict)

    def rendered(self) -> dict[str, str]:
        return {name: described.rendered() for name, described in self.parameters.items()}


def _json(value: object) -> str:
    import json

    return json.dumps(value)


def generalise(recorded: Sequence[tuple[Mapping[str, Any], int]]) -> General:
    """The description of the calls ``recorded`` (inputs, calls), most called first."""
    general = General()
    if not recorded:
        return general
    names = list(dict.fromkeys(name for inputs, _ in recorded for name in inputs))
    arrays: dict[str, tuple[str, list[tuple[int, ...]]]] = {}
    for name in names:
        values = [inputs.get(name) for inputs, _ in recorded]
        kinds = {next(iter(v)) if isinstance(v, Mapping) else None for v in values}
        if kinds == {"static"}:
            choices = tuple(dict.fromkeys(v["static"] for v in values if v is not None))
            general.parameters[name] = Described(choices=choices)
        elif kinds == {"array"}:
            why = _not_an_array(values)
            if why is not None:
                general.parameters[name] = Described(why_not=why)
                continue
            parsed = [parse_array(v["array"]) for v in values if v is not None]
            dtypes = {dtype for dtype, _ in parsed}
            ranks = {len(shape) for _, shape in parsed}
            if len(dtypes) > 1 or len(ranks) > 1:
                general.parameters[name] = Described(
                    why_not=f"called with {len(dtypes)} dtypes and {len(ranks)} ranks"
                )
                continue
            arrays[name] = (dtypes.pop(), [shape for _, shape in parsed])
        else:
            general.parameters[name] = Described(why_not=_other(kinds, len(values)))
    symbols = _symbols(arrays)
    for name, (dtype, shapes) in arrays.items():
        dims: list[int | str] = []
        for axis in range(len(shapes[0])):
            column = tuple(shape[axis] for shape in shapes)
            symbol = symbols.get(column)
            dims.append(column[0] if symbol is None else symbol)
        general.parameters[name] = Described(dims=tuple(dims), dtype=dtype)
    general.dims = {
        symbol: tuple(sorted(set(column)))
        for column, symbol in sorted(symbols.items(), key=_by_symbol)
    }
    return general


def _by_symbol(item: tuple[tuple[int, ...], str]) -> int:
    return _SYMBOLS.index(item[1]) if item[1] in _SYMBOLS else len(_SYMBOLS)


def _not_an_array(values: Sequence[Any]) -> str | None:
    if any(v is None for v in values):
        return "not passed in every call"
    if any(v.get("sharded") for v in values):
        return "laid out over several devices; describe its sharding with ppy.Sharding"
    return None


def _other(kinds: set[str | None], calls: int) -> str:
    if None in kinds:
        return "not passed in every call"
    if len(kinds) > 1:
        return f"passed as {' and '.join(sorted(str(k) for k in kinds))} in different calls"
    kind = kinds.pop()
    return {
        "python": "a Python scalar, which jit treats as a weakly typed value; pass an array",
        "none": "always None",
        "tree": "a pytree; recorded pytrees are not described yet: describe it with ppy.Like",
    }.get(str(kind), f"a {kind}")


def _symbols(arrays: Mapping[str, tuple[str, list[tuple[int, ...]]]]) -> dict[tuple[int, ...], str]:
    """A symbol for each column of values (one value per call) that varies;
    equal columns share it. Handed out in the order the dims appear."""
    symbols: dict[tuple[int, ...], str] = {}
    for _, shapes in arrays.values():
        for axis in range(len(shapes[0])):
            column = tuple(shape[axis] for shape in shapes)
            if len(set(column)) > 1 and column not in symbols:
                index = len(symbols)
                symbols[column] = _SYMBOLS[index] if index < len(_SYMBOLS) else f"D{index}"
    return symbols
