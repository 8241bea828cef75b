"""From a function's AST to one StableHLO module, with CPython's semantics.

Control flow is lowered by predication: every statement runs under a
predicate (an i1 value: "this statement executes"), an assignment becomes a
``select`` between the new and the old value, and ``return``, ``break`` and
``continue`` only set flags that make the predicates of later statements
false. Loops become ``stablehlo.while`` carrying the variables their bodies
assign. Nothing is executed speculatively in a way that could matter: a
loop's first test runs under its predicate, and every error an expression
could raise is recorded in the fallback flag only where its predicate holds.

The flag is the module's second result. When it is set, CPython would raise,
or give a value outside what the module computes (an int beyond int64, a
subnormal float, a result of another type), and the runtime calls the
Python body instead.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from ppy_plugin_xla.errors import CompileError
from ppy_plugin_xla.hlo import Builder, Value
from ppy_plugin_xla.numeric import I64_MAX, I64_MIN, MIN_NORMAL, Numeric
from ppy_plugin_xla.scope import ModuleScope

__all__ = ["CompiledFunction", "compile_function", "MATH_CONSTANTS", "MATH_FUNCTIONS"]

TYPES = ("float", "int", "bool")
UNSUPPORTED = "xla-unsupported"
TYPE_ERROR = "xla-type"

MATH_CONSTANTS = {"pi": math.pi, "e": math.e, "tau": math.tau, "inf": math.inf, "nan": math.nan}
#: math functions compiled, each to operations whose results match CPython's
#: bit for bit (see docs/plugin-xla.md for how that was checked).
MATH_FUNCTIONS = frozenset(
    {
        "sqrt",
        "sin",
        "cos",
        "tan",
        "log",
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
#: Functions of math that XLA's CPU backend does not compute to the last bit.
MATH_INEXACT = frozenset(
    {
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

_NODE_WORDS = {
    ast.List: "a list",
    ast.Tuple: "a tuple",
    ast.Dict: "a dict",
    ast.Set: "a set",
    ast.ListComp: "a list comprehension",
    ast.GeneratorExp: "a generator",
    ast.DictComp: "a dict comprehension",
    ast.SetComp: "a set comprehension",
    ast.Lambda: "a lambda",
    ast.JoinedStr: "an f-string",
    ast.Subscript: "subscripting",
    ast.Starred: "a starred expression",
    ast.NamedExpr: "an assignment expression",
    ast.Await: "await",
    ast.Yield: "yield",
    ast.YieldFrom: "yield from",
    ast.FunctionDef: "a nested function",
    ast.ClassDef: "a class",
    ast.With: "a with block",
    ast.Try: "a try block",
    ast.Raise: "raise",
    ast.Assert: "assert",
    ast.Delete: "del",
    ast.Global: "a global statement",
    ast.Nonlocal: "a nonlocal statement",
    ast.Import: "an import",
    ast.ImportFrom: "an import",
    ast.Match: "a match statement",
    ast.AsyncFunctionDef: "an async function",
    ast.AsyncFor: "async for",
    ast.AsyncWith: "async with",
}
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


@dataclass(frozen=True)
class CompiledFunction:
    qualname: str
    param_names: tuple[str, ...]
    param_types: tuple[str, ...]
    result_type: str
    #: The StableHLO module: @main(params...) -> (result, fallback flag).
    text: str


class _Unknown(Exception):
    """A name not yet typed while a loop's variables are being discovered."""


def _unsupported(node: ast.AST, what: str, remedy: str | None = None) -> CompileError:
    return CompileError(UNSUPPORTED, what, getattr(node, "lineno", 0), remedy)


def _type_error(node: ast.AST, what: str, remedy: str | None = None) -> CompileError:
    return CompileError(TYPE_ERROR, what, getattr(node, "lineno", 0), remedy)


def _describe(node: ast.AST) -> str:
    for kind, word in _NODE_WORDS.items():
        if isinstance(node, kind):
            return word
    if isinstance(node, ast.Constant):
        return f"a {type(node.value).__name__} literal"
    return f"{type(node).__name__}"


