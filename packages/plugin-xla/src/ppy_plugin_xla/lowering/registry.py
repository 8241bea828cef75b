"""The table of lowering rules, and the walk that writes a function through it.

As jax's ``mlir.register_lowering``: each op of ``ir.OPS`` has one rule,
registered by the module that holds CPython's semantics for it
(``ints.py``, ``floats.py``, ``compare.py``, ``maths.py``, ``logic.py``).
``lower`` writes the calling convention's parameters, then every op of the
body through its rule, the loops as ``stablehlo.while`` with their blocks
lowered the same way, then the result and flag.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from ppy_plugin_xla import ir
from ppy_plugin_xla.lowering.context import Context
from ppy_plugin_xla.lowering.hlo import Builder, Value

__all__ = ["RULES", "Rule", "lower", "register_lowering"]

Rule = Callable[..., Value]
R = TypeVar("R", bound=Rule)

#: op name -> its rule, ``rule(ctx, *operands) -> value``.
RULES: dict[str, Rule] = {}


def register_lowering(*ops: str) -> Callable[[R], R]:
    """Register the decorated function as the rule of ``ops``."""

    def register(rule: R) -> R:
        for op in ops:
            if op not in ir.OPS:
                raise ValueError(f"{op!r} is no op of ir.OPS; declare it there first")
            if op in RULES:
                raise ValueError(f"{op!r} has a lowering rule already: {RULES[op].__name__}")
            RULES[op] = rule
        return rule

    return register


class _Flag:
    """The fallback flag through one guarded op: set where its predicate holds."""

    def __init__(self, b: Builder, pred: Value, before: Value) -> None:
        self.b = b
        self.pred = pred
        self.value = before

    def set(self, cond: Value) -> None:
        b = self.b
        self.value = b.or_(self.value, b.and_(self.pred, cond))


class _Lowering:
    def __init__(self, b: Builder) -> None:
        self.b = b
        self.env: dict[ir.Var, Value] = {}

    def block(self, block: ir.Block, params: Sequence[Value]) -> list[Value]:
        self.env.update(zip(block.params, params, strict=True))
        for stmt in block.stmts:
            if isinstance(stmt, ir.Loop):
                self.loop(stmt)
            else:
                self.eqn(stmt)
        return [self.env[v] for v in block.results]

    def eqn(self, eqn: ir.Eqn) -> None:
        rule = RULES[eqn.op]
        args = [self.env[v] for v in eqn.args]
        out, guard = eqn.out, eqn.guard
        if guard is None:
            ctx = Context(self.b, kind=out.type, param=eqn.param, value=out.const)
            self.env[out] = rule(ctx, *args)
            return
        flag = _Flag(self.b, self.env[guard.pred], self.env[guard.before])
        ctx = Context(self.b, kind=out.type, param=eqn.param, value=out.const, flag=flag.set)
        self.env[out] = rule(ctx, *args)
        self.env[guard.after] = flag.value

    def loop(self, loop: ir.Loop) -> None:
        results = self.b.while_(
            [self.env[v] for v in loop.init],
            lambda params: self.block(loop.cond, params)[0],
            lambda params: self.block(loop.body, params),
        )
        self.env.update(zip(loop.out, results, strict=True))


def lower(function: ir.Function) -> str:
    """``function`` as one StableHLO module (``Builder.module``'s convention)."""
    b = Builder()
    body = function.body
    lowering = _Lowering(b)
    result, flag = lowering.block(body, b.parameters([p.type for p in body.params]))
    return b.module(len(body.params), result, flag)
