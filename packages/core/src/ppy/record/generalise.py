"""One description from a function's recorded calls.

- A parameter that is an array in every call, of one dtype and one rank, is
  described as that array; each dim that took one value in every call stays
  that number, and each dim that took several becomes a symbol.
- Dims whose values moved together (the same value in each call, across
  parameters) share one symbol: ``x: float32[B,784]`` and ``y: int32[B]``.
- A static parameter takes the values it was called with, each a variant.
- What a function defined inside another reads of that one (its closure)
  is the most called signature's; calls that read other values are left
  to jit, as calls of another dtype are.
- A scalar weakly typed in every call (a Python int or float, which the
  recording notes as jit's ``weak int64[]`` where x64 is on, or a weakly
  typed ``jnp`` scalar) is described weakly typed, as a Python scalar is.
- An array weakly typed in some calls (a loop that starts from
  ``jnp.full(s, 0.1)``, whose later calls pass the strongly typed result),
  0-d or not, is exported both ways, as jit traces it both ways: jit keys
  its traces by each input's weak type, and a weak call's outputs are weak.
  Where several inputs are, each combination of weak types the calls had
  is a kind of its own (``General.kinds``), exported as a variant of its
  own; each such array names the kinds it is weak in (``Described.weakly``).
- A pytree is described leaf by leaf, its structure as recorded, where every
  call passed the same structure; its arrays' dims generalise with the rest.
- Anything else (a Python scalar, an array sharded over several
  devices, a parameter whose dtype or rank changed between calls) is not
  described, and the reason says why; the build then keeps the function
  jitted as it keeps any undescribed one.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from ppy.record.format import CLOSURE, parse_array
from ppy.spec import WEAK_SCALARS

__all__ = ["Described", "General", "generalise", "symbolic_dims"]

#: Symbols in the order they are handed out: the batch first, as people write it.
_SYMBOLS: Final = ("B", "N", "M", "K", "L", "P", "Q", "R", "S", "T", "U", "V", "W")


@dataclass(frozen=True)
class Described:
    """One parameter's description: an array, static values, or why neither."""

    dims: tuple[int | str, ...] | None = None
    dtype: str | None = None
    choices: tuple[object, ...] | None = None
    why_not: str | None = None
    #: A pytree of arrays: the structure as recorded, each array leaf as
    #: ``{"dims": [...], "dtype": ...}`` (and None as ``{"none": true}``).
    nest: dict[str, Any] | None = None
    #: A Python scalar in every call: weakly typed, as jit traces one.
    weak: bool = False
    #: An array weakly typed in some calls: the kinds (``General.kinds``) in
    #: which it is, each exported as a variant of its own beside the strongly
    #: typed one; empty where no call passed it weakly typed.
    weakly: tuple[int, ...] = ()

    def rendered(self) -> str:
        if self.dtype is not None and self.dims is not None:
            weak = "weak " if self.weak else "(weak) " if self.weakly else ""
            return f"{weak}{self.dtype}[{','.join(str(d) for d in self.dims)}]"
        if self.nest is not None:
            return _render_nest(self.nest)
        if self.choices is not None:
            return "static " + ", ".join(json.dumps(c) for c in self.choices)
        return f"not described: {self.why_not}"


@dataclass
class General:
    """Each parameter's description, and each symbol's recorded values."""

    parameters: dict[str, Described] = field(default_factory=dict)
    dims: dict[str, tuple[int, ...]] = field(default_factory=dict)
    #: The calls the description serves; the others passed another dtype,
    #: rank or structure, and take the original path as jit's own calls.
    calls: int = 0
    #: For a function defined inside another: the variables it reads of that
    #: one, ``{name: {"static": literal} | {"ref": "module:name"}}``.
    closure: dict[str, Any] | None = None
    #: The sizes each served signature gave the symbols together, most called
    #: first, each once: ``({"B": 64}, {"B": 24})``. The build exports these
    #: where a symbol would not be faithful.
    sizes: tuple[dict[str, int], ...] = ()
    #: The combinations of weak types the served calls passed their arrays
    #: in, most called first, less the one where none is weak: per kind,
    #: the arrays (``name``, ``name#leaf`` in a pytree) weakly typed in it.
    #: An input weakly typed in every call of shape () is a Python scalar's
    #: (``Described.weak``) and is in none.
    kinds: tuple[frozenset[str], ...] = ()

    def rendered(self) -> dict[str, str]:
        found = {name: described.rendered() for name, described in self.parameters.items()}
        if self.closure is not None:
            found[CLOSURE] = ", ".join(
                f"{name}={json.dumps(held['static']) if 'static' in held else held['ref']}"
                for name, held in self.closure.items()
            )
        return found


