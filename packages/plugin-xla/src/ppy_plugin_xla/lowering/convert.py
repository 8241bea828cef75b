"""Rules where an int meets a float: comparing them exactly, and ``int()``.

CPython compares an int with a float exactly, not by converting the int to
a double (``2**53 + 1 == 2.0**53`` is False); the rule compares the int with
the float's floor and fraction instead. ``int(x)`` and ``math.floor``,
``ceil`` and ``trunc`` flag NaN, the infinities and results beyond int64.
"""

from __future__ import annotations

from ppy_plugin_xla.lowering.context import Context
from ppy_plugin_xla.lowering.hlo import Value
from ppy_plugin_xla.lowering.registry import register_lowering

__all__: list[str] = []

_TWO63 = 9223372036854775808.0


@register_lowering("compare.int_float")
def _int_float(ctx: Context, i: Value, x: Value) -> Value:
    """``i <direction> x`` for an int ``i`` and a float ``x``, as CPython answers."""
    b = ctx.b
    nan = ctx.isnan(x)
    above = ctx.cmp("GE", x, ctx.f(_TWO63))  # every int64 is below
    below = ctx.cmp("LT", x, ctx.f(-_TWO63))  # every int64 is above
    inside = b.not_(b.or_(b.or_(above, below), nan))
    floor = b.unary("floor", x)
    whole = b.convert(b.select(inside, floor, ctx.f(0.0)), "int")
    fraction = ctx.cmp("NE", x, floor)
    lt = b.or_(ctx.cmp("LT", i, whole), b.and_(ctx.cmp("EQ", i, whole), fraction))
    eq = b.and_(inside, b.and_(ctx.cmp("EQ", i, whole), b.not_(fraction)))
    less = b.or_(above, b.and_(inside, lt))
    greater = b.or_(below, b.and_(inside, ctx.cmp("GT", i, whole)))
    return {
        "LT": less,
        "GT": greater,
        "EQ": eq,
        "NE": b.not_(eq),
        "LE": b.or_(less, eq),
        "GE": b.or_(greater, eq),
    }[ctx.param]


def _to_int(ctx: Context, x: Value, rounding: str | None) -> Value:
    """The float ``x``, rounded, as an int: NaN, inf and beyond int64 fall back."""
    b = ctx.b
    y = b.unary(rounding, x) if rounding else x
    inside = b.and_(ctx.cmp("GE", y, ctx.f(-_TWO63)), ctx.cmp("LT", y, ctx.f(_TWO63)))
    ctx.flag(b.not_(inside))  # nan compares false: it falls back too
    return b.convert(b.select(inside, y, ctx.f(0.0)), "int")


@register_lowering("float.to_int")
def _int(ctx: Context, x: Value) -> Value:
    return _to_int(ctx, x, None)


@register_lowering("math.floor")
def _floor(ctx: Context, x: Value) -> Value:
    return _to_int(ctx, x, "floor")


@register_lowering("math.ceil")
def _ceil(ctx: Context, x: Value) -> Value:
    return _to_int(ctx, x, "ceil")


@register_lowering("math.trunc")
def _trunc(ctx: Context, x: Value) -> Value:
    return _to_int(ctx, x, None)
