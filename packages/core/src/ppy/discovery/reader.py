"""Static discovery: what a ``.ppy`` module defines, read from its AST alone.

Nothing here imports or runs the user's code: the build must be able to say
what it would stage, and why not, on a machine where the project cannot even
be imported (runtime-only installs, ``build-execution = "deny"``). Names are
resolved through the module's own imports, so ``import jax as j; @j.jit`` and
``from jax import jit`` both read as ``jax.jit``; annotations are followed
through module-level aliases such as ``Batch = Annotated[...]``.

Four descriptions of an input are read: ``ppy.Shape``/``ppy.DType`` inside
``Annotated``; a jaxtyping annotation (``Float32[Array, "B 4"]``, read as
text: jaxtyping is never imported); ``ppy.Like(example)``; and a class
whose annotated fields are themselves described (a ``NamedTuple``, a
``TypedDict`` or a dataclass), which ``ModuleInfo.classes`` records. A
static parameter annotated ``bool`` or ``Literal[...]`` has its values read.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Literal

from ppy.annotations import check_axis, check_dim, check_dtype
from ppy.discovery.records import (
    ArraySpec,
    ClassInfo,
    Decorator,
    Differentiation,
    FunctionInfo,
    ModuleInfo,
    Parameter,
    ParameterKind,
    Scope,
)
from ppy.layout import module_name
from ppy.spec import Axis

__all__ = ["TRANSFORMS", "discover_module", "discover_source"]

#: jax transforms that differentiate the function handed to them.
TRANSFORMS: Final[frozenset[str]] = frozenset(
    f"jax.{name}"
    for name in (
        "grad",
        "value_and_grad",
        "vjp",
        "jvp",
        "jacfwd",
        "jacrev",
        "hessian",
        "linearize",
    )
)

_PARTIAL: Final = frozenset({"functools.partial"})
_ANNOTATED: Final = frozenset({"typing.Annotated", "typing_extensions.Annotated"})
_SHAPE: Final = frozenset({"ppy.Shape", "ppy.annotations.Shape"})
_DTYPE: Final = frozenset({"ppy.DType", "ppy.annotations.DType"})
_LIKE: Final = frozenset({"ppy.Like", "ppy.annotations.Like"})
_SHARDING: Final = frozenset({"ppy.Sharding", "ppy.annotations.Sharding"})
_TYPE_ALIAS: Final = frozenset({"typing.TypeAlias", "typing_extensions.TypeAlias"})
_LITERAL: Final = frozenset({"typing.Literal", "typing_extensions.Literal"})
_CLASS_VAR: Final = frozenset({"typing.ClassVar", "typing_extensions.ClassVar"})
_NAMED_TUPLE: Final = frozenset({"typing.NamedTuple", "typing_extensions.NamedTuple"})
_TYPED_DICT: Final = frozenset({"typing.TypedDict", "typing_extensions.TypedDict"})
_STATIC_KEYWORDS: Final = ("static_argnums", "static_argnames")
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


def discover_module(root: Path, path: Path) -> ModuleInfo:
    """Discover one file; the sha256 is of its bytes as they are on disk."""
    name = module_name(root, path)
    if name is None:
        raise ValueError(f"{path} is not under the project root {root}")
    data = Path(path).read_bytes()
    relative = Path(path).relative_to(root).as_posix()
    digest = hashlib.sha256(data).hexdigest()
    try:
        source = importlib.util.decode_source(data)
    except (UnicodeDecodeError, SyntaxError) as error:
        return ModuleInfo(name, relative, "", digest, syntax_error=f"{relative}:1: {error}")
    return _discover(source, module=name, path=relative, sha256=digest)


def discover_source(source: str, *, module: str, path: str) -> ModuleInfo:
    """Discover a module from its text; ``path`` is what messages call it."""
    digest = hashlib.sha256(source.encode("utf-8")).hexdigest()
    return _discover(source, module=module, path=path, sha256=digest)


def _discover(source: str, *, module: str, path: str, sha256: str) -> ModuleInfo:
    try:
        tree = ast.parse(source, filename=path)
    except SyntaxError as error:
        message = f"{path}:{error.lineno or 1}: {error.msg}"
        return ModuleInfo(module, path, source, sha256, syntax_error=message)
    reader = _Reader(tree, module=module, path=path)
    functions = reader.functions()
    return ModuleInfo(
        module,
        path,
        source,
        sha256,
        functions=functions,
        aliases=reader.imports,
        imports=_imported_modules(tree, module),
        classes=reader.classes(),
    )


# -- names ---------------------------------------------------------------------------------


def _module_statements(body: Sequence[ast.stmt]) -> Iterator[ast.stmt]:
    """Statements that run at module level, through if/try/with blocks."""
    for statement in body:
        yield statement
        if isinstance(statement, ast.If | ast.While | ast.For | ast.AsyncFor):
            yield from _module_statements(statement.body)
            yield from _module_statements(statement.orelse)
        elif isinstance(statement, ast.With | ast.AsyncWith):
            yield from _module_statements(statement.body)
        elif isinstance(statement, ast.Try):
            yield from _module_statements(statement.body)
            for handler in statement.handlers:
                yield from _module_statements(handler.body)
            yield from _module_statements(statement.orelse)
            yield from _module_statements(statement.finalbody)


def _import_names(node: ast.Import | ast.ImportFrom, module: str) -> Iterator[tuple[str, str]]:
    if isinstance(node, ast.Import):
        for alias in node.names:
            if alias.asname:
                yield alias.asname, alias.name
            else:
                top = alias.name.partition(".")[0]
                yield top, top
        return
    base = node.module or ""
    if node.level:
        package = module.split(".")[: -node.level]
        base = ".".join([*package, base] if base else package)
    for alias in node.names:
        if alias.name == "*":
            continue
        yield alias.asname or alias.name, f"{base}.{alias.name}" if base else alias.name


def _imported_modules(tree: ast.Module, module: str) -> frozenset[str]:
    """The dotted name of every module an import statement may load."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = dict(_import_names(node, module))  # local -> base.name
            found.update(base.values())
            package = module.split(".")[: -node.level] if node.level else []
            found.add(".".join([*package, *([node.module] if node.module else [])]))
    return frozenset(name for name in found if name)