def generalise(recorded: Sequence[tuple[Mapping[str, Any], int]]) -> General:
    """The description of the calls ``recorded`` (inputs, calls), most called first."""
    general = General()
    if not recorded:
        return general
    names = list(
        dict.fromkeys(name for inputs, _ in recorded for name in inputs if name != CLOSURE)
    )
    statics = {name: _static_values(recorded, name) for name in names}
    recorded = _consistent(recorded)
    general.calls = sum(count for _, count in recorded)
    held = recorded[0][0].get(CLOSURE)
    general.closure = dict(held["closure"]) if held is not None else None
    arrays: dict[str, _Column] = {}
    nests: dict[str, Any] = {}
    scalars: set[str] = set()
    for name in names:
        values = [inputs.get(name) for inputs, _ in recorded]
        kinds = {next(iter(v)) if isinstance(v, Mapping) else None for v in values}
        if kinds == {"static"}:
            general.parameters[name] = Described(choices=statics[name])
        elif kinds == {"nest"}:
            why, skeleton, columns = _nest_columns([v["nest"] for v in values if v is not None])
            if why is not None:
                general.parameters[name] = Described(why_not=why)
                continue
            nests[name] = skeleton
            for index, leaf in enumerate(columns):
                arrays[f"{name}#{index}"] = leaf
        elif kinds == {"array"}:
            if any(v is not None and v.get("sharded") for v in values):
                why = "laid out over several devices; describe its sharding with ppy.Sharding"
                general.parameters[name] = Described(why_not=why)
                continue
            arrays[name] = _column([v for v in values if v is not None])
            if all(v is not None and v.get("weak") for v in values) and arrays[name][1][0] == ():
                scalars.add(name)  # a Python scalar where x64 is on: jit traces it weakly only
        elif kinds == {"python"} and len({v["python"] for v in values if v}) == 1:
            kind = next(v["python"] for v in values if v)
            weak = WEAK_SCALARS.get(kind)
            general.parameters[name] = (
                Described(dims=(), dtype=weak, weak=True)
                if weak is not None
                else Described(why_not=f"a Python {kind}, which jit traces as no array ppy stages")
            )
        else:
            general.parameters[name] = Described(why_not=_other(kinds))
    symbols = _symbols(arrays)
    general.kinds = _weak_kinds(arrays, scalars)
    described: dict[str, Described] = {}
    for name, (dtype, shapes, _) in arrays.items():
        dims: list[int | str] = []
        for axis in range(len(shapes[0])):
            column = tuple(shape[axis] for shape in shapes)
            symbol = symbols.get(column)
            dims.append(column[0] if symbol is None else symbol)
        described[name] = (
            Described(dims=(), dtype=dtype, weak=True)
            if name in scalars
            else Described(
                dims=tuple(dims),
                dtype=dtype,
                weakly=tuple(i for i, kind in enumerate(general.kinds) if name in kind),
            )
        )
    for name in names:
        if name in nests:
            own = iter([d for key, d in described.items() if key.startswith(f"{name}#")])
            general.parameters[name] = Described(nest=_fill(nests[name], own))
        elif name in described:
            general.parameters[name] = described[name]
    general.parameters = {n: general.parameters[n] for n in names if n in general.parameters}
    ordered = sorted(symbols.items(), key=_by_symbol)
    general.dims = {symbol: tuple(sorted(set(column))) for column, symbol in ordered}
    if ordered:
        calls = (
            tuple((symbol, column[i]) for column, symbol in ordered) for i in range(len(recorded))
        )
        general.sizes = tuple(dict(pairs) for pairs in dict.fromkeys(calls))
    return general


