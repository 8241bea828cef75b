"""``while`` and ``for ... in range()`` to IR loops with explicit carried state.

A loop carries the locals its body assigns, the fallback flag, and the flags
its body needs (``$ret``/``$retval`` where it returns, ``$brk`` where it
breaks, ``$idx`` for a range, ``$go`` for a test that can fail). Which
locals those are, and their types, is known only after lowering the body:
it is lowered in scratch first, until the types settle (``_discover``).

An iteration starts only while the flag, return and break are clear, so the
body lowers with them as constants false. A test that cannot fail is
evaluated in the loop's condition block; one that can is evaluated at the
end of the body, under the body's predicate, and carried as ``$go``, so
that its error is recorded only where Python would have evaluated it.
"""

from __future__ import annotations

import ast
from collections.abc import Callable

from ppy_plugin_xla.errors import type_error, unsupported
from ppy_plugin_xla.front.arith import as_int, truthy
from ppy_plugin_xla.front.expressions import expr
from ppy_plugin_xla.front.frame import Frame, Unknown, assigned, contains
from ppy_plugin_xla.front.statements import block, register
from ppy_plugin_xla.ir import Var

__all__: list[str] = []

#: A range loop's counter: the target's name, start, stop and step.
Counter = tuple[str, Var, Var, Var]


@register(ast.While)
def _while(f: Frame, stmt: ast.While) -> None:
    if stmt.orelse:
        raise unsupported(stmt, "while ... else")
    _Loop(f, stmt, test=stmt.test).lower()


@register(ast.For)
def _for(f: Frame, stmt: ast.For) -> None:
    if stmt.orelse:
        raise unsupported(stmt, "for ... else")
    call = stmt.iter
    if not (
        isinstance(call, ast.Call)
        and isinstance(call.func, ast.Name)
        and call.func.id == "range"
        and "range" in f.s.scope.builtins
        and call.func.id not in f.locals
    ):
        raise unsupported(stmt, f"a for loop over {ast.unparse(call)} (only range() is)")
    f.s.read("range", "builtin:range")
    if not isinstance(stmt.target, ast.Name):
        raise unsupported(stmt, "a for loop target other than a name")
    if call.keywords or not 1 <= len(call.args) <= 3:
        raise unsupported(stmt, "range() with other than one to three positional arguments")
    args = [expr(f, a) for a in call.args]
    for arg in args:
        if arg.type == "float":
            raise type_error(stmt, "range() of a float (Python raises TypeError)")
    args = [as_int(f, a) for a in args]
    if len(args) == 1:
        start, stop, step = f.i(0), args[0], f.i(1)
    elif len(args) == 2:
        start, stop, step = args[0], args[1], f.i(1)
    else:
        start, stop, step = args
    _Loop(f, stmt, counter=(stmt.target.id, start, stop, step)).lower()


def _placeholders(f: Frame, body: list[ast.stmt], extra: set[str]) -> list[str]:
    """Give every local the body assigns a value before the loop; the ones not yet
    assigned are marked unbound. Returns the locals the loop carries."""
    carried = []
    for local in sorted((assigned(body) | extra) & f.locals):
        if local not in f.vars:
            kind = f.types.get(local)
            if kind is None:
                # Discovery lowered the whole body and never reached an
                # assignment of it: it is assigned only in dead code (after
                # a break, under a test that folds to False). Not carried.
                continue
            f.vars[local] = f.zero(kind)
            f.vars["$def:" + local] = f.b.false()
        carried.append(local)
    return carried


def _discover(f: Frame, body: list[ast.stmt], extra: set[str], run: Callable[[], None]) -> None:
    """Lower the body in scratch until the types of its new locals settle."""
    b = f.b
    for _ in range(4):
        before = dict(f.types)
        vars_, base, pred = dict(f.vars), f.base, f.pred
        scratch, discovery = b.scratch, f.s.discovery
        b.scratch, f.s.discovery = True, True
        try:
            _placeholders(f, body, extra)
            run()
        finally:
            f.vars, f.base, f.pred = vars_, base, pred
            b.scratch, f.s.discovery = scratch, discovery
        if f.types == before:
            return


def _pure(f: Frame, test: ast.expr) -> bool:
    """Whether evaluating ``test`` cannot set the fallback flag (found by
    lowering it in scratch)."""
    b = f.b
    saved, scratch, pred = dict(f.vars), b.scratch, f.pred
    b.scratch = True
    marker = Var("bool")
    f.vars["$err"] = marker
    f.pred = marker
    try:
        expr(f, test)
        return f.vars["$err"] is marker
    except Unknown:
        return False
    finally:
        f.vars, b.scratch, f.pred = saved, scratch, pred


