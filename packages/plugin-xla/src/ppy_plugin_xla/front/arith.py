"""CPython's operators on typed values, as the ops that compute them.

This is where Python's typing of arithmetic is decided: ``bool`` takes part
as ``int`` (``True + True == 2``), ``int`` mixes into ``float``, ``int / int``
is a float, an int compared with a float is compared exactly. What each op
computes, bit for bit, is its lowering rule's business. The identities
``x + 0``, ``x - 0``, ``x * 0``, ``x * 1``, ``x ** 0`` and ``x ** 1`` on ints
are folded here, so a constant stays a constant for what follows
(``-(2 ** 1)`` is the literal ``-2``, ``range(0, n, 1 * 1)`` counts up).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from ppy_plugin_xla.front.frame import Frame
from ppy_plugin_xla.ir import Var

__all__ = [
    "COMPARISONS",
    "OPERATORS",
    "Operator",
    "as_float",
    "as_int",
    "binary",
    "compare",
    "to_int",
    "truthy",
]


@dataclass(frozen=True)
class Operator:
    """A binary operator or a comparison: its symbol, and its name in the IR:
    an operator's op is ``int.<name>`` or ``float.<name>``, a comparison's
    name is its direction (``LT``)."""

    symbol: str
    name: str


#: The binary operators compiled.
OPERATORS: dict[type[ast.operator], Operator] = {
    ast.Add: Operator("+", "add"),
    ast.Sub: Operator("-", "sub"),
    ast.Mult: Operator("*", "mul"),
    ast.Div: Operator("/", "div"),
    ast.FloorDiv: Operator("//", "floordiv"),
    ast.Mod: Operator("%", "mod"),
    ast.Pow: Operator("**", "pow"),
}
#: The comparisons compiled.
COMPARISONS: dict[type[ast.cmpop], Operator] = {
    ast.Lt: Operator("<", "LT"),
    ast.LtE: Operator("<=", "LE"),
    ast.Gt: Operator(">", "GT"),
    ast.GtE: Operator(">=", "GE"),
    ast.Eq: Operator("==", "EQ"),
    ast.NotEq: Operator("!=", "NE"),
}
_SWAPPED = {"LT": "GT", "GT": "LT", "LE": "GE", "GE": "LE"}


def as_int(f: Frame, a: Var) -> Var:
    """bool takes part in arithmetic as int (True + True == 2)."""
    return f.b.convert(a, "int") if a.type == "bool" else a


def as_float(f: Frame, a: Var) -> Var:
    if a.type == "float":
        return a
    return f.b.convert(as_int(f, a), "float")


def truthy(f: Frame, a: Var) -> Var:
    if a.type == "bool":
        return a
    zero = f.f(0.0) if a.type == "float" else f.i(0)
    return f.b.compare("NE", a, zero)


def to_int(f: Frame, x: Var, op: str) -> Var:
    """``int(x)`` (``op`` ``float.to_int``) or ``math.floor``/``ceil``/``trunc``."""
    return f.apply(op, "int", x) if x.type == "float" else as_int(f, x)


def binary(f: Frame, name: str, a: Var, c: Var) -> Var:
    """``a <op> c`` for the operator of ``name`` (``Operator.name``)."""
    if a.type != "float" and c.type != "float":
        x, y = as_int(f, a), as_int(f, c)
        folded = _identity(f, name, x, y)
        if folded is not None:
            return folded
        return f.apply(f"int.{name}", "float" if name == "div" else "int", x, y)
    return f.apply(f"float.{name}", "float", as_float(f, a), as_float(f, c))


def _identity(f: Frame, name: str, a: Var, c: Var) -> Var | None:
    """The value of ``a <op> c`` on ints where it is an operand or a constant."""
    if name in ("add", "mul") and a.const is None and c.const is not None:
        a, c = c, a  # the constant first, as the rules take it
    if name == "add" and a.const == 0:
        return c
    if name == "sub" and c.const == 0:
        return a
    if name == "mul" and a.const in (0, 1):
        return a if a.const == 0 else c
    if name == "pow" and c.const is not None and 0 <= int(c.const) <= 64:
        n = int(c.const)
        if n <= 1 or a.const in (0, 1):
            one = f.i(1)  # as the rule's product starts, then folds away
            return one if n == 0 else a
    return None


def compare(f: Frame, direction: str, a: Var, c: Var) -> Var:
    """Python's comparison of two numbers; int against float is exact."""
    b = f.b
    if a.type == "bool" and c.type == "bool" and direction in ("EQ", "NE"):
        return b.compare(direction, a, c)
    if a.type == "float" and c.type == "float":
        return b.compare(direction, a, c)
    if a.type != "float" and c.type != "float":
        return b.compare(direction, as_int(f, a), as_int(f, c))
    if a.type == "float":
        return f.apply(
            "compare.int_float", "bool", as_int(f, c), a, param=_SWAPPED.get(direction, direction)
        )
    return f.apply("compare.int_float", "bool", as_int(f, a), c, param=direction)
