"""The state of the front while it reads one function body.

Control flow is lowered by predication: every statement runs under a
predicate (a bool value: "this statement executes"), an assignment becomes
a ``select`` between the new and the old value, and ``return``, ``break``
and ``continue`` only set flags that make the predicates of later
statements false. A ``Frame`` holds that state: each local's value and type
at this point of the body, the predicate, and the flags, kept in ``vars``
under names no Python local can have:

- ``$err``: the fallback flag (CPython would not give the module's value);
- ``$ret``/``$retval``: whether the function has returned, and what;
- ``$brk``/``$cont``: whether the innermost loop's iteration broke or
  continued; ``$idx``/``$go``: a range loop's index, a while loop's "go on";
- ``$def:x``: whether local ``x`` is bound yet, where that is not certain
  (reading it unbound is CPython's ``UnboundLocalError``: a flag).

Every op is written under ``pred``: an op that can fail adds to ``$err``
only where the predicate holds (``apply``).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from ppy_plugin_xla.errors import type_error
from ppy_plugin_xla.front.emit import Emitter
from ppy_plugin_xla.ir import OPS, Var
from ppy_plugin_xla.scope import ModuleScope

__all__ = ["TYPES", "Frame", "Shared", "Unknown", "annotation", "assigned", "contains"]

TYPES = ("float", "int", "bool")


class Unknown(Exception):
    """A name not yet typed while a loop's variables are being discovered."""


@dataclass
class Shared:
    """What every body of one compile shares: the callees are inlined into it."""

    emit: Emitter
    scope: ModuleScope
    #: The functions and constants being lowered, innermost last (for recursion).
    stack: list[str]
    #: Whether a loop body is being lowered in scratch to learn its types.
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


def annotation(node: ast.expr | None, where: ast.AST, what: str) -> str:
    """The scalar type an annotation names, or the type error it is."""
    if isinstance(node, ast.Name) and node.id in TYPES:
        return node.id
    if node is None:
        raise type_error(where, f"{what} has no annotation", "annotate it float, int or bool")
    raise type_error(
        where, f"{what} is annotated {ast.unparse(node)}", "annotate it float, int or bool"
    )


def assigned(statements: list[ast.stmt]) -> set[str]:
    """The names ``statements`` assign, at any depth."""
    names: set[str] = set()
    for stmt in statements:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
    return names


def contains(statements: list[ast.stmt], kind: type) -> bool:
    return any(isinstance(n, kind) for s in statements for n in ast.walk(s))


class Frame:
    """One function body being lowered (the entry, or a callee being inlined)."""

    def __init__(
        self, shared: Shared, node: ast.FunctionDef, args: dict[str, Var], base: Var, err: Var
    ) -> None:
        self.s = shared
        self.b = shared.emit
        self.node = node
        self.ret_type = annotation(node.returns, node, f"the return of {node.name}()")
        #: The names the function assigns or takes as parameters.
        self.locals = assigned(node.body) | set(args)
        self.types: dict[str, str] = {k: v.type for k, v in args.items()}
        #: The locals (and ``$``-prefixed flags) as values at this point.
        self.vars: dict[str, Var] = dict(args)
        self.vars["$err"] = err
        self.vars["$ret"] = self.b.false()
        self.vars["$retval"] = self.zero(self.ret_type)
        #: The predicate of the block being lowered.
        self.base = base
        #: "This code executes": where an error is recorded in the fallback flag.
        self.pred = base

    # -- values --------------------------------------------------------------------

    def i(self, v: int) -> Var:
        return self.b.const("int", v)

    def f(self, v: float) -> Var:
        return self.b.const("float", v)

    def zero(self, kind: str) -> Var:
        return self.b.const(kind, {"float": 0.0, "int": 0, "bool": False}[kind])

    def apply(self, op: str, kind: str, *args: Var, param: str = "") -> Var:
        """``op(args)`` under the current predicate, guarded where it may fail."""
        if not OPS[op](args):
            return self.b.eqn(op, args, kind, param)
        value, after = self.b.guarded(op, args, kind, param, self.pred, self.vars["$err"])
        self.vars["$err"] = after
        return value

    # -- the fallback flag and predicates ------------------------------------------

    def flag(self, cond: Var) -> None:
        """CPython would raise where ``cond`` holds, if this code runs."""
        b = self.b
        self.vars["$err"] = b.or_(self.vars["$err"], b.and_(self.pred, cond))

    @contextmanager
    def predicate(self, p: Var) -> Iterator[None]:
        saved = self.pred
        self.pred = p
        try:
            yield
        finally:
            self.pred = saved

    def statement_predicate(self) -> Var:
        """Whether the next statement runs: the block's predicate, unless the
        function returned or the loop's iteration broke or continued."""
        b = self.b
        p = b.and_(self.base, b.not_(self.vars["$ret"]))
        for key in ("$brk", "$cont"):
            if key in self.vars:
                p = b.and_(p, b.not_(self.vars[key]))
        return p

    # -- locals --------------------------------------------------------------------

    def assign(self, name: str, value: Var, node: ast.AST) -> None:
        """``name = value`` under the predicate: the new value where it holds."""
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