def _annotation(node: ast.expr | None, where: ast.AST, what: str) -> str:
    if isinstance(node, ast.Name) and node.id in TYPES:
        return node.id
    if node is None:
        raise _type_error(where, f"{what} has no annotation", "annotate it float, int or bool")
    raise _type_error(
        where, f"{what} is annotated {ast.unparse(node)}", "annotate it float, int or bool"
    )


def _assigned(statements: list[ast.stmt]) -> set[str]:
    names: set[str] = set()
    for stmt in statements:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
    return names


def _has(statements: list[ast.stmt], kind: type) -> bool:
    return any(isinstance(n, kind) for s in statements for n in ast.walk(s))


@dataclass
class _Shared:
    builder: Builder
    scope: ModuleScope
    stack: list[str]
    discovery: bool = False


class _Function:
    """The lowering of one function body (the entry, or a callee being inlined)."""

    def __init__(
        self,
        shared: _Shared,
        node: ast.FunctionDef,
        args: dict[str, Value],
        base: Value,
        err: Value,
    ) -> None:
        self.s = shared
        self.b = shared.builder
        self.node = node
        self.num = Numeric(self.b, self.flag)
        self.ret_type = _annotation(node.returns, node, f"the return of {node.name}()")
        self.locals = _assigned(node.body) | set(args)
        self.types: dict[str, str] = {k: v.type for k, v in args.items()}
        self.vars: dict[str, Value] = dict(args)
        self.vars["$err"] = err
        self.vars["$ret"] = self.b.false()
        self.vars["$retval"] = self._zero(self.ret_type)
        self.base = base
        self.pred = base

    # -- flags and predicates ------------------------------------------------------

    def flag(self, cond: Value) -> None:
        b = self.b
        self.vars["$err"] = b.or_(self.vars["$err"], b.and_(self.pred, cond))

    def statement_predicate(self) -> Value:
        b = self.b
        p = b.and_(self.base, b.not_(self.vars["$ret"]))
        for key in ("$brk", "$cont"):
            if key in self.vars:
                p = b.and_(p, b.not_(self.vars[key]))
        return p

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

    # -- statements ----------------------------------------------------------------

    def run(self) -> tuple[Value, Value]:
        body = self.node.body
        self.block(body)
        self.pred = self.statement_predicate()
        self.flag(self.b.true())  # fell off the end: CPython returns None
        return self.vars["$retval"], self.vars["$err"]

    def block(self, statements: list[ast.stmt]) -> None:
        for stmt in statements:
            p = self.statement_predicate()
            if p.const is False:
                return  # after an unconditional return, break or continue
            self.pred = p
            if self.s.discovery:
                try:
                    self.statement(stmt)
                except _Unknown:
                    continue
            else:
                self.statement(stmt)

    def statement(self, stmt: ast.stmt) -> None:
        """Lower one statement through its ``visit_<Node>`` method; any other is refused."""
        visit: Callable[[Any], None] | None = getattr(self, f"visit_{type(stmt).__name__}", None)
        if visit is None:
            raise _unsupported(stmt, _describe(stmt))
        visit(stmt)

    def visit_Assign(self, stmt: ast.Assign) -> None:
        self.assign_targets(stmt.targets, stmt.value, stmt)

    def visit_AnnAssign(self, stmt: ast.AnnAssign) -> None:
        if not isinstance(stmt.target, ast.Name):
            raise _unsupported(stmt, "an annotated assignment to something other than a name")
        declared = _annotation(stmt.annotation, stmt, f"local {stmt.target.id}")
        if stmt.value is None:
            return
        value = self.expr(stmt.value)
        if value.type != declared:
            raise _type_error(
                stmt,
                f"{stmt.target.id} is annotated {declared} but is assigned {value.type}; "
                f"Python keeps the {value.type}",
                f"write a {declared} value, e.g. {declared}(...)",
            )
        self.assign(stmt.target.id, value, stmt)

    def visit_AugAssign(self, stmt: ast.AugAssign) -> None:
        if not isinstance(stmt.target, ast.Name):
            raise _unsupported(stmt, "an augmented assignment to something other than a name")
        current = self.name(stmt.target.id, stmt.target)
        value = self.binop(stmt.op, current, self.expr(stmt.value), stmt)
        self.assign(stmt.target.id, value, stmt)

    def visit_Return(self, stmt: ast.Return) -> None:
        b = self.b
        if stmt.value is None:
            raise _type_error(stmt, "return without a value returns None")
        value = self.expr(stmt.value)
        if value.type != self.ret_type:
            raise _type_error(
                stmt,
                f"returns {value.type} where the annotation says {self.ret_type}; "
                f"Python would return the {value.type}",
                f"return {'an' if self.ret_type == 'int' else 'a'} {self.ret_type}, "
                f"e.g. {self.ret_type}(...)",
            )
        self.vars["$retval"] = b.select(self.pred, value, self.vars["$retval"])
        self.vars["$ret"] = b.or_(self.vars["$ret"], self.pred)

    def visit_If(self, stmt: ast.If) -> None:
        b = self.b
        p = self.pred
        cond = self.num.truthy(self.expr(stmt.test))
        saved = self.base
        self.base = b.and_(p, cond)
        self.block(stmt.body)
        self.base = b.and_(p, b.not_(cond))
        self.block(stmt.orelse)
        self.base = saved

    def visit_While(self, stmt: ast.While) -> None:
        if stmt.orelse:
            raise _unsupported(stmt, "while ... else")
        self.loop(stmt, stmt.body, test=stmt.test)

    def visit_For(self, stmt: ast.For) -> None:
        if stmt.orelse:
            raise _unsupported(stmt, "for ... else")
        self.for_range(stmt)

    def visit_Break(self, stmt: ast.Break) -> None:
        self._leave("$brk", stmt)

    def visit_Continue(self, stmt: ast.Continue) -> None:
        self._leave("$cont", stmt)

    def _leave(self, key: str, stmt: ast.stmt) -> None:
        """``break`` or ``continue``: the loop's flag is set where this runs."""
        if key not in self.vars:
            raise _unsupported(stmt, f"{type(stmt).__name__.lower()} outside a loop")
        self.vars[key] = self.b.or_(self.vars[key], self.pred)

    def visit_Pass(self, stmt: ast.Pass) -> None:
        return

    def visit_Expr(self, stmt: ast.Expr) -> None:
        if isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str):
            return  # a docstring
        raise _unsupported(
            stmt, f"the expression statement {ast.unparse(stmt.value)!r} (a side effect)"
        )

    def assign_targets(self, targets: list[ast.expr], value_node: ast.expr, stmt: ast.stmt) -> None:
        if isinstance(value_node, ast.Tuple) and all(isinstance(t, ast.Tuple) for t in targets):
            # a, b = b, a + b: every value first, then the names left to right
            values = [self.expr(v) for v in value_node.elts]
            for target in targets:
                assert isinstance(target, ast.Tuple)
                if len(target.elts) != len(values) or not all(
                    isinstance(t, ast.Name) for t in target.elts
                ):
                    raise _unsupported(stmt, "unpacking other than names = values of equal count")
                for name, value in zip(target.elts, values, strict=True):
                    assert isinstance(name, ast.Name)
                    self.assign(name.id, value, stmt)
            return
        value = self.expr(value_node)
        for target in targets:
            if not isinstance(target, ast.Name):
                raise _unsupported(stmt, f"assignment to {_describe(target)}")
            self.assign(target.id, value, stmt)

    def assign(self, name: str, value: Value, node: ast.AST) -> None:
        known = self.types.get(name)
        if known is not None and known != value.type:
            raise _type_error(
                node,
                f"{name} changes type from {known} to {value.type}",
                "give each local one type (convert with float(), int() or bool())",
            )
        self.types[name] = value.type
        old = self.vars.get(name)
        p = self.pred
        if old is None:
            self.vars[name] = value
            if p.const is not True:
                self.vars["$def:" + name] = p
            return
        self.vars[name] = self.b.select(p, value, old)
        key = "$def:" + name
        if key in self.vars:
            defined = self.b.or_(self.vars[key], p)
            if defined.const is True:
                del self.vars[key]
            else:
                self.vars[key] = defined

    # -- loops ---------------------------------------------------------------------

    def _discover(self, body: list[ast.stmt], extra: set[str], run: Callable[[], None]) -> None:
        """Lower the body in scratch mode until the types of its new locals settle."""
        b = self.b
        for _ in range(4):
            before = dict(self.types)
            vars_, base, pred = dict(self.vars), self.base, self.pred
            scratch, discovery = b.scratch, self.s.discovery
            b.scratch, self.s.discovery = True, True
            try:
                self._placeholders(body, extra)
                run()
            finally:
                self.vars, self.base, self.pred = vars_, base, pred
                b.scratch, self.s.discovery = scratch, discovery
            if self.types == before:
                return

    def _placeholders(self, body: list[ast.stmt], extra: set[str]) -> list[str]:
        """Give every local the body assigns a value before the loop; the ones not yet
        assigned are marked undefined."""
        carried = []
        for name in sorted((_assigned(body) | extra) & self.locals):
            if name not in self.vars:
                kind = self.types.get(name)
                if kind is None:
                    # Discovery lowered the whole body and never reached an
                    # assignment of it: it is assigned only in dead code (after
                    # a break, under a test that folds to False). Not carried.
                    continue
                self.vars[name] = self._zero(kind)
                self.vars["$def:" + name] = self.b.false()
            carried.append(name)
        return carried

    def loop(
        self,
        stmt: ast.stmt,
        body: list[ast.stmt],
        *,
        test: ast.expr | None = None,
        counter: tuple[str, Value, Value, Value] | None = None,
    ) -> None:
        """A while loop (``test``) or a range loop (``counter`` = target, start, stop, step).

        An iteration starts only while the error, return and break flags are
        clear, so the body lowers with them as constants false. A test that
        cannot raise is evaluated in the loop's condition region; one that can
        is evaluated at the end of the body, under the body's predicate, and
        carried as ``$go``.
        """
        b = self.b
        p = self.pred
        positive = stop = step = None
        if counter is not None:
            _target, _start, stop, step = counter
            positive = self._positive(step)
            pure = True
        else:
            assert test is not None
            pure = self._pure(test)

        def check(index: Value) -> Value:
            if counter is not None:
                assert positive is not None and stop is not None
                return self._in_range(positive, index, stop)
            assert test is not None
            return self.num.truthy(self.expr(test))

        def iteration() -> None:
            self.base = b.true()
            for key in ("$brk", "$cont", "$err", "$ret"):
                self.vars[key] = b.false()
            if counter is not None:
                self.pred = b.true()
                self.assign(counter[0], self.vars["$idx"], stmt)
            self.block(body)
            end = b.and_(b.not_(self.vars["$ret"]), b.not_(self.vars["$brk"]))
            self.pred = end
            if counter is not None:
                assert step is not None and stop is not None
                index = self.vars["$idx"]
                nxt = b.binary("add", index, step)
                both = b.binary("and", b.binary("xor", index, nxt), b.binary("xor", step, nxt))
                wrapped = self.num.cmp("LT", both, self.num.i(0))
                self.vars["$idx"] = b.select(wrapped, stop, nxt)  # past the end: stop
            elif not pure:
                again = check(self.vars["$idx"] if "$idx" in self.vars else b.true())
                self.vars["$go"] = b.and_(b.and_(end, again), b.not_(self.vars["$err"]))

        saved_keys = ("$brk", "$cont", "$idx", "$go")
        outer: dict[str, Value] = {k: self.vars[k] for k in saved_keys if k in self.vars}
        extra: set[str] = set()
        if counter is not None:
            self.vars["$idx"] = counter[1]
            extra.add(counter[0])
            self.types.setdefault(counter[0], "int")
        err_outer, ret_outer = self.vars["$err"], self.vars["$ret"]
        self._discover(body, extra, iteration)
        self.vars["$err"], self.vars["$ret"] = err_outer, ret_outer
        names = self._placeholders(body, extra)
        keys = names + [f"$def:{n}" for n in names if f"$def:{n}" in self.vars]
        keys += ["$err", "$ret", "$retval"] if _has(body, ast.Return) else ["$err"]
        if _has(body, ast.Break):
            self.vars["$brk"] = b.false()
            keys.append("$brk")
        if counter is not None:
            keys.append("$idx")
        if not pure:
            first = self.num.truthy(self.expr(test)) if test is not None else b.true()
            self.vars["$go"] = b.and_(b.and_(p, first), b.not_(self.vars["$err"]))
            keys.insert(0, "$go")
        init = [self.vars[k] for k in keys]
        base = self.base

        def bind(args: list[Value]) -> None:
            for key, value in zip(keys, args, strict=True):
                self.vars[key] = value

        def cond(args: list[Value]) -> Value:
            saved = dict(self.vars)
            bind(args)
            try:
                if not pure:
                    return self.vars["$go"]
                live = b.and_(p, b.not_(self.vars["$err"]))
                for key in ("$ret", "$brk"):
                    if key in keys:
                        live = b.and_(live, b.not_(self.vars[key]))
                self.pred = live
                return b.and_(live, check(self.vars.get("$idx", live)))
            finally:
                self.vars = saved

        def region(args: list[Value]) -> list[Value]:
            bind(args)
            iteration()
            for key in keys:
                if key.startswith("$def:") and key not in self.vars:
                    self.vars[key] = b.true()
            return [self.vars[k] for k in keys]

        results = b.while_(init, cond, region)
        bind(results)
        if "$ret" not in keys:
            self.vars["$ret"] = ret_outer
        for key in ("$go", "$idx", "$brk", "$cont"):
            self.vars.pop(key, None)
        self.vars.update(outer)
        self.base = base
        self.pred = p

    def _pure(self, test: ast.expr) -> bool:
        """Whether evaluating ``test`` can raise the fallback flag (found by lowering
        it in scratch mode)."""
        b = self.b
        saved, scratch, pred = dict(self.vars), b.scratch, self.pred
        b.scratch = True
        marker = Value("%pure", "bool")
        self.vars["$err"] = marker
        self.pred = marker
        try:
            self.expr(test)
            return self.vars["$err"] is marker
        except _Unknown:
            return False
        finally:
            self.vars, b.scratch, self.pred = saved, scratch, pred

    def _positive(self, step: Value) -> Value:
        if step.const is not None:
            return self.b.const("bool", int(step.const) > 0)
        self.flag(self.num.cmp("EQ", step, self.num.i(0)))  # ValueError
        return self.num.cmp("GT", step, self.num.i(0))

    def _in_range(self, positive: Value, index: Value, stop: Value) -> Value:
        up = self.num.cmp("LT", index, stop) if positive.const is not False else None
        down = self.num.cmp("GT", index, stop) if positive.const is not True else None
        if up is None:
            assert down is not None
            return down
        if down is None:
            return up
        return self.b.select(positive, up, down)

    def for_range(self, stmt: ast.For) -> None:
        call = stmt.iter
        if not (
            isinstance(call, ast.Call)
            and isinstance(call.func, ast.Name)
            and call.func.id == "range"
            and "range" in self.s.scope.builtins
            and call.func.id not in self.locals
        ):
            raise _unsupported(stmt, f"a for loop over {ast.unparse(call)} (only range() is)")
        if not isinstance(stmt.target, ast.Name):
            raise _unsupported(stmt, "a for loop target other than a name")
        if call.keywords or not 1 <= len(call.args) <= 3:
            raise _unsupported(stmt, "range() with other than one to three positional arguments")
        args = [self.expr(a) for a in call.args]
        for arg in args:
            if arg.type == "float":
                raise _type_error(stmt, "range() of a float (Python raises TypeError)")
        args = [self.num.as_int(a) for a in args]
        if len(args) == 1:
            start, stop, step = self.num.i(0), args[0], self.num.i(1)
        elif len(args) == 2:
            start, stop, step = args[0], args[1], self.num.i(1)
        else:
            start, stop, step = args
        self.loop(stmt, stmt.body, counter=(stmt.target.id, start, stop, step))

    # -- expressions ---------------------------------------------------------------

    def name(self, name: str, node: ast.AST) -> Value:
        if name in self.locals:
            value = self.vars.get(name)
            if value is None:
                if self.s.discovery:
                    raise _Unknown(name)
                raise _unsupported(node, f"{name} is used before it is assigned")
            defined = self.vars.get("$def:" + name)
            if defined is not None:
                self.flag(self.b.not_(defined))  # UnboundLocalError
            return value
        scope = self.s.scope
        if name in scope.constants:
            return self.constant(name, node)
        if name in scope.math and scope.math[name] in MATH_CONSTANTS:
            return self.num.f(MATH_CONSTANTS[scope.math[name]])
        raise _unsupported(
            node,
            f"the name {name!r} (not a local, a module-level constant or a compiled function)",
            "pass it as a parameter, or make it a module-level constant bound once",
        )

    def constant(self, name: str, node: ast.AST) -> Value:
        if name in self.s.stack:
            raise _unsupported(node, f"the constant {name} refers to itself")
        self.s.stack.append(name)
        saved = self.locals
        self.locals = set()
        try:
            return self.expr(self.s.scope.constants[name])
        finally:
            self.locals = saved
            self.s.stack.pop()

    def expr(self, node: ast.expr) -> Value:
        """Lower one expression through its ``visit_<Node>`` method; any other is refused."""
        visit: Callable[[Any], Value] | None = getattr(self, f"visit_{type(node).__name__}", None)
        if visit is None:
            raise _unsupported(node, _describe(node))
        return visit(node)

    def visit_Constant(self, node: ast.Constant) -> Value:
        value = node.value
        if isinstance(value, bool):
            return self.b.const("bool", value)
        if isinstance(value, int):
            if not I64_MIN <= value <= I64_MAX:
                raise _unsupported(node, f"the integer literal {value} (outside int64)")
            return self.num.i(value)
        if isinstance(value, float):
            if value != 0 and abs(value) < MIN_NORMAL:
                raise _unsupported(node, f"the subnormal literal {value!r}")
            return self.num.f(value)
        raise _unsupported(node, _describe(node))

    def visit_Name(self, node: ast.Name) -> Value:
        return self.name(node.id, node)

    def visit_Attribute(self, node: ast.Attribute) -> Value:
        module = node.value
        if (
            isinstance(module, ast.Name)
            and self.s.scope.math.get(module.id) == ""
            and module.id not in self.locals
        ):
            if node.attr in MATH_CONSTANTS:
                return self.num.f(MATH_CONSTANTS[node.attr])
            raise _unsupported(node, f"math.{node.attr} used as a value")
        raise _unsupported(node, f"the attribute {ast.unparse(node)}")

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
                return b.unary("negate", operand)
            operand = num.as_int(operand)
            if operand.const is not None and operand.const != I64_MIN:
                return num.i(-int(operand.const))
            return num.ineg(operand)
        raise _unsupported(node, "the operator ~")

    def visit_IfExp(self, node: ast.IfExp) -> Value:
        b = self.b
        cond = self.num.truthy(self.expr(node.test))
        with self.predicate(b.and_(self.pred, cond)):
            yes = self.expr(node.body)
        with self.predicate(b.and_(self.pred, b.not_(cond))):
            no = self.expr(node.orelse)
        if yes.type != no.type:
            raise _type_error(node, f"the two arms of the conditional are {yes.type} and {no.type}")
        return b.select(cond, yes, no)

    def binop(self, op: ast.operator, a: Value, c: Value, node: ast.AST) -> Value:
        num = self.num
        symbol = _BINOPS.get(type(op))
        if symbol is None:
            raise _unsupported(node, f"the operator {type(op).__name__}")
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
            raise _type_error(
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
                raise _unsupported(node, f"the comparison {type(op).__name__}")
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
            raise _unsupported(node, f"keyword or starred arguments in {ast.unparse(node)}")
        scope = self.s.scope
        if isinstance(func, ast.Name) and func.id not in self.locals:
            if func.id in scope.functions:
                return self.inline(scope.functions[func.id], node)
            if func.id in scope.builtins:
                return self.builtin(func.id, node)
            if scope.math.get(func.id):
                return self.math(scope.math[func.id], node)
        if (
            isinstance(func, ast.Attribute)
            and isinstance(func.value, ast.Name)
            and scope.math.get(func.value.id) == ""
            and func.value.id not in self.locals
        ):
            return self.math(func.attr, node)
        raise _unsupported(node, f"the call {ast.unparse(node)}")

    def builtin(self, name: str, node: ast.Call) -> Value:
        b, num = self.b, self.num
        args = [self.expr(a) for a in node.args]
        if name == "range":
            raise _unsupported(node, "range() outside a for loop")
        if name in ("float", "int", "bool") and not args:
            return self._zero(name)
        if name in ("abs", "float", "int", "bool") and len(args) != 1:
            raise _unsupported(node, f"{name}() with {len(args)} arguments")
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
            raise _unsupported(node, f"{name}() of an iterable")
        kinds = {a.type for a in args}
        if len(kinds) != 1:
            raise _type_error(
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
            raise _unsupported(
                node,
                f"math.{name}: XLA's CPU result differs from libm's in the last bit",
                "the function stays Python; see docs/plugin-xla.md for the exact list",
            )
        if name not in MATH_FUNCTIONS:
            raise _unsupported(node, f"math.{name}")
        args = [self.expr(a) for a in node.args]
        two = {"atan2", "pow", "copysign", "fmod"}
        arity = 2 if name in two else (len(args) if name == "log" else 1)
        if len(args) != arity or (name == "log" and len(args) not in (1, 2)):
            raise _unsupported(node, f"math.{name}() with {len(args)} arguments")
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
            return b.unary("sqrt", x)
        if name == "cbrt":
            return b.unary("cbrt", x)
        if name == "log":
            logs = []
            for value in xs:
                self.flag(num.cmp("LE", value, num.f(0.0)))
                logs.append(b.unary("log", value))
            return logs[0] if len(logs) == 1 else num.fdiv(logs[0], logs[1])
        if name in ("sin", "cos", "tan"):
            self.flag(num.isinf(x))
            return b.unary({"sin": "sine", "cos": "cosine", "tan": "tan"}[name], x)
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
        r = b.binary("atan2", y, x)
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

    def inline(self, callee: ast.FunctionDef, node: ast.Call) -> Value:
        if callee.name in self.s.stack:
            raise _unsupported(node, f"recursion ({' -> '.join([*self.s.stack, callee.name])})")
        params = _parameters(callee)
        args = [self.expr(a) for a in node.args]
        if len(args) != len(params):
            raise _unsupported(
                node, f"{callee.name}() called with {len(args)} of {len(params)} arguments"
            )
        bound: dict[str, Value] = {}
        for (pname, ptype), value in zip(params, args, strict=True):
            if value.type != ptype:
                raise _type_error(
                    node,
                    f"{callee.name}() takes {pname}: {ptype} but is given {value.type}; "
                    f"Python would run its body with the {value.type}",
                    f"pass a {ptype}, e.g. {ptype}(...)",
                )
            bound[pname] = value
        self.s.stack.append(callee.name)
        try:
            inner = _Function(self.s, callee, bound, self.pred, self.vars["$err"])
            result, err = inner.run()
        finally:
            self.s.stack.pop()
        self.vars["$err"] = err
        return result


def _parameters(node: ast.FunctionDef) -> list[tuple[str, str]]:
    a = node.args
    if a.vararg or a.kwarg or a.kwonlyargs:
        raise _unsupported(node, f"{node.name}() has *args, **kwargs or keyword-only parameters")
    params = [*a.posonlyargs, *a.args]
    return [(p.arg, _annotation(p.annotation, p, f"parameter {p.arg}")) for p in params]


def compile_function(scope: ModuleScope, name: str) -> CompiledFunction:
    """The StableHLO module for the module-level ``@xla.jit`` function ``name``.

    Raises ``CompileError`` naming the first construct (by line) outside the
    language, or the first type error.
    """
    node = scope.functions[name]
    for decorator in node.decorator_list:
        text = ast.unparse(decorator)
        if text.rpartition(".")[2] != "jit":
            raise _unsupported(decorator, f"the decorator @{text} besides @xla.jit")
    params = _parameters(node)
    _annotation(node.returns, node, f"the return of {name}()")
    builder = Builder()
    shared = _Shared(builder, scope, [name])
    values = builder.parameters([kind for _, kind in params])
    args = {p: value for (p, _), value in zip(params, values, strict=True)}
    body = _Function(shared, node, args, builder.true(), builder.false())
    result, err = body.run()
    text = builder.module(len(params), result, err)
    return CompiledFunction(
        name,
        tuple(p for p, _ in params),
        tuple(t for _, t in params),
        body.ret_type,
        text,
    )
