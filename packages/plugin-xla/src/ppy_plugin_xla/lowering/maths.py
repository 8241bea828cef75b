"""Rules of the ``math`` functions compiled, each bit-exact with CPython's.

Which functions are compiled at all is the front's table
(``front/calls.py``: those whose XLA result matched libm's on every input
tried, docs/plugin-xla.md says how that was checked). Here each gets
CPython's domain checks (``Modules/mathmodule.c``: ``ValueError`` where the
result is NaN from a number) as flags, and its special values by hand where
the library op answers otherwise. ``math.pow`` is ``float.pow``, ``fabs``
is ``float.abs``, ``floor``, ``ceil`` and ``trunc`` are in ``convert.py``.
"""

from __future__ import annotations

import math

from ppy_plugin_xla.lowering.context import Context
from ppy_plugin_xla.lowering.floats import SMALL_DIVISOR
from ppy_plugin_xla.lowering.hlo import Value
from ppy_plugin_xla.lowering.registry import register_lowering

__all__: list[str] = []


@register_lowering("math.sqrt")
def _sqrt(ctx: Context, x: Value) -> Value:
    ctx.flag(ctx.cmp("LT", x, ctx.f(0.0)))
    return ctx.b.library("sqrt", x)


@register_lowering("math.cbrt")
def _cbrt(ctx: Context, x: Value) -> Value:
    return ctx.b.library("cbrt", x)


@register_lowering("math.tan")
def _tan(ctx: Context, x: Value) -> Value:
    ctx.flag(ctx.isinf(x))  # tan(inf): ValueError
    return ctx.b.library("tan", x)


@register_lowering("math.isnan")
def _isnan(ctx: Context, x: Value) -> Value:
    return ctx.isnan(x)


@register_lowering("math.isinf")
def _isinf(ctx: Context, x: Value) -> Value:
    return ctx.isinf(x)


@register_lowering("math.isfinite")
def _isfinite(ctx: Context, x: Value) -> Value:
    return ctx.isfinite(x)


@register_lowering("math.copysign")
def _copysign(ctx: Context, x: Value, y: Value) -> Value:
    # The sign of a NaN is not kept by XLA's arithmetic (LLVM may turn
    # -x + y into y - x): CPython answers that one.
    ctx.flag(ctx.isnan(y))
    return ctx.copysign(x, y)


@register_lowering("math.fmod")
def _fmod(ctx: Context, x: Value, y: Value) -> Value:
    """C's fmod, with m_fmod's infinite divisor and its ValueError."""
    b = ctx.b
    r = b.binary("remainder", x, y)
    small = ctx.cmp("LT", b.unary("abs", y), ctx.f(SMALL_DIVISOR))
    ctx.flag(b.and_(small, b.not_(ctx.cmp("LT", b.unary("abs", x), b.unary("abs", y)))))
    r = b.select(b.and_(ctx.isinf(y), ctx.isfinite(x)), x, r)
    real = b.and_(b.not_(ctx.isnan(x)), b.not_(ctx.isnan(y)))
    ctx.flag(b.and_(ctx.isnan(r), real))  # ValueError
    return r


@register_lowering("math.atan2")
def _atan2(ctx: Context, y: Value, x: Value) -> Value:
    """CPython's m_atan2: the special values by hand, the rest by the library."""
    b = ctx.b
    zero, one = ctx.f(0.0), ctx.f(1.0)
    pi = ctx.f(math.pi)
    positive_x = ctx.cmp("EQ", ctx.copysign(one, x), one)
    r = b.library("atan2", y, x)
    general = b.not_(b.or_(b.or_(ctx.isnan(x), ctx.isnan(y)), b.or_(ctx.isinf(x), ctx.isinf(y))))
    general = b.and_(general, ctx.cmp("NE", y, zero))
    ctx.flag(b.and_(general, ctx.tiny(r)))
    at_zero = b.select(positive_x, ctx.copysign(zero, y), ctx.copysign(pi, y))
    r = b.select(b.or_(ctx.isinf(x), ctx.cmp("EQ", y, zero)), at_zero, r)
    corner = b.select(
        positive_x,
        ctx.copysign(ctx.f(0.25 * math.pi), y),
        ctx.copysign(ctx.f(0.75 * math.pi), y),
    )
    r = b.select(
        ctx.isinf(y), b.select(ctx.isinf(x), corner, ctx.copysign(ctx.f(0.5 * math.pi), y)), r
    )
    return b.select(b.or_(ctx.isnan(x), ctx.isnan(y)), ctx.f(math.nan), r)
