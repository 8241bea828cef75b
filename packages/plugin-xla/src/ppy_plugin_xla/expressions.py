"""The expression half of the lowering: an expression to one StableHLO value.

``lower.py`` decides which statements run (predicates, loops, returns); this
module computes the values they use: names and constants, operators with
CPython's int and float semantics, comparisons, ``and``/``or``, conditional
expressions, and calls of builtins, of ``math`` and of compiled functions.
It is a module of its own because that half is as large as the control flow
and needs none of it: ``Expressions`` is the base class of ``lower._Function``
and reaches back only through ``inline``, to lower a callee's body.

Each ``visit_<Node>`` lowers one kind of ``ast.expr``; ``expr`` dispatches to
it as ``ast.NodeVisitor.visit`` does, and ``generic`` refuses every other
kind. Every value is computed under the current predicate ``pred``: an error
CPython would raise only sets the fallback flag where the predicate holds.
"""

from __future__ import annotations

import ast
import math
import struct
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import NoReturn

from ppy_plugin_xla.errors import describe, type_error, unsupported
from ppy_plugin_xla.hlo import Builder, Value
from ppy_plugin_xla.numeric import I64_MAX, I64_MIN, MIN_NORMAL, Numeric
from ppy_plugin_xla.scope import ModuleScope, value_of

__all__ = [
    "MATH_CONSTANTS",
    "MATH_FUNCTIONS",
    "MATH_INEXACT",
    "Expressions",
    "Shared",
    "Unknown",
]

MATH_CONSTANTS = {"pi": math.pi, "e": math.e, "tau": math.tau, "inf": math.inf, "nan": math.nan}
#: math functions compiled, each to operations whose results match CPython's
#: bit for bit (see docs/plugin-xla.md for how that was checked).
MATH_FUNCTIONS = frozenset(
    {
        "sqrt",
        "sin",
        "cos",
        "tan",
        "atan2",
        "pow",
        "fabs",
        "floor",
        "ceil",
        "trunc",
        "copysign",
        "fmod",
        "isnan",
        "isinf",
        "isfinite",
        "cbrt",
    }
)
#: Functions of math that XLA's CPU backend does not compute to the last bit
#: on every supported jaxlib: ``log`` was exact through jaxlib 0.12.0 and is
#: 1 ulp off from 0.12.1, and an artifact may run on a newer jaxlib than it
#: was built with.
MATH_INEXACT = frozenset(
    {
        "log",
        "exp",
        "exp2",
        "expm1",
        "log1p",
        "log2",
        "log10",
        "tanh",
        "sinh",
        "cosh",
        "atan",
        "asin",
        "acos",
        "asinh",
        "acosh",
        "atanh",
        "hypot",
        "erf",
        "erfc",
        "gamma",
        "lgamma",
    }
)


_BINOPS = {
    ast.Add: "+",
    ast.Sub: "-",
    ast.Mult: "*",
    ast.Div: "/",
    ast.FloorDiv: "//",
    ast.Mod: "%",
    ast.Pow: "**",
}
_COMPARE = {ast.Lt: "LT", ast.LtE: "LE", ast.Gt: "GT", ast.GtE: "GE", ast.Eq: "EQ", ast.NotEq: "NE"}


class Unknown(Exception):
    """A name not yet typed while a loop's variables are being discovered."""


@dataclass
class Shared:
    builder: Builder
    scope: ModuleScope
    stack: list[str]
    discovery: bool = False
    #: The module-level names the bodies read when they run, as
    #: ``metadata.reads`` writes them (``ppy.kinds.xla_scalar.READ_KINDS``).
    reads: dict[str, str] = field(default_factory=dict)
    #: How deep the lowering is in a constant's own expression, which the
    #: module computes once, at import: what it reads is not read by a call.
    in_constant: int = 0

    def read(self, name: str, what: str) -> None:
        if not self.in_constant:
            self.reads[name] = what


