"""What a staged function's inputs look like, as abstract values the export traces with.

Discovery reads each parameter's description from the source
(``ppy.discovery.records.Parameter``); ``describe`` turns it into JSON for the worker,
and the worker turns that into an abstract value (``abstract``): a
``jax.ShapeDtypeStruct`` for an array, or a pytree of them:

- ``ppy.Like(example)``: ``jax.eval_shape(example)``, so building the
  example spends no FLOPs and no memory; ``axes={0: "B"}`` then makes axis 0
  of every leaf the symbol ``B``, in the function's scope;
- a class whose fields are described (a ``NamedTuple``, a ``TypedDict``, a
  dataclass jax flattens): an instance with each field's abstract value.
  The class's fields are read from its source, in whichever project module
  defines it, by the same discovery that read the function.

Symbolic dims share one scope per function, across every parameter and
field, with the project's constraints (``F <= N``) that name only its
symbols. A symbol that a ``ppy.Sharding`` splits over mesh axes (``"B"``
over ``data = 4``) can only take sizes those axes divide, and jax exports
only what divides at every size: it is exported as the multiple it must be
(``4*B``) everywhere it appears, and written as the source wrote it. This
module imports jax only inside the functions the worker calls.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from ppy.kinds.keys import jax_dtype
from ppy.plugin import Axis, ClassInfo, Parameter

__all__ = ["Abstract", "Undescribed", "abstract", "describe"]


class Undescribed(Exception):
    """An input the worker cannot build an abstract value for: the rule, why,
    and a remedy of its own where the rule's general one would not say enough."""

    def __init__(self, rule: str, reason: str, remedy: str | None = None) -> None:
        super().__init__(reason)
        self.rule = rule
        self.reason = reason
        self.remedy = remedy


def describe(parameter: Parameter, static: bool = False, donated: bool = False) -> dict[str, Any]:
    """A parameter's description as the worker reads it (JSON)."""
    spec = parameter.spec
    array = None
    if spec.shape is not None and spec.dtype is not None:
        # "ppy": written with ppy.Shape/ppy.DType, which the worker checks
        # against the live annotation; jaxtyping and recordings have none.
        written = not (spec.jaxtyping or spec.recorded or spec.weak)
        array = {"dims": list(spec.shape), "dtype": spec.dtype, "ppy": written}
        if spec.weak:
            array["weak"] = True
        if spec.weakly:
            array["weakly"] = list(spec.weakly)
        if spec.recorded:  # its symbols are the recording's: ``ppy_plugin_jax.sizes``
            array["recorded"] = True
    sharding = None
    if spec.sharding is not None:
        sharding = [list(a) if isinstance(a, tuple) else a for a in spec.sharding]
    return {
        "name": parameter.name,
        "kind": parameter.kind,
        "static": static,
        "donated": donated,
        "choices": list(parameter.choices) if parameter.choices is not None else None,
        "array": array,
        "like": parameter.like,
        "like_axes": [list(pair) for pair in parameter.like_axes],
        "nest": json.loads(parameter.nest) if parameter.nest is not None else None,
        "tree": parameter.tree,
        "has_default": parameter.has_default,
        "sharding": sharding,
    }


def _weak_kinds(weakly: Any) -> tuple[int, ...]:
    """A leaf's ``"weakly"``: the kinds of weak types it is weak in, each
    exported as a variant of its own (``ppy.record.generalise.General.kinds``,
    most called first); none where it is absent or not a list of kinds."""
    if isinstance(weakly, list) and all(type(k) is int and k >= 0 for k in weakly):
        return tuple(sorted(set(weakly)))
    return ()


