"""Calls to IR: builtins, ``math``, and other ``@xla.jit`` functions inlined.

A callee's body is lowered in place, in a frame of its own that starts under
the caller's predicate and with the caller's fallback flag; what it returns
is the call's value. Recursion is refused. Which ``math`` functions are
compiled is ``MATH``: those whose XLA result matched CPython's to the last
bit (docs/plugin-xla.md says how that was checked); ``MATH_INEXACT`` are
refused with the reason.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from ppy_plugin_xla.errors import type_error, unsupported
from ppy_plugin_xla.front import statements
from ppy_plugin_xla.front.arith import as_float, as_int, compare, to_int, truthy
from ppy_plugin_xla.front.expressions import expr, register
from ppy_plugin_xla.front.frame import Frame, annotation
from ppy_plugin_xla.ir import Var

__all__ = ["MATH", "MATH_INEXACT", "MathFunction", "parameters", "run"]


@dataclass(frozen=True)
class MathFunction:
    """A compiled ``math`` function: how many arguments, its result type, its op."""

    arity: int
    result: str
    op: str


MATH: dict[str, MathFunction] = {
    "sqrt": MathFunction(1, "float", "math.sqrt"),
    "tan": MathFunction(1, "float", "math.tan"),
    "fabs": MathFunction(1, "float", "float.abs"),
    "cbrt": MathFunction(1, "float", "math.cbrt"),
    "isnan": MathFunction(1, "bool", "math.isnan"),
    "isinf": MathFunction(1, "bool", "math.isinf"),
    "isfinite": MathFunction(1, "bool", "math.isfinite"),
    "floor": MathFunction(1, "int", "math.floor"),
    "ceil": MathFunction(1, "int", "math.ceil"),
    "trunc": MathFunction(1, "int", "math.trunc"),
    "atan2": MathFunction(2, "float", "math.atan2"),
    "pow": MathFunction(2, "float", "float.pow"),
    "copysign": MathFunction(2, "float", "math.copysign"),
    "fmod": MathFunction(2, "float", "math.fmod"),
}
#: Functions of math that XLA's CPU backend does not compute to the last bit
#: on every supported jaxlib: ``log``, ``sin`` and ``cos`` were exact through
#: jaxlib 0.12.0 and are 1 ulp off on some inputs from 0.12.1, and an
#: artifact may run on a newer jaxlib than it was built with.
MATH_INEXACT = frozenset(
    {
        "sin",
        "cos",
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


@register(ast.Call)
def _call(f: Frame, node: ast.Call) -> Var:
    func = node.func
    if node.keywords or any(isinstance(a, ast.Starred) for a in node.args):
        raise unsupported(node, f"keyword or starred arguments in {ast.unparse(node)}")
    s = f.s
    scope = s.scope
    if isinstance(func, ast.Name) and func.id not in f.locals:
        if func.id in scope.functions:
            s.read(func.id, "function:" + func.id)
            return _inline(f, scope.functions[func.id], node)
        if func.id in scope.builtins:
            s.read(func.id, "builtin:" + func.id)
            return _builtin(f, func.id, node)
        if scope.math.get(func.id):
            s.read(func.id, "math:" + scope.math[func.id])
            return _math(f, scope.math[func.id], node)
    if (
        isinstance(func, ast.Attribute)
        and isinstance(func.value, ast.Name)
        and scope.math.get(func.value.id) == ""
        and func.value.id not in f.locals
    ):
        s.read(func.value.id, "module:math")
        return _math(f, func.attr, node)
    raise unsupported(node, f"the call {ast.unparse(node)}")


def _builtin(f: Frame, name: str, node: ast.Call) -> Var:
    b = f.b
    args = [expr(f, a) for a in node.args]
    if name == "range":
        raise unsupported(node, "range() outside a for loop")
    if name in ("float", "int", "bool") and not args:
        return f.zero(name)
    if name in ("abs", "float", "int", "bool") and len(args) != 1:
        raise unsupported(node, f"{name}() with {len(args)} arguments")
    if name == "abs":
        x = args[0]
        if x.type == "float":
            return f.apply("float.abs", "float", x)
        return f.apply("int.abs", "int", as_int(f, x))
    if name == "float":
        return as_float(f, args[0])
    if name == "int":
        return to_int(f, args[0], "float.to_int")
    if name == "bool":
        return truthy(f, args[0])
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
            better = compare(f, direction, as_int(f, x), as_int(f, result))
        else:
            better = compare(f, direction, x, result)
        result = b.select(better, x, result)
    return result


def _math(f: Frame, name: str, node: ast.Call) -> Var:
    if name in MATH_INEXACT:
        raise unsupported(
            node,
            f"math.{name}: XLA's CPU result differs from libm's in the last bit",
            "the function stays Python; see docs/plugin-xla.md for the exact list",
        )
    function = MATH.get(name)
    if function is None:
        raise unsupported(node, f"math.{name}")
    args = [expr(f, a) for a in node.args]
    if len(args) != function.arity:
        raise unsupported(node, f"math.{name}() with {len(args)} arguments")
    if function.result == "int":  # floor, ceil, trunc: an int is itself
        return to_int(f, args[0], function.op)
    return f.apply(function.op, function.result, *[as_float(f, a) for a in args])


# -- compiled functions ----------------------------------------------------------------


def parameters(node: ast.FunctionDef) -> list[tuple[str, str]]:
    """The names and types of a compiled function's parameters."""
    a = node.args
    if a.vararg or a.kwarg or a.kwonlyargs:
        raise unsupported(node, f"{node.name}() has *args, **kwargs or keyword-only parameters")
    params = [*a.posonlyargs, *a.args]
    return [(p.arg, annotation(p.annotation, p, f"parameter {p.arg}")) for p in params]


def run(f: Frame) -> tuple[Var, Var]:
    """Lower the frame's whole body: its return value and fallback flag."""
    statements.block(f, f.node.body)
    f.pred = f.statement_predicate()
    f.flag(f.b.true())  # fell off the end: CPython returns None
    return f.vars["$retval"], f.vars["$err"]


def _inline(f: Frame, callee: ast.FunctionDef, node: ast.Call) -> Var:
    s = f.s
    if callee.name in s.stack:
        raise unsupported(node, f"recursion ({' -> '.join([*s.stack, callee.name])})")
    params = parameters(callee)
    args = [expr(f, a) for a in node.args]
    if len(args) != len(params):
        raise unsupported(
            node, f"{callee.name}() called with {len(args)} of {len(params)} arguments"
        )
    bound: dict[str, Var] = {}
    for (pname, ptype), value in zip(params, args, strict=True):
        if value.type != ptype:
            raise type_error(
                node,
                f"{callee.name}() takes {pname}: {ptype} but is given {value.type}; "
                f"Python would run its body with the {value.type}",
                f"pass a {ptype}, e.g. {ptype}(...)",
            )
        bound[pname] = value
    s.stack.append(callee.name)
    try:
        result, err = run(Frame(s, callee, bound, f.pred, f.vars["$err"]))
    finally:
        s.stack.pop()
    f.vars["$err"] = err
    return result
