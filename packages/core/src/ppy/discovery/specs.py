"""What an annotation describes: ``ppy.Shape``/``ppy.DType``/``ppy.Sharding`` inside
``Annotated``, a jaxtyping annotation, ``ppy.Like``, a class of fields, a static flag.

Read as text, through the module's aliases: nothing is imported, jaxtyping
included. Each problem is kept with its ``file:line`` for the build to
report, rather than raised, so one bad annotation refuses one function.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Final

from ppy.annotations import check_axis, check_dim, check_dtype, check_like_axes
from ppy.discovery.names import Names
from ppy.discovery.records import ArraySpec, Parameter, ParameterKind
from ppy.spec import WEAK_SCALARS, Axis

__all__ = ["Specs"]

_ANNOTATED: Final = frozenset({"typing.Annotated", "typing_extensions.Annotated"})
_SHAPE: Final = frozenset({"ppy.Shape", "ppy.annotations.Shape"})
_DTYPE: Final = frozenset({"ppy.DType", "ppy.annotations.DType"})
_LIKE: Final = frozenset({"ppy.Like", "ppy.annotations.Like"})
_SHARDING: Final = frozenset({"ppy.Sharding", "ppy.annotations.Sharding"})

_LITERAL: Final = frozenset({"typing.Literal", "typing_extensions.Literal"})

#: Annotations that name something other than a class of described fields:
#: arrays without a description, Python values, and the untyped.
_NOT_A_TREE: Final = frozenset(
    {
        "jax.Array",
        "jax.numpy.ndarray",
        "numpy.ndarray",
        "jaxtyping.Array",
        "typing.Any",
        "typing.Optional",
        "typing.Union",
        "object",
        "int",
        "float",
        "complex",
        "bool",
        "str",
        "bytes",
        "dict",
        "list",
        "tuple",
        "None",
    }
)
#: jaxtyping's dtype annotations, by name: a dtype, or a family read as jax's
#: default member of it (what ``jnp.zeros`` gives without x64).
_JAXTYPING: Final[dict[str, str | None]] = {
    "Float16": "float16",
    "Float32": "float32",
    "Float64": "float64",
    "BFloat16": "bfloat16",
    "Complex64": "complex64",
    "Complex128": "complex128",
    "Int8": "int8",
    "Int16": "int16",
    "Int32": "int32",
    "Int64": "int64",
    "UInt8": "uint8",
    "UInt16": "uint16",
    "UInt32": "uint32",
    "UInt64": "uint64",
    "Bool": "bool",
    "Float": "float32",
    "Int": "int32",
    "Integer": "int32",
    "UInt": "uint32",
    "Complex": "complex64",
    "Inexact": "float32",
    "Num": None,
    "Real": None,
    "Shaped": None,
    "Key": None,
}

_NOT_LITERAL: Final = "{marker} arguments must be literals so the build can read them"


class Specs:
    """Reads annotations into ``Parameter``s, resolving names through ``names``."""

    def __init__(self, names: Names, path: str) -> None:
        self.names = names
        self.path = path

    def resolve(self, node: ast.expr) -> str | None:
        return self.names.resolve(node)

    def describe(
        self,
        name: str,
        kind: ParameterKind,
        annotation: ast.expr | None,
        has_default: bool,
        *,
        scalar: bool = False,
    ) -> Parameter:
        """A parameter or field with everything its annotation describes.

        ``scalar``: a function's parameter, where ``int`` or ``float`` is a
        Python scalar jit traces (a class's field of that type is its own
        value, static or not, which the class's example says)."""
        if annotation is None:
            return Parameter(name, kind, None, ArraySpec(None, None), has_default)
        found = _SpecFound()
        self._read_spec(annotation, found, seen=frozenset())
        python = self.resolve(annotation) if scalar and isinstance(annotation, ast.Name) else None
        if python in WEAK_SCALARS and found.shape is None and found.dtype is None:
            found.shape, found.dtype, found.weak = (), WEAK_SCALARS[python], True
        return Parameter(
            name,
            kind,
            ast.unparse(annotation),
            ArraySpec(
                found.shape,
                found.dtype,
                tuple(found.problems),
                found.jaxtyping,
                found.sharding,
                weak=found.weak,
            ),
            has_default,
            like=found.like,
            like_axes=found.like_axes,
            tree=found.tree,
            choices=found.choices,
        )

    def spec(self, annotation: ast.expr) -> ArraySpec:
        """The ppy metadata of an annotation, through Annotated and aliases."""
        return self.describe("", "positional", annotation, False).spec

    def _read_spec(self, node: ast.expr, found: _SpecFound, seen: frozenset[str]) -> None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            try:
                node = ast.parse(node.value.strip(), mode="eval").body
            except SyntaxError:
                return
        if isinstance(node, ast.Name) and node.id in self.names.types and node.id not in seen:
            lines = self.names.bindings.get(node.id, [])
            if len(lines) > 1:
                # Python reads the binding in force when the def runs; the
                # source alone cannot say which one that is for every def.
                found.problems.append(
                    f"{node.id} is bound {len(lines)} times at module level (lines "
                    f"{', '.join(map(str, lines))}), so the annotation's meaning depends on "
                    "which binding is in force when the def runs; bind the alias once"
                )
                return
            self._read_spec(self.names.types[node.id], found, seen | {node.id})
            return
        if isinstance(node, ast.Name | ast.Attribute):
            self._read_name(node, found)
            return
        if not isinstance(node, ast.Subscript):
            return
        head = self.resolve(node.value)
        if head in _LITERAL:
            found.choices, problem = _literal_values(node.slice)
            if problem is not None:
                found.problems.append(f"{self._where(node)}: {ast.unparse(node)} {problem}")
            return
        if head is not None and head.startswith("jaxtyping."):
            self._jaxtyping(node, head.rpartition(".")[2], found)
            return
        if head not in _ANNOTATED:
            return
        items = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        if not items:
            return
        self._read_spec(items[0], found, seen)
        for item in items[1:]:
            if isinstance(item, ast.Name) and isinstance(self.names.values.get(item.id), ast.Call):
                item = self.names.values[item.id]  # F32 = ppy.DType("float32")
            if not isinstance(item, ast.Call):
                continue
            marker = self.resolve(item.func)
            if marker in _SHAPE:
                found.shape, problems = self._shape(item)
                found.problems.extend(problems)
            elif marker in _DTYPE:
                found.dtype, problems = self._dtype(item)
                found.problems.extend(problems)
            elif marker in _LIKE:
                found.like, found.like_axes, problems = self._like(item)
                found.problems.extend(problems)
            elif marker in _SHARDING:
                found.sharding, problems = self._sharding(item)
                found.problems.extend(problems)

    def _read_name(self, node: ast.Name | ast.Attribute, found: _SpecFound) -> None:
        """A plain name: ``bool`` (a flag), or a class that may describe a tree."""
        name = self.resolve(node)
        if name == "bool":
            found.choices = (False, True)
        elif name is not None and name not in _NOT_A_TREE and not name.startswith("jaxtyping."):
            found.tree = ast.unparse(node)

    def _jaxtyping(self, node: ast.Subscript, dtype_name: str, found: _SpecFound) -> None:
        """``Float32[Array, "B 4"]``: dims from the string, dtype from the name."""
        where = f"{self._where(node)}: {ast.unparse(node)}"
        items = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        if dtype_name not in _JAXTYPING or len(items) != 2:
            return
        dims_node = items[1]
        if not (isinstance(dims_node, ast.Constant) and isinstance(dims_node.value, str)):
            found.problems.append(f"{where}: the dims must be a literal string")
            return
        dtype = _JAXTYPING[dtype_name]
        if dtype is None:
            found.problems.append(
                f"{where}: jaxtyping's {dtype_name} allows several dtypes; name one "
                "(Float32, Int32, ...) so the export has one"
            )
        dims: list[int | str] = []
        for axis, token in enumerate(dims_node.value.split()):
            dim = _jaxtyping_dim(token)
            if dim is None:
                found.problems.append(
                    f"{where}: axis {axis} {token!r} is not exportable; use a name (a "
                    "symbolic dim) or an int (a fixed one), not ..., *name, #name or _"
                )
            else:
                dims.append(dim)
        if len(found.problems) == 0:
            found.shape, found.dtype, found.jaxtyping = tuple(dims), dtype, True

    def _like(self, call: ast.Call) -> tuple[str | None, tuple[tuple[int, str], ...], list[str]]:
        """``ppy.Like(example)`` or ``ppy.Like(example, axes={0: "B"})``: the example's
        name and the axes it marks, or the problem that keeps it from being read."""

        def refused(problem: str) -> tuple[None, tuple[()], list[str]]:
            return None, (), [f"{self._where(call)}: {problem}: {ast.unparse(call)}"]

        keywords = {k.arg: k.value for k in call.keywords}
        unknown = sorted(str(k) for k in set(keywords) - {"axes"})
        if unknown:
            # ``dims={"B": 32}`` would mark dims by size, which a dim that
            # happens to equal 32 would match too; positions cannot.
            return refused(
                f"ppy.Like has no {unknown[0]}=; mark axes of every leaf symbolic by their "
                'position, as in axes={0: "B"}'
            )
        arg = call.args[0] if len(call.args) == 1 else None
        if isinstance(arg, ast.Name):
            name = arg.id
        elif (
            isinstance(arg, ast.Constant)
            and isinstance(arg.value, str)
            and arg.value.isidentifier()
        ):
            name = arg.value
        else:
            return refused(
                "ppy.Like takes one module-level function, by itself or by its name as a "
                'string, and optionally axes={0: "B"}'
            )
        if "axes" not in keywords:
            return name, (), []
        try:
            axes = ast.literal_eval(keywords["axes"])
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            return refused(
                "ppy.Like's axes must be a literal dict so the build can read it, "
                'such as axes={0: "B"}'
            )
        try:
            return name, check_like_axes(axes), []
        except ValueError as error:
            return None, (), [f"{self._where(call)}: {error}"]

    def _where(self, node: ast.expr) -> str:
        return f"{self.path}:{node.lineno}"

    def _literals(self, call: ast.Call) -> list[object] | None:
        if call.keywords or any(isinstance(a, ast.Starred) for a in call.args):
            return None
        values: list[object] = []
        for arg in call.args:
            try:
                values.append(ast.literal_eval(arg))
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                return None
        return values

    def _shape(self, call: ast.Call) -> tuple[tuple[int | str, ...] | None, list[str]]:
        values = self._literals(call)
        if values is None:
            message = _NOT_LITERAL.format(marker="ppy.Shape")
            return None, [f"{self._where(call)}: {message}: {ast.unparse(call)}"]
        dims: list[int | str] = []
        problems: list[str] = []
        for value in values:
            try:
                dims.append(check_dim(value))
            except ValueError as error:
                problems.append(f"{self._where(call)}: {error}")
        return (None if problems else tuple(dims)), problems

    def _sharding(self, call: ast.Call) -> tuple[tuple[Axis, ...] | None, list[str]]:
        values = self._literals(call)
        if values is None:
            message = _NOT_LITERAL.format(marker="ppy.Sharding")
            return None, [f"{self._where(call)}: {message}: {ast.unparse(call)}"]
        try:
            return tuple(check_axis(value) for value in values), []
        except ValueError as error:
            return None, [f"{self._where(call)}: {error}"]

    def _dtype(self, call: ast.Call) -> tuple[str | None, list[str]]:
        values = self._literals(call)
        if values is None:
            message = _NOT_LITERAL.format(marker="ppy.DType")
            return None, [f"{self._where(call)}: {message}: {ast.unparse(call)}"]
        if len(values) != 1:
            return None, [
                f"{self._where(call)}: ppy.DType takes one dtype name, "
                f"got {len(values)} arguments: {ast.unparse(call)}"
            ]
        try:
            return check_dtype(values[0]), []
        except ValueError as error:
            return None, [f"{self._where(call)}: {error}"]


@dataclass
class _SpecFound:
    """What one annotation has described so far; aliases and ``Annotated`` add to it."""

    shape: tuple[int | str, ...] | None = None
    dtype: str | None = None
    like: str | None = None
    like_axes: tuple[tuple[int, str], ...] = ()
    tree: str | None = None
    choices: tuple[object, ...] | None = None
    jaxtyping: bool = False
    sharding: tuple[Axis, ...] | None = None
    weak: bool = False
    problems: list[str] = field(default_factory=list)


def _literal_values(node: ast.expr) -> tuple[tuple[object, ...] | None, str | None]:
    """``Literal["a", 1]``'s values, or None and why a value cannot be staged.

    A staged static value travels to the export worker and into the
    manifest as JSON: an int, a str, a bool or None. ``bytes``, which
    ``Literal`` allows, has no JSON form; a float is not a ``Literal`` value
    (PEP 586), and ``1.0 == 1`` would make two values one trace.
    """
    items = node.elts if isinstance(node, ast.Tuple) else [node]
    values: list[object] = []
    for item in items:
        try:
            value = ast.literal_eval(item)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            return None, None  # a name or an enum member: not read from the source
        if not isinstance(value, str | int | bool | type(None)):
            return None, (
                f"holds {ast.unparse(item)}, a {type(value).__name__}: a staged static value "
                "is an int, a str, a bool or None"
            )
        values.append(value)
    return tuple(values), None


def _jaxtyping_dim(token: str) -> int | str | None:
    """One axis of a jaxtyping dims string: an int, a name, or None if not exportable."""
    if token.isdigit():
        return int(token)
    if token.isidentifier() and token != "_":
        return token
    return None
