"""Expressions to IR: one function per kind of ``ast.expr``, in a table.

``expr`` looks the node's type up in ``EXPRESSIONS`` and refuses every kind
not in it. Calls are registered by ``calls.py``, which needs the statements
to inline a callee's body. Every value is computed under the frame's
predicate: an error CPython would raise sets the fallback flag only where
the predicate holds, so ``and``, ``or`` and ``a if c else b`` narrow it for
the operands Python may not evaluate.
"""

from __future__ import annotations

import ast
import math
import struct
from collections.abc import Callable
from typing import TypeVar

from ppy.kinds.xla_scalar import INT64_MAX as I64_MAX
from ppy.kinds.xla_scalar import INT64_MIN as I64_MIN
from ppy.kinds.xla_scalar import MIN_NORMAL_FLOAT64 as MIN_NORMAL

from ppy_plugin_xla.errors import describe, type_error, unsupported
from ppy_plugin_xla.front.arith import COMPARISONS, OPERATORS, as_int, binary, compare, truthy
from ppy_plugin_xla.front.frame import Frame, Unknown
from ppy_plugin_xla.ir import Var
from ppy_plugin_xla.scope import value_of

__all__ = ["EXPRESSIONS", "MATH_CONSTANTS", "expr", "name", "register"]

MATH_CONSTANTS = {"pi": math.pi, "e": math.e, "tau": math.tau, "inf": math.inf, "nan": math.nan}

Lowering = Callable[[Frame, ast.expr], Var]
#: ast.expr subclass -> the function that lowers it.
EXPRESSIONS: dict[type[ast.expr], Lowering] = {}
N = TypeVar("N", bound=ast.expr)


def register(kind: type[N]) -> Callable[[Callable[[Frame, N], Var]], Callable[[Frame, N], Var]]:
    def add(lowering: Callable[[Frame, N], Var]) -> Callable[[Frame, N], Var]:
        EXPRESSIONS[kind] = lowering  # type: ignore[assignment]
        return lowering

    return add


def expr(f: Frame, node: ast.expr) -> Var:
    """Lower one expression; a kind not in ``EXPRESSIONS`` is outside the language."""
    lowering = EXPRESSIONS.get(type(node))
    if lowering is None:
        raise unsupported(node, describe(node))
    return lowering(f, node)


# -- names and literals ----------------------------------------------------------------


def name(f: Frame, ident: str, node: ast.AST) -> Var:
    """A local, a module-level constant or a ``math`` constant, by name."""
    if ident in f.locals:
        value = f.vars.get(ident)
        if value is None:
            if f.s.discovery:
                raise Unknown(ident)
            raise unsupported(node, f"{ident} is used before it is assigned")
        defined = f.vars.get("$def:" + ident)
        if defined is not None:
            f.flag(f.b.not_(defined))  # UnboundLocalError
        return value
    scope = f.s.scope
    if ident in scope.constants:
        return _constant(f, ident, node)
    if ident in scope.math and scope.math[ident] in MATH_CONSTANTS:
        f.s.read(ident, "math:" + scope.math[ident])
        return f.f(MATH_CONSTANTS[scope.math[ident]])
    raise unsupported(
        node,
        f"the name {ident!r} (not a local, a module-level constant or a compiled function)",
        "pass it as a parameter, or make it a module-level constant bound once",
    )


def _constant(f: Frame, name: str, node: ast.AST) -> Var:
    """A module-level constant: its expression, lowered in place."""
    s = f.s
    if name in s.stack:
        raise unsupported(node, f"the constant {name} refers to itself")
    if not s.in_constant:
        value = value_of(s.scope, name)
        if value is None:
            raise unsupported(
                node,
                f"the constant {name}, whose value the build does not compute",
                "pass it as a parameter",
            )
        s.read(name, _written(value))
    s.stack.append(name)
    s.in_constant += 1
    saved = f.locals
    f.locals = set()
    try:
        return expr(f, s.scope.constants[name])
    finally:
        f.locals = saved
        s.in_constant -= 1
        s.stack.pop()


def _written(value: int | float) -> str:
    """A constant's value as ``metadata.reads`` writes it: exact, a float by its bits."""
    if isinstance(value, bool):
        return f"bool:{value}"
    if isinstance(value, int):
        return f"int:{value}"
    return "float:" + struct.pack(">d", value).hex()


@register(ast.Constant)
def _literal(f: Frame, node: ast.Constant) -> Var:
    value = node.value
    if isinstance(value, bool):
        return f.b.const("bool", value)
    if isinstance(value, int):
        if not I64_MIN <= value <= I64_MAX:
            raise unsupported(node, f"the integer literal {value} (outside int64)")
        return f.i(value)
    if isinstance(value, float):
        if value != 0 and abs(value) < MIN_NORMAL:
            raise unsupported(node, f"the subnormal literal {value!r}")
        return f.f(value)
    raise unsupported(node, describe(node))


