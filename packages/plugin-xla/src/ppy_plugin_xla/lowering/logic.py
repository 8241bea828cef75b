"""Rules of the hardware's ops: constants, logic, select, comparison on one type.

These are what the front writes predicates and conversions with; each is one
StableHLO op (a float constant of zero excepted, ``Builder.const``). A range
loop's next index is here too: it is arithmetic on the loop, not on a value
of the program, so it wraps where CPython's ``range`` would have stopped.
"""

from __future__ import annotations

from ppy_plugin_xla.lowering.context import Context
from ppy_plugin_xla.lowering.hlo import Value
from ppy_plugin_xla.lowering.registry import register_lowering

__all__: list[str] = []


@register_lowering("const")
def _const(ctx: Context) -> Value:
    assert ctx.value is not None
    return ctx.b.const(ctx.kind, ctx.value)


@register_lowering("and")
def _and(ctx: Context, a: Value, b: Value) -> Value:
    return ctx.b.and_(a, b)


@register_lowering("or")
def _or(ctx: Context, a: Value, b: Value) -> Value:
    return ctx.b.or_(a, b)


@register_lowering("not")
def _not(ctx: Context, a: Value) -> Value:
    return ctx.b.not_(a)


@register_lowering("select")
def _select(ctx: Context, p: Value, a: Value, b: Value) -> Value:
    return ctx.b.select(p, a, b)


@register_lowering("compare")
def _compare(ctx: Context, a: Value, b: Value) -> Value:
    return ctx.b.compare(ctx.param, a, b)


@register_lowering("convert")
def _convert(ctx: Context, a: Value) -> Value:
    return ctx.b.convert(a, ctx.kind)


@register_lowering("range.next")
def _range_next(ctx: Context, index: Value, step: Value, stop: Value) -> Value:
    """``index + step``, or ``stop`` where the sum overflows int64: the range
    is over then, whatever the wrapped sum says."""
    b = ctx.b
    nxt = b.binary("add", index, step)
    both = b.binary("and", b.binary("xor", index, nxt), b.binary("xor", step, nxt))
    wrapped = ctx.cmp("LT", both, ctx.i(0))
    return b.select(wrapped, stop, nxt)
