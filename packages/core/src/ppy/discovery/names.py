"""How a module's names resolve: its imports, and what it binds at module level.

Every other reader of discovery asks this one what a name means, so
``import jax as j; @j.jit`` and ``from jax import jit`` both read as
``jax.jit``, and an annotation is followed through a module-level alias
(``Batch = Annotated[...]``, ``Batch: TypeAlias = ...``, ``type Batch = ...``).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Sequence
from typing import Final

__all__ = [
    "RETURNED",
    "Names",
    "called_jits",
    "called_name",
    "function_statements",
    "imported_modules",
    "is_main_guard",
    "module_statements",
    "nested_blocks",
]

#: The name of a jit a function makes and returns, no name holding it
#: (``return jax.jit(vmap(predict))`` in ``train``: ``train.<locals>.<return>``).
RETURNED: Final = "<return>"

#: The fields of a compound statement that hold statements, not its own expressions.
_BLOCKS: Final = frozenset({"body", "orelse", "finalbody", "handlers", "cases"})
#: Expressions whose code runs in a frame of its own (python 3.11 makes one
#: for a comprehension too), where a call site names another function.
_OWN_FRAMES: Final = (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


def called_name(line: int) -> str:
    """The name of a jit called where it is made, no name holding it
    (``print(jax.jit(loss)(w, x))`` on line 41 of ``main``:
    ``main.<locals>.<jit-41>``)."""
    return f"<jit-{line}>"


def called_jits(statement: ast.stmt) -> Iterator[ast.Call]:
    """The calls in ``statement``'s own expressions whose result is called
    at once (``jax.jit(loss)`` of ``jax.jit(loss)(w, x)``), in source order:
    not those of the statements it holds, nor of a lambda or comprehension,
    whose code runs in a frame of its own."""
    pending: list[ast.AST] = [
        value
        for field, value in ast.iter_fields(statement)
        if field not in _BLOCKS and isinstance(value, ast.AST)
    ]
    found: list[ast.Call] = []
    while pending:
        node = pending.pop()
        if isinstance(node, _OWN_FRAMES):
            continue
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Call):
            found.append(node.func)
        pending.extend(ast.iter_child_nodes(node))
    yield from sorted(found, key=lambda call: (call.lineno, call.col_offset))


_TYPE_ALIAS: Final = frozenset({"typing.TypeAlias", "typing_extensions.TypeAlias"})


class Names:
    """A module's names: imports (local name to dotted name), the lines that
    bind each module-level name, and its module-level assignments."""

    def __init__(self, tree: ast.Module, module: str) -> None:
        self.tree = tree
        self.imports = _imports(tree, module)
        self.bindings = _module_bindings(tree, module)
        #: Name -> the expression an alias names (annotations follow these).
        self.types: dict[str, ast.expr] = {}
        #: Name -> the value a module-level assignment gives it.
        self.values: dict[str, ast.expr] = {}
        self._read_module_assignments()

    def resolve(self, node: ast.expr) -> str | None:
        """The dotted name ``node`` refers to through the imports, or None."""
        parts = _dotted(node)
        if parts is None:
            return None
        head = self.imports.get(parts[0], parts[0])
        return ".".join([head, *parts[1:]])

    def _read_module_assignments(self) -> None:
        for statement in module_statements(self.tree.body):
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


def module_statements(body: Sequence[ast.stmt]) -> Iterator[ast.stmt]:
    """Statements that run at module level, through if/try/with blocks."""
    for statement in body:
        yield statement
        if isinstance(statement, ast.If | ast.While | ast.For | ast.AsyncFor):
            yield from module_statements(statement.body)
            yield from module_statements(statement.orelse)
        elif isinstance(statement, ast.With | ast.AsyncWith):
            yield from module_statements(statement.body)
        elif isinstance(statement, ast.Try):
            yield from module_statements(statement.body)
            for handler in statement.handlers:
                yield from module_statements(handler.body)
            yield from module_statements(statement.orelse)
            yield from module_statements(statement.finalbody)


def function_statements(body: Sequence[ast.stmt]) -> Iterator[ast.stmt]:
    """A function body's statements, through its compound statements
    (``if``, loops, ``with``, ``try``, ``match``), not into what it defines."""
    for statement in body:
        yield statement
        if not isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            for block in nested_blocks(statement):
                yield from function_statements(block)


def nested_blocks(statement: ast.stmt) -> Iterator[Sequence[ast.stmt]]:
    """The statement lists inside a compound statement of a function body."""
    for name in ("body", "orelse", "finalbody"):
        block = getattr(statement, name, None)
        if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
            yield block
    for handler in getattr(statement, "handlers", ()):
        yield handler.body
    for case in getattr(statement, "cases", ()):
        yield case.body


def is_main_guard(test: ast.expr) -> bool:
    """``__name__ == "__main__"``, either way round: the test of a block
    that runs only when the module is the program."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1):
        return False
    sides = {ast.unparse(test.left), ast.unparse(test.comparators[0])}
    return isinstance(test.ops[0], ast.Eq) and sides in (
        {"__name__", "'__main__'"},
        {"__name__", '"__main__"'},
    )


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


def imported_modules(tree: ast.Module, module: str) -> frozenset[str]:
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
    for statement in module_statements(tree.body):
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
    for statement in module_statements(tree.body):
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