@dataclass
class Abstract:
    """The traced parameters' abstract values, and what the source wrote of their leaves."""

    #: Each traced parameter's abstract value, by name, in the signature's order.
    values: dict[str, Any]
    #: The dims as the source wrote them (``"B+1"``, where jax would print
    #: ``B + 1``) of each leaf described by an annotation, by the leaf's ``id``.
    written: dict[int, list[int | str]]
    #: Each leaf's ``ppy.Sharding`` entries, by the leaf's ``id``: its own, or
    #: its parameter's (or field's) where it sits in a described pytree.
    shardings: dict[int, tuple[Axis, ...]]
    #: The constraints the scope holds: those that name only its symbols.
    constraints: tuple[str, ...] = ()
    #: Each symbol a sharding splits, and the multiple it is exported as (``B`` as ``4*B``).
    multiples: dict[str, int] = dataclasses.field(default_factory=dict)
    #: The leaves a ``ppy.Like`` example gives weakly typed (``jnp.full(s, 0.1)``),
    #: or a recording saw weakly typed, by ``id``: described strongly typed,
    #: and exported weakly typed too, in each of the kinds given (``_weak_kinds``).
    weak: dict[int, tuple[int, ...]] = dataclasses.field(default_factory=dict)


def abstract(
    fn_globals: dict[str, Any],
    params: Sequence[Mapping[str, Any]],
    root: str,
    constraints: Sequence[str] = (),
    mesh: Mapping[str, int] | None = None,
) -> Abstract:
    """What the traced parameters look like, built from their descriptions,
    with the ``constraints`` that name only their symbols, and the symbols
    split over ``mesh``'s axes (name -> size) as the multiples they must be."""
    from jax import export

    builder = _Builder(export.SymbolicScope(), Path(root).resolve())
    values = {p["name"]: builder.value(p, fn_globals, p["name"]) for p in params if not p["static"]}
    found = Abstract(values, builder.written, builder.shardings, weak=builder.weak)
    multiples = _multiples(found, mesh) if mesh else {}
    symbols = _symbols(values)
    held = tuple(c for c in constraints if symbols and _symbols_of(c) <= symbols)
    return _remade(found, held, multiples) if held or multiples else found


def _multiples(found: Abstract, mesh: Mapping[str, int]) -> dict[str, int]:
    """The multiple each symbol must be for every sharded dim it spans to
    divide over its axes at every size: ``B`` over 4 devices is ``4*B``,
    ``2*B`` over 4 is ``2*(2*B)``. Dims of other forms are left as written
    (the placement then says what does not divide)."""
    import math

    from ppy_plugin_jax.mesh import axis_names, scaled

    need: dict[str, int] = {}
    for leaf, axes in found.shardings.items():
        for dim, entry in zip(found.written.get(leaf, ()), axes, strict=False):
            if entry is None or not isinstance(dim, str) or (written := scaled(dim)) is None:
                continue
            coefficient, symbol = written
            parts = math.prod([mesh.get(name, 1) for name in axis_names(entry)])
            factor = parts // math.gcd(coefficient, parts)
            if factor > 1:
                need[symbol] = math.lcm(need.get(symbol, 1), factor)
    return need


#: The functions a dim expression may call; every other name in it is a symbol.
_DIM_FUNCTIONS = frozenset({"floordiv", "mod", "max", "min", "non_negative"})


def _symbols_of(text: str) -> set[str]:
    import re

    return set(re.findall(r"[A-Za-z_]\w*", text)) - _DIM_FUNCTIONS


def _symbols(values: Any) -> set[str]:
    """The symbols the leaves' dims name."""
    import jax

    return {
        symbol
        for leaf in jax.tree_util.tree_leaves(values)
        for dim in getattr(leaf, "shape", ())
        if not isinstance(dim, int)
        for symbol in _symbols_of(str(dim))
    }