def _static_values(recorded: Sequence[tuple[Mapping[str, Any], int]], name: str) -> tuple[Any, ...]:
    """Every value a static parameter took, in every call: each is a variant."""
    values = (inputs.get(name) for inputs, _ in recorded)
    return tuple(dict.fromkeys(v["static"] for v in values if v is not None and "static" in v))


def _consistent(
    recorded: Sequence[tuple[Mapping[str, Any], int]],
) -> list[tuple[Mapping[str, Any], int]]:
    """The calls one description can serve: the most called signature's, and
    every other whose arrays and pytrees have its dtypes, ranks and structure.
    A call of another dtype then takes the original path, as it would where
    an annotation described the function."""
    first = _kinds(recorded[0][0])
    return [(inputs, count) for inputs, count in recorded if _kinds(inputs) == first]


def _kinds(inputs: Mapping[str, Any]) -> dict[str, str]:
    """Each input's kind as far as a description fixes it: an array's dtype and
    rank, a pytree's structure; any static value fits."""
    found = {}
    for name, value in inputs.items():
        kind = next(iter(value))
        if kind == "array":
            dtype, shape = parse_array(value["array"])
            found[name] = f"{dtype}/{len(shape)}/{bool(value.get('sharded'))}"
        elif kind == "nest":
            found[name] = json.dumps(_skeleton(value["nest"], []), sort_keys=True)
        elif kind != "static":
            found[name] = json.dumps(value, sort_keys=True)
    return found


#: An array input across the calls: its dtype, and its shape and whether it
#: was weakly typed in each call.
_Column = tuple[str, list[tuple[int, ...]], list[bool]]


def _column(values: Sequence[Mapping[str, Any]]) -> _Column:
    """One array input's recorded values (of one dtype, ``_consistent``) as a column."""
    parsed = [parse_array(v["array"]) for v in values]
    return parsed[0][0], [shape for _, shape in parsed], [bool(v.get("weak")) for v in values]


def _weak_kinds(arrays: Mapping[str, _Column], scalars: set[str]) -> tuple[frozenset[str], ...]:
    """The combinations of weak types the calls passed the arrays in, as jit
    keys its traces by them: each call's weakly typed arrays, most called
    first, each combination once, less the empty one (the strongly typed
    variant every description has). A Python scalar's input is weak in every
    variant (``scalars``), and so in none of these."""
    calls = len(next(iter(arrays.values()))[1]) if arrays else 0
    seen = (
        frozenset(name for name, (_, _, weak) in arrays.items() if weak[i] and name not in scalars)
        for i in range(calls)
    )
    return tuple(kind for kind in dict.fromkeys(seen) if kind)


def _nest_columns(
    nests: Sequence[Mapping[str, Any]],
) -> tuple[str | None, Any, list[_Column]]:
    """(why not, the structure, each array leaf's column), of calls that
    passed the same structure (``_consistent``)."""
    per_call: list[list[Mapping[str, Any]]] = []
    for nest in nests:
        found: list[Mapping[str, Any]] = []
        _skeleton(nest, found)
        per_call.append(found)
    first = per_call[0]
    if any(leaf.get("python") for leaf in first):
        return "holds a Python scalar, which jit treats as a weakly typed value", None, []
    if any(leaf.get("sharded") for call in per_call for leaf in call):
        return "holds arrays laid out over several devices; describe it with ppy.Like", None, []
    columns = []
    for index, leaf in enumerate(first):
        if "array" not in leaf:
            continue
        columns.append(_column([call[index] for call in per_call]))
    return None, nests[0], columns


def _skeleton(node: Any, leaves: list[Mapping[str, Any]]) -> Any:
    """The structure with each leaf replaced by its kind, dtype and rank."""
    return _each_item(node, lambda item: _skeleton_item(item, leaves))


def _each_item(node: Mapping[str, Any], change: Callable[[Any], Any]) -> dict[str, Any]:
    """``node`` with ``change`` applied to each of its items, in order."""
    ((kind, items),) = node.items()
    if kind == "dict":
        return {"dict": {key: change(item) for key, item in items.items()}}
    if kind == "node":
        return {"node": {**items, "children": [change(item) for item in items["children"]]}}
    return {kind: [change(item) for item in items]}


