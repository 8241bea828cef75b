"""The calls of jitted functions that only the recorded process can export.

A jitted function that reads names made while the program runs (the
closure of ``main()``, globals set under ``if __name__ == "__main__":``)
cannot be made again by the build, which imports the module and has none of
them (``needs_live``). For such a function ``ppy record`` keeps, besides
the file's signatures, each abstract signature its calls had, as jit keys
them (``LiveWatch``): the tree structure of its traced inputs, each leaf's
shape, dtype and weak type, its static values. After the program's last
line the plugin exports it from the live function at those signatures
(``ppy.record.exports``).
"""

from __future__ import annotations

import ast
import builtins
import dis
import types
from collections.abc import Collection, Iterator, Mapping
from typing import Any

from ppy.kinds import statics
from ppy.kinds.fingerprint import Unreadable, absl_flags, closure, fingerprint
from ppy.kinds.pytrees import reference
from ppy.plugin import LiveCall
from ppy.record.generalise import symbolic_dims

__all__ = ["LiveWatch", "Traced", "module_names", "needs_live"]

_LOADS = frozenset({"LOAD_GLOBAL", "LOAD_NAME"})
_SCALARS = frozenset({bool, int, float, complex})


class Traced(Exception):
    """A call inside another function's trace: not a call of its own."""


def module_names(source: bytes) -> frozenset[str]:
    """The names a module binds at its top level where the build's import runs
    it: everything but the body of ``if __name__ == "__main__":``."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return frozenset()
    return frozenset(_bound(tree.body))


def _main_guard(statement: ast.stmt) -> bool:
    test = statement.test if isinstance(statement, ast.If) else None
    return (
        isinstance(test, ast.Compare)
        and isinstance(test.left, ast.Name)
        and test.left.id == "__name__"
        and any(isinstance(c, ast.Constant) and c.value == "__main__" for c in test.comparators)
    )


def _bound(body: list[ast.stmt]) -> Iterator[str]:
    for statement in body:
        if _main_guard(statement):
            assert isinstance(statement, ast.If)
            yield from _bound(statement.orelse)
            continue
        if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            yield statement.name
        elif isinstance(statement, ast.Import | ast.ImportFrom):
            for alias in statement.names:
                yield (alias.asname or alias.name).partition(".")[0]
        else:
            for node in ast.walk(statement):
                if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                    yield node.id
                elif isinstance(node, ast.Global):
                    yield from node.names
            for field in ("body", "orelse", "finalbody"):
                inner = getattr(statement, field, None)
                if isinstance(inner, list):
                    yield from _bound(inner)


def _globals_read(code: types.CodeType) -> Iterator[str]:
    for instruction in dis.get_instructions(code):
        if instruction.opname in _LOADS:
            yield str(instruction.argval)
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            yield from _globals_read(constant)


def needs_live(fn: types.FunctionType, names: frozenset[str], main: str) -> str | None:
    """Why the build cannot make ``fn`` again from its module (what it reads
    that only the running program has), or None where it can."""
    cells = closure(fn)
    for name in fn.__code__.co_freevars:
        if name not in cells:
            return f"it reads {name} of the function around it"
        value = cells[name]
        literal = value is None or type(value) in (bool, int, str) or type(value) is float
        if not literal and reference(value, main) is None:
            return f"it reads {name} of the function around it"
    for name in sorted(set(_globals_read(fn.__code__))):
        # Not yet set where the function is made: the main guard sets it later.
        if name not in names and not hasattr(builtins, name):
            return f"it reads {name}, which the program sets as it runs"
        if absl_flags(fn.__globals__.get(name)):  # the build's would be unparsed
            return f"it reads {name}, absl flags the program parses as it runs"
    return None


class LiveWatch:
    """Each abstract signature one function was called with, and how often."""

    __slots__ = (
        "counts",
        "defaulted",
        "defaults",
        "differentiated",
        "donated",
        "function",
        "parameters",
        "static",
        "values",
        "why",
    )

    def __init__(
        self,
        parameters: tuple[tuple[str, str], ...],
        static: frozenset[str],
        why: str | None,
        defaults: Collection[str] = (),
        donated: Collection[str] = (),
    ) -> None:
        self.parameters = parameters
        #: The parameters its jit donates.
        self.donated = frozenset(donated)
        self.static = tuple(name for name, _ in parameters if name in static)
        #: The parameters that have defaults: a call may leave them out.
        self.defaults = frozenset(defaults)
        #: The parameters the first call noted left to their defaults. jit
        #: traces such a default as a constant of the trace, and so does the
        #: export, which does not take the parameter: a call that passes it
        #: takes jit's path (``ppy_runtime_pjrt.calls``). A call that leaves
        #: others out is not noted.
        self.defaulted: frozenset[str] | None = None
        #: Why the build cannot make it (``needs_live``), or cannot make its
        #: calls: a call passed what the signatures file cannot hold (a
        #: static function or tuple, arrays laid out over several devices).
        #: None: the build can, and it is not exported here.
        self.why = why
        #: Each signature's static values themselves, by their key
        #: (``ppy.kinds.statics.key``: a function by its fingerprint).
        self.values: dict[Any, tuple[tuple[str, Any], ...]] = {}
        #: The jitted function the program made last.
        self.function: Any = None
        self.counts: dict[Any, int] = {}
        #: A call was made under reverse-mode differentiation (``jax.grad``).
        self.differentiated = False

    def note(
        self, positional: tuple[str, ...], args: tuple[Any, ...], kwargs: Mapping[str, Any]
    ) -> None:
        """Count this call's signature; a call that leaves out other parameters
        than the first call noted (``defaulted``), or passes a leaf jit
        cannot take, is left to the file alone."""
        values = dict(zip(positional, args, strict=False))
        values.update(kwargs)
        left = frozenset(n for n, _ in self.parameters if n not in values)
        if len(values) + len(left) != len(self.parameters) or not left <= self.defaults:
            return
        out = [n in left for n, kind in self.parameters if kind == "positional"]
        if out != sorted(out):
            return  # a positional parameter left out before one passed by name
        if self.defaulted is None:
            self.defaulted = left
        elif left != self.defaulted:
            return
        import jax

        static = tuple((name, values[name]) for name in self.static)
        traced = tuple(values[n] for n in self._traced())
        leaves, tree = jax.tree_util.tree_flatten(traced)
        described = tuple(_leaf(leaf) for leaf in leaves)
        if any(d is None for d in described):
            return
        try:
            keys = tuple((name, statics.key(value, _fingerprint)) for name, value in static)
            key = (keys, tree, described)
            self.counts[key] = self.counts.get(key, 0) + 1
        except (TypeError, Unreadable):  # a static value that does not hash: jit refuses it too
            return
        self.values.setdefault(keys, static)
        if self.why is None:
            self.why = _unwritable(static)
        if self.why is None and any(leaf is not None and len(leaf) > 4 for leaf in described):
            self.why = (
                "it is passed arrays laid out over several devices, which the file cannot hold"
            )

    def calls(self) -> tuple[LiveCall, ...]:
        """The signatures seen, most called first; those that differ only in
        sizes carry their dims generalised over them all (``LiveCall.dims``)."""
        traced = self._traced()
        ordered = sorted(self.counts.items(), key=lambda item: -item[1])
        families: dict[Any, list[tuple[tuple[int, ...], ...]]] = {}
        for key, _ in ordered:
            families.setdefault(_family(key), []).append(_shapes(key[2]))
        dims = {
            family: tuple(symbolic_dims(list(zip(*shapes, strict=True))))
            for family, shapes in families.items()
            if len(shapes) > 1
        }
        return tuple(
            LiveCall(
                traced, dict(self.values[key[0]]), key[1], key[2], count, dims.get(_family(key))
            )
            for key, count in ordered
        )

    def _traced(self) -> tuple[str, ...]:
        """The parameters the export takes as inputs: not static, not left out."""
        out = self.defaulted or frozenset()
        return tuple(n for n, _ in self.parameters if n not in self.static and n not in out)


def _fingerprint(function: Any) -> str:
    """A static function's fingerprint, by which its calls are told apart
    (``Unreadable`` where it has none: those calls are not exported)."""
    import jax

    return fingerprint(function, flatten=jax.tree_util.tree_flatten)


def _unwritable(static: tuple[tuple[str, Any], ...]) -> str | None:
    """Why the signatures file cannot hold these static values, or None."""
    for name, value in static:
        if not (value is None or type(value) in (bool, int, float, str)):
            kind = "a function" if statics.callable_static(value) else f"a {type(value).__name__}"
            return f"it is passed {kind} as static argument {name}, which the file cannot hold"
    return None


def _family(key: Any) -> Any:
    """A signature but for its arrays' sizes: static values, tree, and each
    leaf's kind, rank, dtype and weak type."""
    static, tree, leaves = key
    return (
        static,
        tree,
        tuple(
            (leaf[0], len(leaf[1]), *leaf[2:]) if leaf[0] == "array" else leaf for leaf in leaves
        ),
    )