def _remade(found: Abstract, constraints: tuple[str, ...], multiples: dict[str, int]) -> Abstract:
    """``found`` with its symbolic dims made again in a scope that holds
    ``constraints``, each symbol of ``multiples`` as its multiple: jax takes
    a scope's constraints only as it is made, and which apply is known only
    once every leaf is built. The leaves are remade from their dims, so
    nothing of the program runs twice."""
    import re

    import jax
    from jax import export

    def multiplied(text: str) -> str:
        for symbol, factor in multiples.items():
            text = re.sub(rf"\b{symbol}\b", f"{factor}*{symbol}", text)
        return text

    constraints = tuple(multiplied(c) for c in constraints)
    scope = export.SymbolicScope(constraints)
    written: dict[int, list[int | str]] = {}
    shardings: dict[int, tuple[Axis, ...]] = {}
    weak: dict[int, tuple[int, ...]] = {}

    def remade(leaf: Any) -> Any:
        if not isinstance(leaf, jax.ShapeDtypeStruct) or all(
            isinstance(d, int) for d in leaf.shape
        ):
            new = leaf
        else:
            dims = ", ".join(str(d) for d in leaf.shape)
            shape = export.symbolic_shape(multiplied(dims), scope=scope)
            new = jax.ShapeDtypeStruct(shape, leaf.dtype, weak_type=leaf.weak_type)  # type: ignore[no-untyped-call]
        if id(leaf) in found.written:
            written[id(new)] = found.written[id(leaf)]
        if id(leaf) in found.shardings:
            shardings[id(new)] = found.shardings[id(leaf)]
        if id(leaf) in found.weak:
            weak[id(new)] = found.weak[id(leaf)]
        return new

    # Mapped as a list, not as the dict: jax flattens a dict by sorted key and
    # rebuilds it so, which would hand the parameters back in alphabetical
    # order, and the signature's order is what binds each input to its name.
    trees = jax.tree_util.tree_map(remade, list(found.values.values()))
    values = dict(zip(found.values, trees, strict=True))
    return Abstract(values, written, shardings, constraints, multiples, weak)