def _imports(tree: ast.Module, module: str) -> dict[str, str]:
    """Local name -> dotted name. Module-level imports win over ones inside functions."""
    table: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            for local, dotted in _import_names(node, module):
                table.setdefault(local, dotted)
    for statement in _module_statements(tree.body):
        if isinstance(statement, ast.Import | ast.ImportFrom):
            for local, dotted in _import_names(statement, module):
                table[local] = dotted
    return table


def _bound_names(target: ast.expr) -> Iterator[str]:
    if isinstance(target, ast.Name):
        yield target.id
    elif isinstance(target, ast.Tuple | ast.List):
        for element in target.elts:
            yield from _bound_names(element)
    elif isinstance(target, ast.Starred):
        yield from _bound_names(target.value)


def _statement_bindings(statement: ast.stmt, module: str) -> Iterator[str]:
    """The module-level names one statement binds (or unbinds)."""
    if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        yield statement.name
    elif isinstance(statement, ast.Assign | ast.Delete):
        for target in statement.targets:
            yield from _bound_names(target)
    elif isinstance(statement, ast.AnnAssign | ast.AugAssign):
        if statement.value is not None:
            yield from _bound_names(statement.target)
    elif isinstance(statement, ast.Import | ast.ImportFrom):
        yield from (local for local, _ in _import_names(statement, module))
    elif isinstance(statement, ast.For | ast.AsyncFor):
        yield from _bound_names(statement.target)
    elif isinstance(statement, ast.With | ast.AsyncWith):
        for item in statement.items:
            if item.optional_vars is not None:
                yield from _bound_names(item.optional_vars)
    elif isinstance(statement, ast.Try):
        yield from (h.name for h in statement.handlers if h.name)


def _module_bindings(tree: ast.Module, module: str) -> dict[str, list[int]]:
    """Each name bound at module level, and the lines that bind it: statements
    at module level, and ``global`` declarations in functions."""
    lines: dict[str, list[int]] = {}
    for statement in _module_statements(tree.body):
        for name in _statement_bindings(statement, module):
            lines.setdefault(name, []).append(statement.lineno)
    for node in ast.walk(tree):
        if isinstance(node, ast.Global):
            for name in node.names:
                lines.setdefault(name, []).append(node.lineno)
    return lines


