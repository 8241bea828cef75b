"""What a compiled function may refer to at module level, read from the AST.

A name inside a compiled body is a local, a module-level constant, the
``math`` module (or a name imported from it), a builtin the language knows,
or another ``@xla.jit`` function of the module. A module-level name counts as
a constant only when the module binds it exactly once, at top level, to an
expression made of literals and other constants, and no function declares it
``global``: anything that could rebind it at run time would make the staged
value wrong, so such a name leaves the function to Python. A program can still rebind one
from outside (``steps.STEP = 10``, ``globals()["K"] = ...``), so what a body
reads is written into its entry with the value it was compiled with
(``value_of``), and the runtime compares it.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["BUILTINS", "ModuleScope", "read_scope", "value_of"]

BUILTINS = frozenset({"abs", "min", "max", "float", "int", "bool", "range"})


@dataclass(frozen=True)
class ModuleScope:
    tree: ast.Module
    #: Compiled functions of the module by name (``@xla.jit`` at module level).
    functions: dict[str, ast.FunctionDef] = field(default_factory=dict)
    #: Module-level constants: name -> the expression bound to it.
    constants: dict[str, ast.expr] = field(default_factory=dict)
    #: Local name -> name in ``math`` ("math" itself maps to "").
    math: dict[str, str] = field(default_factory=dict)
    #: Builtins that the module does not rebind.
    builtins: frozenset[str] = BUILTINS


def _bound_names(statements: list[ast.stmt]) -> list[tuple[str, ast.stmt]]:
    """Every (name, statement) binding at module level, nested blocks included."""
    found: list[tuple[str, ast.stmt]] = []
    for stmt in statements:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.append((stmt.name, stmt))
            continue
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            for alias in stmt.names:
                name = alias.asname or alias.name.split(".")[0]
                found.append((name, stmt))
            continue
        for node in ast.walk(stmt):
            if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
                found.append((node.id, stmt))
            elif isinstance(node, ast.ExceptHandler):
                if node.name:
                    found.append((node.name, stmt))
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                found.append((node.name, stmt))
    return found


def _constant_expression(node: ast.expr, names: set[str]) -> bool:
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            if sub.id not in names:
                return False
        elif isinstance(sub, ast.Constant):
            if not isinstance(sub.value, (int, float)):
                return False
        elif not isinstance(
            sub, (ast.BinOp, ast.UnaryOp, ast.operator, ast.unaryop, ast.Load, ast.Attribute)
        ):
            return False
    return True


def read_scope(source: str, jit_names: set[str]) -> ModuleScope:
    tree = ast.parse(source)
    bindings = _bound_names(tree.body)
    counts: dict[str, int] = {}
    for name, _stmt in bindings:
        counts[name] = counts.get(name, 0) + 1
    declared_global = {
        name
        for node in ast.walk(tree)
        if isinstance(node, (ast.Global, ast.Nonlocal))
        for name in node.names
    }
    once = {n for n, c in counts.items() if c == 1 and n not in declared_global}

    math: dict[str, str] = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Import):
            for alias in stmt.names:
                if alias.name == "math" and (alias.asname or "math") in once:
                    math[alias.asname or "math"] = ""
        elif isinstance(stmt, ast.ImportFrom) and stmt.module == "math" and not stmt.level:
            for alias in stmt.names:
                if alias.name != "*" and (alias.asname or alias.name) in once:
                    math[alias.asname or alias.name] = alias.name

    candidates: dict[str, ast.expr] = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
            target, value = stmt.targets[0], stmt.value
        elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            target, value = stmt.target, stmt.value
        else:
            continue
        if isinstance(target, ast.Name) and target.id in once:
            candidates[target.id] = value
    # keep only expressions over literals, math and constants that are kept too
    constants = dict(candidates)
    changed = True
    while changed:
        changed = False
        allowed = set(constants) | set(math)
        for name, value in list(constants.items()):
            if not _constant_expression(value, allowed - {name}):
                del constants[name]
                changed = True

    functions = {
        stmt.name: stmt
        for stmt in tree.body
        if isinstance(stmt, ast.FunctionDef) and stmt.name in jit_names and stmt.name in once
    }
    builtins = frozenset(n for n in BUILTINS if n not in counts and n not in declared_global)
    return ModuleScope(tree, functions, constants, math, builtins)


_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
    ast.LShift: operator.lshift,
    ast.RShift: operator.rshift,
    ast.BitOr: operator.or_,
    ast.BitXor: operator.xor,
    ast.BitAnd: operator.and_,
}
_UNARY: dict[type[ast.unaryop], Callable[[Any], Any]] = {
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
    ast.Invert: operator.invert,
}
#: The most bits an int computed for a constant may have: a value beyond it
#: is not computed (``2 ** 10**9`` would take the build with it).
_BITS = 4096


def value_of(scope: ModuleScope, name: str) -> int | float | None:
    """The value the module binds to the constant ``name`` when it runs, or
    None where it is not one Python computes within bounds.

    Computed with Python's own operators on the literals, so it is the value
    the module's own statement gives: the value the compiled body folded in.
    """
    try:
        value = _evaluate(scope, scope.constants[name], {name})
    except (ArithmeticError, ValueError, TypeError, LookupError, AttributeError, _TooLarge):
        return None
    return value if isinstance(value, int | float) else None


class _TooLarge(Exception):
    pass


def _evaluate(scope: ModuleScope, node: ast.expr, seen: set[str]) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        if node.id in scope.constants and node.id not in seen:
            return _evaluate(scope, scope.constants[node.id], seen | {node.id})
        return getattr(math, scope.math[node.id])
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        if scope.math.get(node.value.id) != "":
            raise LookupError(node.value.id)
        return getattr(math, node.attr)
    if isinstance(node, ast.UnaryOp):
        return _UNARY[type(node.op)](_evaluate(scope, node.operand, seen))
    if isinstance(node, ast.BinOp):
        left = _evaluate(scope, node.left, seen)
        right = _evaluate(scope, node.right, seen)
        if isinstance(node.op, ast.Pow | ast.LShift) and _too_large(node.op, left, right):
            raise _TooLarge
        return _BINARY[type(node.op)](left, right)
    raise LookupError(ast.dump(node))


def _too_large(op: ast.operator, left: Any, right: Any) -> bool:
    if not (isinstance(left, int) and isinstance(right, int)) or right <= 0:
        return False
    if isinstance(op, ast.LShift):
        return right > _BITS
    return abs(left) > 1 and right * abs(left).bit_length() > _BITS
