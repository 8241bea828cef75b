"""Statements to IR: one function per kind of ``ast.stmt``, in a table.

``block`` lowers statements in order, each under the predicate that it runs
(``Frame.statement_predicate``), and stops at the first one that can never
run (after an unconditional ``return``, ``break`` or ``continue``). An
``if`` lowers both arms, each under its share of the predicate. Loops are
registered by ``loops.py``, which lowers their bodies with ``block``.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from typing import TypeVar

from ppy_plugin_xla.errors import describe, type_error, unsupported
from ppy_plugin_xla.front.arith import truthy
from ppy_plugin_xla.front.expressions import binop, expr, name
from ppy_plugin_xla.front.frame import Frame, Unknown, annotation

__all__ = ["STATEMENTS", "block", "register"]

#: ast.stmt subclass -> the function that lowers it.
STATEMENTS: dict[type[ast.stmt], Callable[[Frame, ast.stmt], None]] = {}
S = TypeVar("S", bound=ast.stmt)


def register(kind: type[S]) -> Callable[[Callable[[Frame, S], None]], Callable[[Frame, S], None]]:
    def add(lowering: Callable[[Frame, S], None]) -> Callable[[Frame, S], None]:
        STATEMENTS[kind] = lowering  # type: ignore[assignment]
        return lowering

    return add


def block(f: Frame, body: list[ast.stmt]) -> None:
    for stmt in body:
        p = f.statement_predicate()
        if p.const is False:
            return  # after an unconditional return, break or continue
        f.pred = p
        if f.s.discovery:
            try:
                statement(f, stmt)
            except Unknown:
                continue
        else:
            statement(f, stmt)


def statement(f: Frame, stmt: ast.stmt) -> None:
    """Lower one statement; a kind not in ``STATEMENTS`` is outside the language."""
    lowering = STATEMENTS.get(type(stmt))
    if lowering is None:
        raise unsupported(stmt, describe(stmt))
    lowering(f, stmt)


@register(ast.Assign)
def _assign(f: Frame, stmt: ast.Assign) -> None:
    targets, value_node = stmt.targets, stmt.value
    if isinstance(value_node, ast.Tuple) and all(isinstance(t, ast.Tuple) for t in targets):
        # a, b = b, a + b: every value first, then the names left to right
        values = [expr(f, v) for v in value_node.elts]
        for target in targets:
            assert isinstance(target, ast.Tuple)
            if len(target.elts) != len(values) or not all(
                isinstance(t, ast.Name) for t in target.elts
            ):
                raise unsupported(stmt, "unpacking other than names = values of equal count")
            for local, value in zip(target.elts, values, strict=True):
                assert isinstance(local, ast.Name)
                f.assign(local.id, value, stmt)
        return
    value = expr(f, value_node)
    for target in targets:
        if not isinstance(target, ast.Name):
            raise unsupported(stmt, f"assignment to {describe(target)}")
        f.assign(target.id, value, stmt)


@register(ast.AnnAssign)
def _annotated(f: Frame, stmt: ast.AnnAssign) -> None:
    if not isinstance(stmt.target, ast.Name):
        raise unsupported(stmt, "an annotated assignment to something other than a name")
    declared = annotation(stmt.annotation, stmt, f"local {stmt.target.id}")
    if stmt.value is None:
        return
    value = expr(f, stmt.value)
    if value.type != declared:
        raise type_error(
            stmt,
            f"{stmt.target.id} is annotated {declared} but is assigned {value.type}; "
            f"Python keeps the {value.type}",
            f"write a {declared} value, e.g. {declared}(...)",
        )
    f.assign(stmt.target.id, value, stmt)


@register(ast.AugAssign)
def _augmented(f: Frame, stmt: ast.AugAssign) -> None:
    if not isinstance(stmt.target, ast.Name):
        raise unsupported(stmt, "an augmented assignment to something other than a name")
    current = name(f, stmt.target.id, stmt.target)
    value = binop(f, stmt.op, current, expr(f, stmt.value), stmt)
    f.assign(stmt.target.id, value, stmt)


@register(ast.Return)
def _return(f: Frame, stmt: ast.Return) -> None:
    b = f.b
    if stmt.value is None:
        raise type_error(stmt, "return without a value returns None")
    value = expr(f, stmt.value)
    if value.type != f.ret_type:
        raise type_error(
            stmt,
            f"returns {value.type} where the annotation says {f.ret_type}; "
            f"Python would return the {value.type}",
            f"return {'an' if f.ret_type == 'int' else 'a'} {f.ret_type}, e.g. {f.ret_type}(...)",
        )
    f.vars["$retval"] = b.select(f.pred, value, f.vars["$retval"])
    f.vars["$ret"] = b.or_(f.vars["$ret"], f.pred)


@register(ast.If)
def _if(f: Frame, stmt: ast.If) -> None:
    b = f.b
    p = f.pred
    cond = truthy(f, expr(f, stmt.test))
    saved = f.base
    f.base = b.and_(p, cond)
    block(f, stmt.body)
    f.base = b.and_(p, b.not_(cond))
    block(f, stmt.orelse)
    f.base = saved


@register(ast.Break)
def _break(f: Frame, stmt: ast.Break) -> None:
    _leave(f, "$brk", stmt)


@register(ast.Continue)
def _continue(f: Frame, stmt: ast.Continue) -> None:
    _leave(f, "$cont", stmt)


def _leave(f: Frame, key: str, stmt: ast.stmt) -> None:
    """``break`` or ``continue``: the loop's flag is set where this runs."""
    if key not in f.vars:
        raise unsupported(stmt, f"{type(stmt).__name__.lower()} outside a loop")
    f.vars[key] = f.b.or_(f.vars[key], f.pred)


@register(ast.Pass)
def _pass(f: Frame, stmt: ast.Pass) -> None:
    return


@register(ast.Expr)
def _expression(f: Frame, stmt: ast.Expr) -> None:
    if isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str):
        return  # a docstring
    raise unsupported(stmt, f"the expression statement {ast.unparse(stmt.value)!r} (a side effect)")