def _dotted(node: ast.expr) -> list[str] | None:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return parts[::-1]


# -- the reader ----------------------------------------------------------------------------


@dataclass
class _Def:
    node: ast.FunctionDef | ast.AsyncFunctionDef
    qualname: str
    scope: Scope
    #: Names of functions defined directly in this function's body.
    local: dict[str, str] = field(default_factory=dict)


class _Reader:
    def __init__(self, tree: ast.Module, *, module: str, path: str) -> None:
        self.tree = tree
        self.module = module
        self.path = path
        self.imports = _imports(tree, module)
        self.bindings = _module_bindings(tree, module)
        self.types: dict[str, ast.expr] = {}
        self.values: dict[str, ast.expr] = {}
        self._read_module_assignments()
        self.defs: list[_Def] = []
        self.module_functions: dict[str, str] = {}
        self._collect(tree.body, prefix="", scope="module", owner=None)

    # names

    def resolve(self, node: ast.expr) -> str | None:
        """The dotted name ``node`` refers to through the imports, or None."""
        parts = _dotted(node)
        if parts is None:
            return None
        head = self.imports.get(parts[0], parts[0])
        return ".".join([head, *parts[1:]])

    def _read_module_assignments(self) -> None:
        for statement in _module_statements(self.tree.body):
            if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
                target = statement.targets[0]
                if isinstance(target, ast.Name):
                    self.types[target.id] = statement.value
                    self.values[target.id] = statement.value
            elif (
                isinstance(statement, ast.AnnAssign)
                and isinstance(statement.target, ast.Name)
                and statement.value is not None
            ):
                name = statement.target.id
                self.values[name] = statement.value
                if self.resolve(statement.annotation) in _TYPE_ALIAS:
                    self.types[name] = statement.value
            elif type(statement).__name__ == "TypeAlias":  # ``type X = ...`` (3.12+)
                name_node = getattr(statement, "name", None)
                value = getattr(statement, "value", None)
                if isinstance(name_node, ast.Name) and isinstance(value, ast.expr):
                    self.types[name_node.id] = value

    # functions

    def _collect(
        self, body: Sequence[ast.stmt], *, prefix: str, scope: Scope, owner: _Def | None
    ) -> None:
        statements = _module_statements(body) if scope == "module" else iter(body)
        for statement in statements:
            if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef):
                qualname = f"{prefix}{statement.name}"
                record = _Def(statement, qualname, scope)
                self.defs.append(record)
                if scope == "module":
                    self.module_functions.setdefault(statement.name, qualname)
                if owner is not None:
                    owner.local.setdefault(statement.name, qualname)
                inner = f"{qualname}.<locals>."
                self._collect(statement.body, prefix=inner, scope="nested", owner=record)
            elif isinstance(statement, ast.ClassDef):
                inner_scope: Scope = "method" if scope == "module" else "nested"
                self._collect_class(statement, f"{prefix}{statement.name}.", inner_scope)
            elif scope != "module":
                for child in _nested_blocks(statement):
                    self._collect(child, prefix=prefix, scope=scope, owner=owner)

    def _collect_class(self, node: ast.ClassDef, prefix: str, scope: Scope) -> None:
        for statement in _class_statements(node.body):
            if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef):
                qualname = f"{prefix}{statement.name}"
                record = _Def(statement, qualname, scope)
                self.defs.append(record)
                self._collect(
                    statement.body, prefix=f"{qualname}.<locals>.", scope="nested", owner=record
                )
            elif isinstance(statement, ast.ClassDef):
                self._collect_class(statement, f"{prefix}{statement.name}.", scope)

    def functions(self) -> tuple[FunctionInfo, ...]:
        differentiated = _Differentiation(self).find()
        ordered = sorted(
            self.defs, key=lambda d: (d.scope != "module", d.node.lineno, d.node.col_offset)
        )
        return tuple(self._function(d, differentiated.get(d.qualname)) for d in ordered)

    def _function(self, record: _Def, differentiated: Differentiation | None) -> FunctionInfo:
        node = record.node
        return FunctionInfo(
            module=self.module,
            qualname=record.qualname,
            path=self.path,
            lineno=node.lineno,
            decorators=tuple(self._decorator(d) for d in node.decorator_list),
            parameters=tuple(self._parameters(node.args)),
            returns=ast.unparse(node.returns) if node.returns is not None else None,
            scope=record.scope,
            differentiated=differentiated,
            rebound=self._rebound(record),
        )

    def _rebound(self, record: _Def) -> tuple[int, ...]:
        if record.scope != "module":
            return ()
        lines = self.bindings.get(record.node.name, [])
        return tuple(line for line in lines if line != record.node.lineno)

    def _decorator(self, node: ast.expr) -> Decorator:
        if isinstance(node, ast.Call):
            func = self.resolve(node.func)
            keywords = tuple(k.arg or "**" for k in node.keywords)
            static = _static(node)
            if func in _PARTIAL and node.args:
                inner = self.resolve(node.args[0]) or ast.unparse(node.args[0])
                return Decorator(
                    inner, node.lineno, keywords, called=len(node.args) > 1, static=static
                )
            name = func or ast.unparse(node.func)
            return Decorator(name, node.lineno, keywords, called=bool(node.args), static=static)
        return Decorator(self.resolve(node) or ast.unparse(node), node.lineno)

    def _parameters(self, args: ast.arguments) -> Iterator[Parameter]:
        positional = [*args.posonlyargs, *args.args]
        first_default = len(positional) - len(args.defaults)
        for index, arg in enumerate(positional):
            yield self._parameter(arg, "positional", index >= first_default)
        if args.vararg is not None:
            yield self._parameter(args.vararg, "var_positional", False)
        for arg, default in zip(args.kwonlyargs, args.kw_defaults, strict=True):
            yield self._parameter(arg, "keyword_only", default is not None)
        if args.kwarg is not None:
            yield self._parameter(args.kwarg, "var_keyword", False)

    def _parameter(self, arg: ast.arg, kind: ParameterKind, has_default: bool) -> Parameter:
        return self.describe(arg.arg, kind, arg.annotation, has_default)

    def describe(
        self, name: str, kind: ParameterKind, annotation: ast.expr | None, has_default: bool
    ) -> Parameter:
        """A parameter or field with everything its annotation describes."""
        if annotation is None:
            return Parameter(name, kind, None, ArraySpec(None, None), has_default)
        found = _SpecFound()
        self._read_spec(annotation, found, seen=frozenset())
        return Parameter(
            name,
            kind,
            ast.unparse(annotation),
            ArraySpec(
                found.shape, found.dtype, tuple(found.problems), found.jaxtyping, found.sharding
            ),
            has_default,
            like=found.like,
            tree=found.tree,
            choices=found.choices,
        )

    # annotations

    def spec(self, annotation: ast.expr) -> ArraySpec:
        """The ppy metadata of an annotation, through Annotated and aliases."""
        return self.describe("", "positional", annotation, False).spec

    def _read_spec(self, node: ast.expr, found: _SpecFound, seen: frozenset[str]) -> None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            try:
                node = ast.parse(node.value.strip(), mode="eval").body
            except SyntaxError:
                return
        if isinstance(node, ast.Name) and node.id in self.types and node.id not in seen:
            self._read_spec(self.types[node.id], found, seen | {node.id})
            return
        if isinstance(node, ast.Name | ast.Attribute):
            self._read_name(node, found)
            return
        if not isinstance(node, ast.Subscript):
            return
        head = self.resolve(node.value)
        if head in _LITERAL:
            found.choices = _literal_values(node.slice)
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
            if isinstance(item, ast.Name) and isinstance(self.values.get(item.id), ast.Call):
                item = self.values[item.id]  # F32 = ppy.DType("float32")
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
                found.like, problems = self._like(item)
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

    def _like(self, call: ast.Call) -> tuple[str | None, list[str]]:
        if len(call.args) == 1 and not call.keywords:
            arg = call.args[0]
            if isinstance(arg, ast.Name):
                return arg.id, []
            if (
                isinstance(arg, ast.Constant)
                and isinstance(arg.value, str)
                and arg.value.isidentifier()
            ):
                return arg.value, []
        return None, [
            f"{self._where(call)}: ppy.Like takes one module-level function, by itself or "
            f"by its name as a string: {ast.unparse(call)}"
        ]

    # classes

    def classes(self) -> dict[str, ClassInfo]:
        """Every module-level class, with the form that makes its fields a tree."""
        found: dict[str, ClassInfo] = {}
        for statement in _module_statements(self.tree.body):
            if isinstance(statement, ast.ClassDef):
                found.setdefault(statement.name, self._class(statement))
        return found

    def _class(self, node: ast.ClassDef) -> ClassInfo:
        bases = {self.resolve(base) for base in node.bases}
        decorators = {
            self.resolve(d.func if isinstance(d, ast.Call) else d) or ""
            for d in node.decorator_list
        }
        form: Literal["namedtuple", "typeddict", "dataclass"] | None = None
        if bases & _NAMED_TUPLE:
            form = "namedtuple"
        elif bases & _TYPED_DICT:
            form = "typeddict"
        elif any(name.rpartition(".")[2] == "dataclass" for name in decorators):
            form = "dataclass"
        fields = tuple(
            self.describe(s.target.id, "positional", s.annotation, s.value is not None)
            for s in _class_statements(node.body)
            if isinstance(s, ast.AnnAssign)
            and isinstance(s.target, ast.Name)
            and self.resolve(_unsubscript(s.annotation)) not in _CLASS_VAR
        )
        return ClassInfo(node.name, node.lineno, form, fields)

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
    shape: tuple[int | str, ...] | None = None
    dtype: str | None = None
    like: str | None = None
    tree: str | None = None
    choices: tuple[object, ...] | None = None
    jaxtyping: bool = False
    sharding: tuple[Axis, ...] | None = None
    problems: list[str] = field(default_factory=list)