@register(ast.Name)
def _name(f: Frame, node: ast.Name) -> Var:
    return name(f, node.id, node)


@register(ast.Attribute)
def _attribute(f: Frame, node: ast.Attribute) -> Var:
    module = node.value
    if (
        isinstance(module, ast.Name)
        and f.s.scope.math.get(module.id) == ""
        and module.id not in f.locals
    ):
        f.s.read(module.id, "module:math")
        if node.attr in MATH_CONSTANTS:
            return f.f(MATH_CONSTANTS[node.attr])
        raise unsupported(node, f"math.{node.attr} used as a value")
    raise unsupported(node, f"the attribute {ast.unparse(node)}")


# -- operators -------------------------------------------------------------------------


def binop(f: Frame, op: ast.operator, a: Var, c: Var, node: ast.AST) -> Var:
    operator = OPERATORS.get(type(op))
    if operator is None:
        raise unsupported(node, f"the operator {type(op).__name__}")
    return binary(f, operator.name, a, c)


@register(ast.BinOp)
def _binop(f: Frame, node: ast.BinOp) -> Var:
    return binop(f, node.op, expr(f, node.left), expr(f, node.right), node)


@register(ast.UnaryOp)
def _unary(f: Frame, node: ast.UnaryOp) -> Var:
    if (
        isinstance(node.op, ast.USub)
        and isinstance(node.operand, ast.Constant)
        and type(node.operand.value) is int
        and node.operand.value == -I64_MIN
    ):
        return f.i(I64_MIN)  # -9223372036854775808: its digits alone are not int64
    operand = expr(f, node.operand)
    if isinstance(node.op, ast.Not):
        return f.b.not_(truthy(f, operand))
    if isinstance(node.op, ast.UAdd):
        return as_int(f, operand)
    if isinstance(node.op, ast.USub):
        if operand.type == "float":
            if operand.const is not None:  # ``-1.0``: a constant, as CPython folds it
                return f.f(-float(operand.const))
            return f.apply("float.neg", "float", operand)
        operand = as_int(f, operand)
        if operand.const is not None and operand.const != I64_MIN:
            return f.i(-int(operand.const))
        return f.apply("int.neg", "int", operand)
    raise unsupported(node, "the operator ~")


@register(ast.IfExp)
def _conditional(f: Frame, node: ast.IfExp) -> Var:
    b = f.b
    cond = truthy(f, expr(f, node.test))
    with f.predicate(b.and_(f.pred, cond)):
        yes = expr(f, node.body)
    with f.predicate(b.and_(f.pred, b.not_(cond))):
        no = expr(f, node.orelse)
    if yes.type != no.type:
        raise type_error(node, f"the two arms of the conditional are {yes.type} and {no.type}")
    return b.select(cond, yes, no)


@register(ast.BoolOp)
def _boolean(f: Frame, node: ast.BoolOp) -> Var:
    b = f.b
    is_and = isinstance(node.op, ast.And)
    result = expr(f, node.values[0])
    for operand in node.values[1:]:
        if result.type != "bool":
            break
        guard = result if is_and else b.not_(result)
        with f.predicate(b.and_(f.pred, guard)):
            value = expr(f, operand)
        if value.type != "bool":
            result = value
            break
        result = b.and_(result, value) if is_and else b.or_(result, value)
    if result.type != "bool":
        word = "and" if is_and else "or"
        raise type_error(
            node,
            f"'{word}' on a {result.type}: Python returns one of the operands",
            "compare explicitly (x != 0) so both operands are bool",
        )
    return result


@register(ast.Compare)
def _compare(f: Frame, node: ast.Compare) -> Var:
    b = f.b
    left = expr(f, node.left)
    result: Var | None = None
    for op, right_node in zip(node.ops, node.comparators, strict=True):
        comparison = COMPARISONS.get(type(op))
        if comparison is None:
            raise unsupported(node, f"the comparison {type(op).__name__}")
        direction = comparison.name
        if result is None:
            right = expr(f, right_node)
        else:
            with f.predicate(b.and_(f.pred, result)):
                right = expr(f, right_node)
        if direction not in ("EQ", "NE") and "bool" in (left.type, right.type):
            left, right = as_int(f, left), as_int(f, right)
        value = compare(f, direction, left, right)
        result = value if result is None else b.and_(result, value)
        left = right
    assert result is not None
    return result