class _Loop:
    """One loop: a while loop (``test``) or a range loop (``counter``)."""

    def __init__(
        self,
        f: Frame,
        stmt: ast.While | ast.For,
        *,
        test: ast.expr | None = None,
        counter: Counter | None = None,
    ) -> None:
        self.f = f
        self.stmt = stmt
        self.body = stmt.body
        self.test = test
        self.counter = counter
        #: The predicate the loop statement runs under.
        self.p = f.pred
        self.positive: Var | None = None
        if counter is not None:
            self.positive = self._positive(counter[3])
            self.pure = True
        else:
            assert test is not None
            self.pure = _pure(f, test)
        self.keys: list[str] = []

    def _positive(self, step: Var) -> Var:
        f = self.f
        if step.const is not None:
            return f.b.const("bool", int(step.const) > 0)
        f.flag(f.b.compare("EQ", step, f.i(0)))  # ValueError
        return f.b.compare("GT", step, f.i(0))

    def _in_range(self, index: Var) -> Var:
        assert self.counter is not None and self.positive is not None
        b, stop, positive = self.f.b, self.counter[2], self.positive
        up = b.compare("LT", index, stop) if positive.const is not False else None
        down = b.compare("GT", index, stop) if positive.const is not True else None
        if up is None:
            assert down is not None
            return down
        if down is None:
            return up
        return b.select(positive, up, down)

    def check(self, index: Var) -> Var:
        """Whether another iteration runs (at ``index`` for a range)."""
        if self.counter is not None:
            return self._in_range(index)
        assert self.test is not None
        return truthy(self.f, expr(self.f, self.test))

    def iteration(self) -> None:
        """One pass through the body, then the next index or test."""
        f, b = self.f, self.f.b
        f.base = b.true()
        for key in ("$brk", "$cont", "$err", "$ret"):
            f.vars[key] = b.false()
        if self.counter is not None:
            f.pred = b.true()
            f.assign(self.counter[0], f.vars["$idx"], self.stmt)
        block(f, self.body)
        end = b.and_(b.not_(f.vars["$ret"]), b.not_(f.vars["$brk"]))
        f.pred = end
        if self.counter is not None:
            _target, _start, stop, step = self.counter
            f.vars["$idx"] = f.apply("range.next", "int", f.vars["$idx"], step, stop)
        elif not self.pure:
            again = self.check(f.vars["$idx"] if "$idx" in f.vars else b.true())
            f.vars["$go"] = b.and_(b.and_(end, again), b.not_(f.vars["$err"]))

    def bind(self, args: list[Var]) -> None:
        for key, value in zip(self.keys, args, strict=True):
            self.f.vars[key] = value

    def cond(self, args: list[Var]) -> Var:
        f, b = self.f, self.f.b
        saved = dict(f.vars)
        self.bind(args)
        try:
            if not self.pure:
                return f.vars["$go"]
            live = b.and_(self.p, b.not_(f.vars["$err"]))
            for key in ("$ret", "$brk"):
                if key in self.keys:
                    live = b.and_(live, b.not_(f.vars[key]))
            f.pred = live
            return b.and_(live, self.check(f.vars.get("$idx", live)))
        finally:
            f.vars = saved

    def region(self, args: list[Var]) -> list[Var]:
        f = self.f
        self.bind(args)
        self.iteration()
        for key in self.keys:
            if key.startswith("$def:") and key not in f.vars:
                f.vars[key] = f.b.true()
        return [f.vars[k] for k in self.keys]

    def carried(self, extra: set[str]) -> list[str]:
        """The state the loop carries, by key, in order; each given its value
        before the loop."""
        f, b, body = self.f, self.f.b, self.body
        names = _placeholders(f, body, extra)
        keys = names + [f"$def:{n}" for n in names if f"$def:{n}" in f.vars]
        keys += ["$err", "$ret", "$retval"] if contains(body, ast.Return) else ["$err"]
        if contains(body, ast.Break):
            f.vars["$brk"] = b.false()
            keys.append("$brk")
        if self.counter is not None:
            keys.append("$idx")
        if not self.pure:
            first = truthy(f, expr(f, self.test)) if self.test is not None else b.true()
            f.vars["$go"] = b.and_(b.and_(self.p, first), b.not_(f.vars["$err"]))
            keys.insert(0, "$go")
        return keys

    def lower(self) -> None:
        f = self.f
        outer: dict[str, Var] = {
            k: f.vars[k] for k in ("$brk", "$cont", "$idx", "$go") if k in f.vars
        }
        extra: set[str] = set()
        if self.counter is not None:
            f.vars["$idx"] = self.counter[1]
            extra.add(self.counter[0])
            f.types.setdefault(self.counter[0], "int")
        err_outer, ret_outer = f.vars["$err"], f.vars["$ret"]
        _discover(f, self.body, extra, self.iteration)
        f.vars["$err"], f.vars["$ret"] = err_outer, ret_outer
        self.keys = self.carried(extra)
        base = f.base
        results = f.b.while_([f.vars[k] for k in self.keys], self.cond, self.region)
        self.bind(results)
        if "$ret" not in self.keys:
            f.vars["$ret"] = ret_outer
        for key in ("$go", "$idx", "$brk", "$cont"):
            f.vars.pop(key, None)
        f.vars.update(outer)
        f.base = base
        f.pred = self.p