class _Builder:
    def __init__(self, scope: Any, root: Path) -> None:
        self.scope = scope
        self.root = root
        self.written: dict[int, list[int | str]] = {}
        self.shardings: dict[int, tuple[Axis, ...]] = {}
        #: The leaves exported weakly typed too (``Abstract.weak``), by ``id``.
        self.weak: dict[int, tuple[int, ...]] = {}

    def value(self, desc: Mapping[str, Any], names: dict[str, Any], where: str) -> Any:
        if desc.get("array") is not None:
            value = self.array(desc["array"])
        elif desc.get("like") is not None:
            axes = [(int(axis), str(name)) for axis, name in desc.get("like_axes") or ()]
            value = self.like(desc["like"], axes, names, where)
        elif desc.get("tree") is not None:
            value = self.tree(desc["tree"], names, where)
        elif desc.get("nest") is not None:
            value = self.nest(desc["nest"], where)
        else:
            raise Undescribed("missing-shape", f"{where} is not described")
        if desc.get("sharding") is not None:
            import jax

            spec = tuple(tuple(a) if isinstance(a, list) else a for a in desc["sharding"])
            for leaf in jax.tree_util.tree_leaves(value):
                self.shardings.setdefault(id(leaf), spec)  # a field's own comes first
        return value

    def array(self, array: dict[str, Any]) -> Any:
        import jax
        from jax import export

        dims = array["dims"]
        shape: Any = tuple(dims)
        if any(isinstance(d, str) for d in dims):
            shape = export.symbolic_shape(", ".join(str(d) for d in dims), scope=self.scope)
        # jax leaves ShapeDtypeStruct's constructor unannotated (here and in ``like``).
        weak = bool(array.get("weak", False))  # a Python scalar, as jit traces one
        try:
            dtype = jax_dtype(array["dtype"])
        except TypeError:  # a recording made with another jax, say
            raise Undescribed(
                "invalid-spec", f"{array['dtype']!r} is not a dtype this jax has"
            ) from None
        leaf = jax.ShapeDtypeStruct(shape, dtype, weak_type=weak)  # type: ignore[no-untyped-call]
        self.written[id(leaf)] = list(dims)
        kinds = _weak_kinds(array.get("weakly"))
        if kinds:  # recorded weakly typed in some calls: a variant of its own
            self.weak[id(leaf)] = kinds
        return leaf

    def nest(self, node: Mapping[str, Any], where: str) -> Any:
        """A recorded pytree: plain lists, tuples and dicts as themselves, any
        other node rebuilt from its class and metadata, the arrays as ``array``
        makes them."""
        import jax

        ((kind, items),) = node.items()

        def item(value: Mapping[str, Any]) -> Any:
            if "nest" in value:
                return self.nest(value["nest"], where)
            if "dims" in value:
                return self.array({**value, "ppy": False})
            return None

        if kind == "dict":
            return {key: item(value) for key, value in items.items()}
        if kind != "node":
            built = [item(value) for value in items]
            return tuple(built) if kind == "tuple" else built
        children = [item(value) for value in items["children"]]
        try:
            data = (_resolved(items["type"]), _metadata(items["data"]))
            tree = jax.tree_util.PyTreeDef.from_node_data_and_children(
                jax.tree_util.default_registry,
                data,
                [jax.tree_util.tree_structure(child) for child in children],
            )
            return jax.tree_util.tree_unflatten(tree, jax.tree_util.tree_leaves(children))
        except Exception as error:
            raise Undescribed(
                "invalid-spec",
                f"{where}: the recorded {items['type']} could not be rebuilt "
                f"({type(error).__name__}: {error}); record again, or describe it with ppy.Like",
            ) from None

    def like(
        self, name: str, axes: list[tuple[int, str]], names: dict[str, Any], where: str
    ) -> Any:
        """The example's tree of shapes, with the ``axes`` it marks made symbolic."""
        import jax

        example = names.get(name)
        if not callable(example):
            raise Undescribed(
                "invalid-spec",
                f"{where}: ppy.Like({name}) names no function of the module "
                f"({type(example).__name__ if name in names else 'undefined'})",
            )
        shapes = jax.eval_shape(example)
        if not axes:

            def strong(leaf: Any) -> Any:
                made = jax.ShapeDtypeStruct(leaf.shape, leaf.dtype)  # type: ignore[no-untyped-call]
                if leaf.weak_type:  # the example's own call may pass it so: a variant of its own
                    self.weak[id(made)] = (0,)
                return made

            return jax.tree_util.tree_map(strong, shapes)
        flat, tree = jax.tree_util.tree_flatten_with_path(shapes)
        marking = _Marking(name, axes, where)
        if not flat:
            raise Undescribed(
                "invalid-spec",
                f"{where}: {marking.written} marks axes of every leaf, but {name}() "
                "gives no array leaves",
                "describe the parameter with ppy.Like(example) alone, or give the example arrays",
            )
        leaves = []
        for path, leaf in flat:
            dims = marking.dims(where + jax.tree_util.keystr(path), leaf)
            leaves.append(self.array({"dims": dims, "dtype": str(leaf.dtype)}))
            if leaf.weak_type:
                self.weak[id(leaves[-1])] = (0,)
        return jax.tree_util.tree_unflatten(tree, leaves)

    def tree(self, written: str, names: dict[str, Any], where: str) -> Any:
        import jax

        head, *rest = written.split(".")
        kind: Any = names.get(head)
        for part in rest:
            kind = getattr(kind, part, None)
        if not isinstance(kind, type):
            raise Undescribed(
                "missing-shape",
                f"{where} is annotated {written}, which is not a class the build can read; "
                "describe it with Annotated[Any, ppy.Like(example)]",
            )
        info = self.class_info(kind)
        label = f"{kind.__qualname__}"
        if info is None:
            raise Undescribed(
                "missing-shape",
                f"{where} is a {kind.__module__}.{label}, which is not defined in this project, "
                "so its fields cannot be read; describe it with Annotated[Any, ppy.Like(example)]",
            )
        if info.form is None:
            raise Undescribed(
                "missing-shape",
                f"{where} is a {label}, which is not a NamedTuple, TypedDict or dataclass; "
                "describe it with Annotated[Any, ppy.Like(example)]",
            )
        field_names = vars(sys.modules[kind.__module__])
        values: dict[str, Any] = {}
        for field in info.fields:
            at = f"{where}.{field.name}"
            if field.described:
                values[field.name] = self.value(describe(field), field_names, at)
            elif field.spec.problems:
                raise Undescribed("invalid-spec", "; ".join(field.spec.problems))
            elif not field.has_default:
                raise Undescribed(
                    "missing-shape",
                    f"field {label}.{field.name} of {where} is not described; annotate it as "
                    "Annotated[jax.Array, ppy.Shape(...), ppy.DType(...)], with jaxtyping, or "
                    "as a described class",
                )
        instance = dict(values) if info.form == "typeddict" else kind(**values)
        leaves = jax.tree_util.tree_leaves(instance)
        if len(leaves) == 1 and leaves[0] is instance:
            raise Undescribed(
                "missing-shape",
                f"{where} is a {label}, a dataclass jax does not flatten; register it with "
                "jax.tree_util.register_dataclass or flax.struct.dataclass",
            )
        return instance

    def class_info(self, kind: type) -> ClassInfo | None:
        module = sys.modules.get(kind.__module__)
        filename = getattr(module, "__file__", None)
        if filename is None:
            return None
        path = Path(filename).resolve()
        if not path.is_relative_to(self.root):
            return None
        return _classes(str(self.root), str(path)).get(kind.__qualname__)