def _shapes(leaves: tuple[tuple[Any, ...], ...]) -> tuple[tuple[int, ...], ...]:
    return tuple(leaf[1] if leaf[0] == "array" else () for leaf in leaves)


_TRACER: list[type] = []


def _leaf(value: Any) -> tuple[Any, ...] | None:
    if type(value) in _SCALARS:
        return ("python", type(value).__name__)
    shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
    if not (isinstance(shape, tuple) and dtype is not None):
        return None
    if not _TRACER:
        try:
            from jax.core import Tracer
        except ImportError:  # where jax.core no longer exports it
            from jax._src.core import Tracer
        _TRACER.append(Tracer)
    if isinstance(value, _TRACER[0]):
        raise Traced
    weak = bool(getattr(value, "weak_type", False))
    leaf = ("array", tuple(int(d) for d in shape), str(dtype), weak)
    sharding = getattr(value, "sharding", None)
    if sharding is not None and len(getattr(sharding, "device_set", ())) > 1:
        laid = _laid_out(sharding)
        return None if laid is None else (*leaf, laid)
    return leaf


def _laid_out(sharding: Any) -> tuple[Any, ...] | None:
    """An array's layout over several devices, as the export is made over it:
    its mesh's axis names, sizes and types, and its ``PartitionSpec``
    entries; None for any layout but a ``NamedSharding`` over a mesh."""
    mesh, spec = getattr(sharding, "mesh", None), getattr(sharding, "spec", None)
    if (
        mesh is None
        or spec is None
        or getattr(sharding, "memory_kind", None) not in (None, "device")
    ):
        return None
    try:
        types = tuple(str(getattr(t, "name", t)).lower() for t in mesh.axis_types)
        entries = tuple(e if e is None or isinstance(e, str) else tuple(e) for e in spec)
        return (tuple(mesh.axis_names), tuple(int(n) for n in mesh.axis_sizes), types, entries)
    except (AttributeError, TypeError):
        return None