class Expressions(ABC):
    """Lowers expressions of one function body; ``lower._Function`` adds the statements."""

    s: Shared
    b: Builder
    num: Numeric
    #: The function's locals (and ``$``-prefixed flags) as values at this point.
    vars: dict[str, Value]
    #: The names the function assigns or takes as parameters.
    locals: set[str]
    #: "This code executes": where an error is recorded in the fallback flag.
    pred: Value

    # -- flags and predicates ------------------------------------------------------

    def flag(self, cond: Value) -> None:
        b = self.b
        self.vars["$err"] = b.or_(self.vars["$err"], b.and_(self.pred, cond))

    @contextmanager
    def predicate(self, p: Value) -> Iterator[None]:
        saved = self.pred
        self.pred = p
        try:
            yield
        finally:
            self.pred = saved

    def _zero(self, kind: str) -> Value:
        return self.b.const(kind, {"float": 0.0, "int": 0, "bool": False}[kind])

    # -- dispatch ------------------------------------------------------------------

    def expr(self, node: ast.expr) -> Value:
        """Lower one expression through its ``visit_<Node>`` method; any other is refused."""
        visit: Callable[[ast.expr], Value] = getattr(
            self, f"visit_{type(node).__name__}", self.generic
        )
        return visit(node)

    def generic(self, node: ast.AST) -> NoReturn:
        """A node with no ``visit_<Node>`` method is outside the compiled language."""
        raise unsupported(node, describe(node))

    # -- names and literals --------------------------------------------------------

    def name(self, name: str, node: ast.AST) -> Value:
        if name in self.locals:
            value = self.vars.get(name)
            if value is None:
                if self.s.discovery:
                    raise Unknown(name)
                raise unsupported(node, f"{name} is used before it is assigned")
            defined = self.vars.get("$def:" + name)
            if defined is not None:
                self.flag(self.b.not_(defined))  # UnboundLocalError
            return value
        scope = self.s.scope
        if name in scope.constants:
            return self.constant(name, node)
        if name in scope.math and scope.math[name] in MATH_CONSTANTS:
            self.s.read(name, "math:" + scope.math[name])
            return self.num.f(MATH_CONSTANTS[scope.math[name]])
        raise unsupported(
            node,
            f"the name {name!r} (not a local, a module-level constant or a compiled function)",
            "pass it as a parameter, or make it a module-level constant bound once",
        )

    def constant(self, name: str, node: ast.AST) -> Value:
        if name in self.s.stack:
            raise unsupported(node, f"the constant {name} refers to itself")
        if not self.s.in_constant:
            value = value_of(self.s.scope, name)
            if value is None:
                raise unsupported(
                    node,
                    f"the constant {name}, whose value the build does not compute",
                    "pass it as a parameter",
                )
            self.s.read(name, _written(value))
        self.s.stack.append(name)
        self.s.in_constant += 1
        saved = self.locals
        self.locals = set()
        try:
            return self.expr(self.s.scope.constants[name])
        finally:
            self.locals = saved
            self.s.in_constant -= 1
            self.s.stack.pop()

    def visit_Constant(self, node: ast.Constant) -> Value:
        value = node.value
        if isinstance(value, bool):
            return self.b.const("bool", value)
        if isinstance(value, int):
            if not I64_MIN <= value <= I64_MAX:
                raise unsupported(node, f"the integer literal {value} (outside int64)")
            return self.num.i(value)
        if isinstance(value, float):
            if value != 0 and abs(value) < MIN_NORMAL:
                raise unsupported(node, f"the subnormal literal {value!r}")
            return self.num.f(value)
        raise unsupported(node, describe(node))

    def visit_Name(self, node: ast.Name) -> Value:
        return self.name(node.id, node)

    def visit_Attribute(self, node: ast.Attribute) -> Value:
        module = node.value
        if (
            isinstance(module, ast.Name)
            and self.s.scope.math.get(module.id) == ""
            and module.id not in self.locals
        ):
            self.s.read(module.id, "module:math")
            if node.attr in MATH_CONSTANTS:
                return self.num.f(MATH_CONSTANTS[node.attr])
            raise unsupported(node, f"math.{node.attr} used as a value")
        raise unsupported(node, f"the attribute {ast.unparse(node)}")

    # -- operators -----------------------------------------------------------------

    def visit_BinOp(self, node: ast.BinOp) -> Value:
        return self.binop(node.op, self.expr(node.left), self.expr(node.right), node)

    def visit_UnaryOp(self, node: ast.UnaryOp) -> Value:
        b, num = self.b, self.num
        if (
            isinstance(node.op, ast.USub)
            and isinstance(node.operand, ast.Constant)
            and type(node.operand.value) is int
            and node.operand.value == -I64_MIN
        ):
            return num.i(I64_MIN)  # -9223372036854775808: its digits alone are not int64
        operand = self.expr(node.operand)
        if isinstance(node.op, ast.Not):
            return b.not_(num.truthy(operand))
        if isinstance(node.op, ast.UAdd):
            return num.as_int(operand)
        if isinstance(node.op, ast.USub):
            if operand.type == "float":
                if operand.const is not None:  # ``-1.0``: a constant, as CPython folds it
                    return num.f(-float(operand.const))
                return b.negate(operand)
            operand = num.as_int(operand)
            if operand.const is not None and operand.const != I64_MIN:
                return num.i(-int(operand.const))
            return num.ineg(operand)
        raise unsupported(node, "the operator ~")

    def visit_IfExp(self, node: ast.IfExp) -> Value:
        b = self.b
        cond = self.num.truthy(self.expr(node.test))
        with self.predicate(b.and_(self.pred, cond)):
            yes = self.expr(node.body)
        with self.predicate(b.and_(self.pred, b.not_(cond))):
            no = self.expr(node.orelse)
        if yes.type != no.type:
            raise type_error(node, f"the two arms of the conditional are {yes.type} and {no.type}")
        return b.select(cond, yes, no)

    def binop(self, op: ast.operator, a: Value, c: Value, node: ast.AST) -> Value:
        num = self.num
        symbol = _BINOPS.get(type(op))
        if symbol is None:
            raise unsupported(node, f"the operator {type(op).__name__}")
        if a.type != "float" and c.type != "float":
            x, y = num.as_int(a), num.as_int(c)
            integer = {
                "+": num.iadd,
                "-": num.isub,
                "*": num.imul,
                "/": num.itruediv,
                "//": num.ifloordiv,
                "%": num.imod,
                "**": num.ipow,
            }
            return integer[symbol](x, y)
        x, y = num.as_float(a), num.as_float(c)
        floating = {
            "+": num.fadd,
            "-": num.fsub,
            "*": num.fmul,
            "/": num.fdiv,
            "//": num.ffloordiv,
            "%": num.fmod,
            "**": num.fpow,
        }
        return floating[symbol](x, y)

    def visit_BoolOp(self, node: ast.BoolOp) -> Value:
        b = self.b
        is_and = isinstance(node.op, ast.And)
        result = self.expr(node.values[0])
        for operand in node.values[1:]:
            if result.type != "bool":
                break
            guard = result if is_and else b.not_(result)
            with self.predicate(b.and_(self.pred, guard)):
                value = self.expr(operand)
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

    def visit_Compare(self, node: ast.Compare) -> Value:
        b = self.b
        left = self.expr(node.left)
        result: Value | None = None
        for op, right_node in zip(node.ops, node.comparators, strict=True):
            direction = _COMPARE.get(type(op))
            if direction is None:
                raise unsupported(node, f"the comparison {type(op).__name__}")
            if result is None:
                right = self.expr(right_node)
            else:
                with self.predicate(b.and_(self.pred, result)):
                    right = self.expr(right_node)
            if direction not in ("EQ", "NE") and "bool" in (left.type, right.type):
                left, right = self.num.as_int(left), self.num.as_int(right)
            value = self.num.compare(direction, left, right)
            result = value if result is None else b.and_(result, value)
            left = right
        assert result is not None
        return result

    # -- calls ---------------------------------------------------------------------

    def visit_Call(self, node: ast.Call) -> Value:
        func = node.func
        if node.keywords or any(isinstance(a, ast.Starred) for a in node.args):
            raise unsupported(node, f"keyword or starred arguments in {ast.unparse(node)}")
        scope = self.s.scope
        if isinstance(func, ast.Name) and func.id not in self.locals:
            if func.id in scope.functions:
                self.s.read(func.id, "function:" + func.id)
                return self.inline(scope.functions[func.id], node)
            if func.id in scope.builtins:
                self.s.read(func.id, "builtin:" + func.id)
                return self.builtin(func.id, node)
            if scope.math.get(func.id):
                self.s.read(func.id, "math:" + scope.math[func.id])
                return self.math(scope.math[func.id], node)
        if (
            isinstance(func, ast.Attribute)
            and isinstance(func.value, ast.Name)
            and scope.math.get(func.value.id) == ""
            and func.value.id not in self.locals
        ):
            self.s.read(func.value.id, "module:math")
            return self.math(func.attr, node)
        raise unsupported(node, f"the call {ast.unparse(node)}")

    def builtin(self, name: str, node: ast.Call) -> Value:
        b, num = self.b, self.num
        args = [self.expr(a) for a in node.args]
        if name == "range":
            raise unsupported(node, "range() outside a for loop")
        if name in ("float", "int", "bool") and not args:
            return self._zero(name)
        if name in ("abs", "float", "int", "bool") and len(args) != 1:
            raise unsupported(node, f"{name}() with {len(args)} arguments")
        if name == "abs":
            x = args[0]
            return b.unary("abs", x) if x.type == "float" else num.iabs(num.as_int(x))
        if name == "float":
            return num.as_float(args[0])
        if name == "int":
            return num.float_to_int(args[0])
        if name == "bool":
            return num.truthy(args[0])
        if len(args) < 2:
            raise unsupported(node, f"{name}() of an iterable")
        kinds = {a.type for a in args}
        if len(kinds) != 1:
            raise type_error(
                node,
                f"{name}() of {' and '.join(sorted(kinds))}: Python returns one of the "
                "arguments, so the result's type depends on the values",
                "convert the arguments to one type",
            )
        direction = "LT" if name == "min" else "GT"
        result = args[0]
        for x in args[1:]:
            if x.type == "bool":
                better = num.compare(direction, num.as_int(x), num.as_int(result))
            else:
                better = num.compare(direction, x, result)
            result = b.select(better, x, result)
        return result

    def math(self, name: str, node: ast.Call) -> Value:
        b, num = self.b, self.num
        if name in MATH_INEXACT:
            raise unsupported(
                node,
                f"math.{name}: XLA's CPU result differs from libm's in the last bit",
                "the function stays Python; see docs/plugin-xla.md for the exact list",
            )
        if name not in MATH_FUNCTIONS:
            raise unsupported(node, f"math.{name}")
        args = [self.expr(a) for a in node.args]
        two = {"atan2", "pow", "copysign", "fmod"}
        arity = 2 if name in two else 1
        if len(args) != arity:
            raise unsupported(node, f"math.{name}() with {len(args)} arguments")
        if name in ("floor", "ceil", "trunc"):
            x = args[0]
            return num.float_to_int(x, {"floor": "floor", "ceil": "ceil", "trunc": None}[name])
        xs = [num.as_float(a) for a in args]
        x = xs[0]
        if name == "isnan":
            return num.isnan(x)
        if name == "isinf":
            return num.isinf(x)
        if name == "isfinite":
            return num.isfinite(x)
        if name == "fabs":
            return b.unary("abs", x)
        if name == "copysign":
            # The sign of a NaN is not kept by XLA's arithmetic (LLVM may turn
            # -x + y into y - x): CPython answers that one.
            self.flag(num.isnan(xs[1]))
            return num.copysign(x, xs[1])
        if name == "sqrt":
            self.flag(num.cmp("LT", x, num.f(0.0)))
            return b.library("sqrt", x)
        if name == "cbrt":
            return b.library("cbrt", x)
        if name in ("sin", "cos", "tan"):
            self.flag(num.isinf(x))
            return b.library({"sin": "sine", "cos": "cosine", "tan": "tan"}[name], x)
        if name == "pow":
            return num.fpow(x, xs[1])
        if name == "fmod":
            y = xs[1]
            r = b.binary("remainder", x, y)
            small = num.cmp("LT", b.unary("abs", y), num.f(2.0**-969))
            self.flag(b.and_(small, b.not_(num.cmp("LT", b.unary("abs", x), b.unary("abs", y)))))
            r = b.select(b.and_(num.isinf(y), num.isfinite(x)), x, r)
            real = b.and_(b.not_(num.isnan(x)), b.not_(num.isnan(y)))
            self.flag(b.and_(num.isnan(r), real))  # ValueError
            return r
        if name == "atan2":
            return self.atan2(x, xs[1])
        raise AssertionError(name)

    def atan2(self, y: Value, x: Value) -> Value:
        """CPython's m_atan2: the special values by hand, the rest by the library."""
        b, num = self.b, self.num
        zero, one = num.f(0.0), num.f(1.0)
        pi = num.f(math.pi)
        positive_x = num.cmp("EQ", num.copysign(one, x), one)
        r = b.library("atan2", y, x)
        general = b.not_(
            b.or_(b.or_(num.isnan(x), num.isnan(y)), b.or_(num.isinf(x), num.isinf(y)))
        )
        general = b.and_(general, num.cmp("NE", y, zero))
        self.flag(b.and_(general, num.tiny(r)))
        at_zero = b.select(positive_x, num.copysign(zero, y), num.copysign(pi, y))
        r = b.select(b.or_(num.isinf(x), num.cmp("EQ", y, zero)), at_zero, r)
        corner = b.select(
            positive_x,
            num.copysign(num.f(0.25 * math.pi), y),
            num.copysign(num.f(0.75 * math.pi), y),
        )
        r = b.select(
            num.isinf(y), b.select(num.isinf(x), corner, num.copysign(num.f(0.5 * math.pi), y)), r
        )
        return b.select(b.or_(num.isnan(x), num.isnan(y)), num.f(math.nan), r)

    @abstractmethod
    def inline(self, callee: ast.FunctionDef, node: ast.Call) -> Value:
        """A call of the compiled function ``callee``: its body lowered in place."""


def _written(value: int | float) -> str:
    """A constant's value as ``metadata.reads`` writes it: exact, a float by its bits."""
    if isinstance(value, bool):
        return f"bool:{value}"
    if isinstance(value, int):
        return f"int:{value}"
    return "float:" + struct.pack(">d", value).hex()