class _Marking:
    """``ppy.Like(example, axes=...)`` applied to the example's leaves one at a time.

    Axes are named by position so that no dim is marked for merely having
    the batch's size; what a position cannot say, the example checks: every
    leaf must have each marked axis, and one name must have one size across
    the leaves (they are one symbol in the export, so an example that gives
    ``B`` two sizes describes inputs no call could pass).
    """

    def __init__(self, name: str, axes: list[tuple[int, str]], where: str) -> None:
        from ppy.plugin import format_like_axes

        self.axes = axes
        self.where = where
        self.written = f"ppy.Like({name}, axes={format_like_axes(tuple(axes))})"
        #: Each name's size in the example, and the first leaf that gave it.
        self.sizes: dict[str, tuple[int, str]] = {}

    def dims(self, leaf_name: str, leaf: Any) -> list[int | str]:
        """``leaf``'s dims with the marked ones named, or Undescribed saying why not."""
        shape = tuple(int(d) for d in leaf.shape)
        shown = f"{leaf.dtype}[{','.join(str(d) for d in shape)}]"
        named: dict[int, str] = {}
        for axis, symbol in self.axes:
            if not -len(shape) <= axis < len(shape):
                raise Undescribed(
                    "invalid-spec",
                    f"{self.where}: {self.written} marks axis {axis} of every leaf, but "
                    f"{leaf_name} is {shown}, which has no axis {axis}",
                    "mark only axes that every leaf of the example has, or pass the leaves "
                    "without them as a parameter of their own",
                )
            position = axis % len(shape)
            if named.setdefault(position, symbol) != symbol:
                raise Undescribed(
                    "invalid-spec",
                    f"{self.where}: {self.written} names axis {position} of {leaf_name} "
                    f"({shown}) both {named[position]} and {symbol}",
                    "give each axis one name: mark it by its number from the start or from "
                    "the end, not both, or pass the leaves of another rank as a parameter of "
                    "their own",
                )
        dims: list[int | str] = list(shape)
        for position, symbol in named.items():
            size, first = self.sizes.setdefault(symbol, (shape[position], leaf_name))
            if size != shape[position]:
                raise Undescribed(
                    "invalid-spec",
                    f"{self.where}: {self.written} makes {symbol} one size, but the example "
                    f"gives {first} {size} on the axis named {symbol} and {leaf_name} "
                    f"{shape[position]} ({shown})",
                    f"make the example give every axis named {symbol} the same size, or pass "
                    "the leaves that differ as a parameter of their own",
                )
            dims[position] = symbol
        return dims


def _resolved(ref: str) -> Any:
    """The object a recorded ``module:name`` names, looked up among the modules
    the function's own imports loaded (nothing is imported for it)."""
    from ppy.kinds.pytrees import resolve

    found = resolve(ref)
    if found is None:
        raise LookupError(f"{ref} names nothing the program has imported")
    return found


def _metadata(value: Any) -> Any:
    """A node's recorded metadata as the object jax flattened it to."""
    if isinstance(value, list):
        return [_metadata(item) for item in value]
    if isinstance(value, dict):
        ((kind, inner),) = value.items()
        return tuple(_metadata(item) for item in inner) if kind == "tuple" else _resolved(inner)
    return value


@lru_cache(maxsize=64)
def _classes(root: str, path: str) -> dict[str, ClassInfo]:
    from ppy.plugin import discover_module

    return discover_module(Path(root), Path(path)).classes