def _unsubscript(node: ast.expr) -> ast.expr:
    return node.value if isinstance(node, ast.Subscript) else node


def _literal_values(node: ast.expr) -> tuple[object, ...] | None:
    """``Literal["a", 1]``'s values, or None if one is not a hashable literal."""
    items = node.elts if isinstance(node, ast.Tuple) else [node]
    values: list[object] = []
    for item in items:
        try:
            value = ast.literal_eval(item)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            return None
        if not isinstance(value, str | int | bool | bytes | type(None)):
            return None
        values.append(value)
    return tuple(values)


def _jaxtyping_dim(token: str) -> int | str | None:
    """One axis of a jaxtyping dims string: an int, a name, or None if not exportable."""
    if token.isdigit():
        return int(token)
    if token.isidentifier() and token != "_":
        return token
    return None


def _static(call: ast.Call) -> tuple[int | str, ...]:
    """The literal ``static_argnums`` and ``static_argnames`` of a decorator call."""
    found: list[int | str] = []
    for keyword in call.keywords:
        if keyword.arg not in _STATIC_KEYWORDS:
            continue
        try:
            value = ast.literal_eval(keyword.value)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            continue
        items = value if isinstance(value, tuple | list) else [value]
        found.extend(v for v in items if isinstance(v, int | str) and not isinstance(v, bool))
    return tuple(found)