def _skeleton_item(item: Mapping[str, Any], leaves: list[Mapping[str, Any]]) -> Any:
    if "nest" in item:
        return _skeleton(item["nest"], leaves)
    leaves.append(item)
    if "array" in item:
        dtype, shape = parse_array(item["array"])
        return f"{dtype}/{len(shape)}"
    return json.dumps(item, sort_keys=True)


def _fill(node: Mapping[str, Any], described: Iterator[Described]) -> dict[str, Any]:
    """``node`` with each array leaf described (``{"dims": ..., "dtype": ...}``)."""
    return _each_item(node, lambda item: _fill_item(item, described))


def _fill_item(item: Mapping[str, Any], described: Iterator[Described]) -> dict[str, Any]:
    if "nest" in item:
        return {"nest": _fill(item["nest"], described)}
    if "array" in item:
        leaf = next(described)
        found = {"dims": list(leaf.dims or ()), "dtype": leaf.dtype}
        return {**found, "weakly": list(leaf.weakly)} if leaf.weakly else found
    return {"none": True}


def _render_nest(node: Mapping[str, Any]) -> str:
    """``[(float32[784,B], float32[B]), ...]``: lists, tuples and dicts as
    Python writes them, any other node as ``ScaleByAdamState(int32[], ...)``."""
    ((kind, items),) = node.items()
    if kind == "node":
        name = items["type"].rpartition(":")[2].rpartition(".")[2]
        return f"{name}({', '.join(_render_item(v) for v in items['children'])})"
    if kind == "dict":
        return "{" + ", ".join(f"{key!r}: {_render_item(v)}" for key, v in items.items()) + "}"
    inner = ", ".join(_render_item(v) for v in items)
    if kind == "tuple":
        return f"({inner},)" if len(items) == 1 else f"({inner})"
    return f"[{inner}]"


def _render_item(item: Mapping[str, Any]) -> str:
    if "nest" in item:
        return _render_nest(item["nest"])
    if "dims" in item:
        weak = "(weak) " if item.get("weakly") else ""
        return f"{weak}{item['dtype']}[{','.join(str(d) for d in item['dims'])}]"
    return "None"


def _by_symbol(item: tuple[tuple[int, ...], str]) -> int:
    return _SYMBOLS.index(item[1]) if item[1] in _SYMBOLS else len(_SYMBOLS)


def _other(kinds: set[str | None]) -> str:
    """Why an input of one kind in every call (``_consistent``) is not described."""
    kind = next(iter(kinds))
    return {
        "python": "a Python scalar of several types across the calls",
        "none": "always None",
    }.get(str(kind), f"a {kind}")


def _symbols(arrays: Mapping[str, _Column]) -> dict[tuple[int, ...], str]:
    """A symbol for each column of values (one value per call) that varies;
    equal columns share it. Handed out in the order the dims appear."""
    symbols: dict[tuple[int, ...], str] = {}
    for _, shapes, _ in arrays.values():
        for axis in range(len(shapes[0])):
            column = tuple(shape[axis] for shape in shapes)
            if len(set(column)) > 1 and column not in symbols:
                index = len(symbols)
                symbols[column] = _SYMBOLS[index] if index < len(_SYMBOLS) else f"D{index}"
    return symbols


def symbolic_dims(shapes: Sequence[Sequence[tuple[int, ...]]]) -> list[tuple[int | str, ...]]:
    """Each array's dims over several calls (``shapes[array][call]``, one rank
    per array) as the file's description gives them: a dim that took one value
    is that number, one that took several a symbol, shared by the dims whose
    values moved together."""
    columns: dict[str, _Column] = {str(i): ("", list(s), []) for i, s in enumerate(shapes)}
    symbols = _symbols(columns)
    return [
        tuple(
            symbols.get(column, column[0])
            for column in (tuple(shape[axis] for shape in each) for axis in range(len(each[0])))
        )
        for each in shapes
    ]
