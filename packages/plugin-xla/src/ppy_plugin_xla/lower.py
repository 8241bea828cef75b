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

This module holds that control flow: one ``visit_<Node>`` method per kind of
statement, dispatched by ``statement`` (``generic`` refuses the rest), with
``while`` and ``for ... in range()`` both lowered by ``loop``. What a value
is computed as, expressions, is the base class ``Expressions`` in
``expressions.py``, kept apart so each module reads as one concern.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass, field

from ppy_plugin_xla.errors import describe, type_error, unsupported
from ppy_plugin_xla.expressions import MATH_CONSTANTS, MATH_FUNCTIONS, Expressions, Shared, Unknown
from ppy_plugin_xla.hlo import Builder, Value
from ppy_plugin_xla.numeric import Numeric
from ppy_plugin_xla.scope import ModuleScope

__all__ = ["CompiledFunction", "compile_function", "MATH_CONSTANTS", "MATH_FUNCTIONS"]

TYPES = ("float", "int", "bool")


@dataclass(frozen=True)
class CompiledFunction:
    qualname: str
    param_names: tuple[str, ...]
    param_types: tuple[str, ...]
    result_type: str
    #: The StableHLO module: @main(params...) -> (result, fallback flag).
    text: str
    #: The module-level names the body reads when it runs (``Shared.reads``).
    reads: dict[str, str] = field(default_factory=dict)