def _nested_blocks(statement: ast.stmt) -> Iterator[Sequence[ast.stmt]]:
    """The statement lists inside a compound statement of a function body."""
    for name in ("body", "orelse", "finalbody"):
        block = getattr(statement, name, None)
        if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
            yield block
    for handler in getattr(statement, "handlers", ()):
        yield handler.body
    for case in getattr(statement, "cases", ()):
        yield case.body


def _class_statements(body: Sequence[ast.stmt]) -> Iterator[ast.stmt]:
    for statement in body:
        yield statement
        if isinstance(statement, ast.If | ast.Try):
            for block in _nested_blocks(statement):
                yield from _class_statements(block)


# -- differentiation -----------------------------------------------------------------------


class _Differentiation:
    """Which functions the module hands to a jax transform, directly or through calls."""

    def __init__(self, reader: _Reader) -> None:
        self.reader = reader
        self.by_qualname = {d.qualname: d for d in reader.defs}

    def find(self) -> dict[str, Differentiation]:
        seeds: list[tuple[int, str, str, tuple[str, ...]]] = []
        for call, scope in self._calls():
            transform = self._transform_of(call)
            if transform is None:
                continue
            target = call.args[0] if call.args else _keyword(call, "fun")
            if target is None:
                continue
            for qualname, via in self._targets(target, scope, seen=frozenset()):
                seeds.append((call.lineno, transform, qualname, via))
        for record in self.reader.defs:
            for decorator in record.node.decorator_list:
                transform = self._decorator_transform(decorator)
                if transform is not None:
                    seeds.append((decorator.lineno, transform, record.qualname, ()))
        result: dict[str, Differentiation] = {}
        for lineno, transform, qualname, via in sorted(seeds):
            self._spread(Differentiation(transform, lineno, via), qualname, result)
        return result

    def _spread(
        self, found: Differentiation, start: str, result: dict[str, Differentiation]
    ) -> None:
        queue: deque[tuple[str, tuple[str, ...]]] = deque([(start, found.via)])
        visited: set[str] = set()
        while queue:
            qualname, via = queue.popleft()
            if qualname in visited:
                continue
            visited.add(qualname)
            known = result.get(qualname)
            if known is None or len(via) < len(known.via):
                result[qualname] = Differentiation(found.transform, found.lineno, via)
            record = self.by_qualname.get(qualname)
            if record is None:
                continue
            name = record.qualname.rpartition(".")[2]
            for callee in self._referenced(record):
                queue.append((callee, (*via, name)))

    def _referenced(self, record: _Def) -> list[str]:
        """Functions a function's body refers to: its calls and what it passes on."""
        names: list[str] = []
        for statement in record.node.body:
            for node in ast.walk(statement):
                if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                    qualname = self._lookup(node.id, record)
                    if qualname is not None and qualname != record.qualname:
                        names.append(qualname)
        return names

    def _lookup(self, name: str, scope: _Def | None) -> str | None:
        if scope is not None and name in scope.local:
            return scope.local[name]
        return self.reader.module_functions.get(name)

    def _calls(self) -> Iterator[tuple[ast.Call, _Def | None]]:
        """Every call in the module with the function it appears in (None at module level)."""
        owners: dict[int, _Def] = {}
        for record in sorted(self.reader.defs, key=lambda d: d.qualname.count(".")):
            for node in ast.walk(record.node):
                owners[id(node)] = record
        for node in ast.walk(self.reader.tree):
            if isinstance(node, ast.Call):
                yield node, owners.get(id(node))

    def _transform_of(self, call: ast.Call) -> str | None:
        name = self.reader.resolve(call.func)
        if name in TRANSFORMS:
            return name
        func = call.func
        if isinstance(func, ast.Call) and self.reader.resolve(func.func) in _PARTIAL and func.args:
            inner = self.reader.resolve(func.args[0])
            if inner in TRANSFORMS:
                return inner
        return None

    def _decorator_transform(self, node: ast.expr) -> str | None:
        if isinstance(node, ast.Call):
            if self.reader.resolve(node.func) in _PARTIAL and node.args:
                node = node.args[0]
            else:
                node = node.func
        name = self.reader.resolve(node)
        return name if name in TRANSFORMS else None

    def _targets(
        self, node: ast.expr, scope: _Def | None, seen: frozenset[str]
    ) -> Iterator[tuple[str, tuple[str, ...]]]:
        if isinstance(node, ast.Name):
            qualname = self._lookup(node.id, scope)
            if qualname is not None:
                yield qualname, ()
                return
            value = self.reader.values.get(node.id)
            if value is not None and node.id not in seen:
                yield from self._targets(value, None, seen | {node.id})
        elif isinstance(node, ast.Lambda):
            for child in ast.walk(node.body):
                if isinstance(child, ast.Name) and isinstance(child.ctx, ast.Load):
                    qualname = self._lookup(child.id, scope)
                    if qualname is not None:
                        yield qualname, ("<lambda>",)
        elif isinstance(node, ast.Call) and node.args:
            # functools.partial(score, ...), jax.jit(score), jax.vmap(score): the
            # function handed on is the first argument.
            yield from self._targets(node.args[0], scope, seen)


def _keyword(call: ast.Call, name: str) -> ast.expr | None:
    for keyword in call.keywords:
        if keyword.arg == name:
            return keyword.value
    return None