def _annotation(node: ast.expr | None, where: ast.AST, what: str) -> str:
    if isinstance(node, ast.Name) and node.id in TYPES:
        return node.id
    if node is None:
        raise type_error(where, f"{what} has no annotation", "annotate it float, int or bool")
    raise type_error(
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


class _Function(Expressions):
    """The lowering of one function body (the entry, or a callee being inlined)."""

    def __init__(
        self,
        shared: Shared,
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

    # -- the statement predicate ---------------------------------------------------

    def statement_predicate(self) -> Value:
        b = self.b
        p = b.and_(self.base, b.not_(self.vars["$ret"]))
        for key in ("$brk", "$cont"):
            if key in self.vars:
                p = b.and_(p, b.not_(self.vars[key]))
        return p

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
                except Unknown:
                    continue
            else:
                self.statement(stmt)

    def statement(self, stmt: ast.stmt) -> None:
        """Lower one statement through its ``visit_<Node>`` method; any other is refused."""
        visit: Callable[[ast.stmt], None] = getattr(
            self, f"visit_{type(stmt).__name__}", self.generic
        )
        visit(stmt)

    def visit_Assign(self, stmt: ast.Assign) -> None:
        self.assign_targets(stmt.targets, stmt.value, stmt)

    def visit_AnnAssign(self, stmt: ast.AnnAssign) -> None:
        if not isinstance(stmt.target, ast.Name):
            raise unsupported(stmt, "an annotated assignment to something other than a name")
        declared = _annotation(stmt.annotation, stmt, f"local {stmt.target.id}")
        if stmt.value is None:
            return
        value = self.expr(stmt.value)
        if value.type != declared:
            raise type_error(
                stmt,
                f"{stmt.target.id} is annotated {declared} but is assigned {value.type}; "
                f"Python keeps the {value.type}",
                f"write a {declared} value, e.g. {declared}(...)",
            )
        self.assign(stmt.target.id, value, stmt)

    def visit_AugAssign(self, stmt: ast.AugAssign) -> None:
        if not isinstance(stmt.target, ast.Name):
            raise unsupported(stmt, "an augmented assignment to something other than a name")
        current = self.name(stmt.target.id, stmt.target)
        value = self.binop(stmt.op, current, self.expr(stmt.value), stmt)
        self.assign(stmt.target.id, value, stmt)

    def visit_Return(self, stmt: ast.Return) -> None:
        b = self.b
        if stmt.value is None:
            raise type_error(stmt, "return without a value returns None")
        value = self.expr(stmt.value)
        if value.type != self.ret_type:
            raise type_error(
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

    def visit_Break(self, stmt: ast.Break) -> None:
        self._leave("$brk", stmt)

    def visit_Continue(self, stmt: ast.Continue) -> None:
        self._leave("$cont", stmt)

    def _leave(self, key: str, stmt: ast.stmt) -> None:
        """``break`` or ``continue``: the loop's flag is set where this runs."""
        if key not in self.vars:
            raise unsupported(stmt, f"{type(stmt).__name__.lower()} outside a loop")
        self.vars[key] = self.b.or_(self.vars[key], self.pred)

    def visit_Pass(self, stmt: ast.Pass) -> None:
        return

    def visit_Expr(self, stmt: ast.Expr) -> None:
        if isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str):
            return  # a docstring
        raise unsupported(
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
                    raise unsupported(stmt, "unpacking other than names = values of equal count")
                for name, value in zip(target.elts, values, strict=True):
                    assert isinstance(name, ast.Name)
                    self.assign(name.id, value, stmt)
            return
        value = self.expr(value_node)
        for target in targets:
            if not isinstance(target, ast.Name):
                raise unsupported(stmt, f"assignment to {describe(target)}")
            self.assign(target.id, value, stmt)

    def assign(self, name: str, value: Value, node: ast.AST) -> None:
        known = self.types.get(name)
        if known is not None and known != value.type:
            raise type_error(
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

    # -- loops: while and for ... in range() share loop() --------------------------

    def visit_While(self, stmt: ast.While) -> None:
        if stmt.orelse:
            raise unsupported(stmt, "while ... else")
        self.loop(stmt, stmt.body, test=stmt.test)

    def visit_For(self, stmt: ast.For) -> None:
        if stmt.orelse:
            raise unsupported(stmt, "for ... else")
        call = stmt.iter
        if not (
            isinstance(call, ast.Call)
            and isinstance(call.func, ast.Name)
            and call.func.id == "range"
            and "range" in self.s.scope.builtins
            and call.func.id not in self.locals
        ):
            raise unsupported(stmt, f"a for loop over {ast.unparse(call)} (only range() is)")
        self.s.read("range", "builtin:range")
        if not isinstance(stmt.target, ast.Name):
            raise unsupported(stmt, "a for loop target other than a name")
        if call.keywords or not 1 <= len(call.args) <= 3:
            raise unsupported(stmt, "range() with other than one to three positional arguments")
        args = [self.expr(a) for a in call.args]
        for arg in args:
            if arg.type == "float":
                raise type_error(stmt, "range() of a float (Python raises TypeError)")
        args = [self.num.as_int(a) for a in args]
        if len(args) == 1:
            start, stop, step = self.num.i(0), args[0], self.num.i(1)
        elif len(args) == 2:
            start, stop, step = args[0], args[1], self.num.i(1)
        else:
            start, stop, step = args
        self.loop(stmt, stmt.body, counter=(stmt.target.id, start, stop, step))

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
        except Unknown:
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

    # -- calls of compiled functions -----------------------------------------------

    def inline(self, callee: ast.FunctionDef, node: ast.Call) -> Value:
        if callee.name in self.s.stack:
            raise unsupported(node, f"recursion ({' -> '.join([*self.s.stack, callee.name])})")
        params = _parameters(callee)
        args = [self.expr(a) for a in node.args]
        if len(args) != len(params):
            raise unsupported(
                node, f"{callee.name}() called with {len(args)} of {len(params)} arguments"
            )
        bound: dict[str, Value] = {}
        for (pname, ptype), value in zip(params, args, strict=True):
            if value.type != ptype:
                raise type_error(
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
        raise unsupported(node, f"{node.name}() has *args, **kwargs or keyword-only parameters")
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
            raise unsupported(decorator, f"the decorator @{text} besides @xla.jit")
    params = _parameters(node)
    _annotation(node.returns, node, f"the return of {name}()")
    builder = Builder()
    shared = Shared(builder, scope, [name])
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
        dict(sorted(shared.reads.items())),
    )
