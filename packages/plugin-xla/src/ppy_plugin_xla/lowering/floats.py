"""Rules of CPython's float operators, every subnormal result flagged.

XLA's CPU runtime runs with flush-to-zero and denormals-are-zero set, so a
result that should be subnormal comes back as zero where CPython keeps it:
every rule that can produce one flags it (``ctx.tiny``), and since the
runtime sends subnormal arguments to Python, none flows through a compiled
function. ``//`` and ``%`` follow ``_float_div_mod`` and ``**`` follows
``float_pow`` of CPython 3.11's ``Objects/floatobject.c`` line by line,
where the signs of zeros and the special values are decided.
"""

from __future__ import annotations

from ppy_plugin_xla.lowering.context import Context
from ppy_plugin_xla.lowering.hlo import Value
from ppy_plugin_xla.lowering.registry import register_lowering

__all__ = ["SMALL_DIVISOR"]

#: Below this a divisor's remainders may be subnormal (its ulp is under MIN_NORMAL).
SMALL_DIVISOR = 2.0**-969


@register_lowering("float.add")
def fadd(ctx: Context, a: Value, c: Value, mask: Value | None = None) -> Value:
    b = ctx.b
    r = b.binary("add", a, c)
    ctx.when(mask, b.and_(ctx.tiny(r), ctx.cmp("NE", a, b.unary("negate", c))))
    return r


@register_lowering("float.sub")
def fsub(ctx: Context, a: Value, c: Value, mask: Value | None = None) -> Value:
    r = ctx.b.binary("subtract", a, c)
    ctx.when(mask, ctx.b.and_(ctx.tiny(r), ctx.cmp("NE", a, c)))
    return r


@register_lowering("float.mul")
def _fmul(ctx: Context, a: Value, c: Value) -> Value:
    b = ctx.b
    r = b.binary("multiply", a, c)
    nonzero = b.and_(ctx.cmp("NE", a, ctx.f(0.0)), ctx.cmp("NE", c, ctx.f(0.0)))
    ctx.flag(b.and_(ctx.tiny(r), nonzero))
    return b.opaque(r)  # never fused with an add that follows


@register_lowering("float.div")
def _fdiv(ctx: Context, a: Value, c: Value) -> Value:
    b = ctx.b
    ctx.flag(ctx.cmp("EQ", c, ctx.f(0.0)))
    r = b.binary("divide", a, c)
    live = b.and_(ctx.cmp("NE", a, ctx.f(0.0)), b.not_(ctx.isinf(c)))
    ctx.flag(b.and_(ctx.tiny(r), live))
    return r


@register_lowering("float.neg")
def _fneg(ctx: Context, a: Value) -> Value:
    return ctx.b.negate(a)


@register_lowering("float.abs")
def _fabs(ctx: Context, a: Value) -> Value:
    return ctx.b.unary("abs", a)


def remainder(ctx: Context, a: Value, c: Value) -> Value:
    """C fmod (exact); a divisor so small that the remainder may be subnormal
    falls back."""
    b = ctx.b
    small = ctx.cmp("LT", b.unary("abs", c), ctx.f(SMALL_DIVISOR))
    ctx.flag(b.and_(small, b.not_(ctx.cmp("LT", b.unary("abs", a), b.unary("abs", c)))))
    return b.binary("remainder", a, c)


@register_lowering("float.floordiv")
def _ffloordiv(ctx: Context, vx: Value, wx: Value) -> Value:
    """The div half of ``_float_div_mod``."""
    b = ctx.b
    ctx.flag(ctx.cmp("EQ", wx, ctx.f(0.0)))
    zero = ctx.f(0.0)
    mod = remainder(ctx, vx, wx)
    div = _fdiv(ctx, fsub(ctx, vx, mod), wx)
    mod_set = ctx.cmp("NE", mod, zero)
    signs = ctx.cmp("NE", ctx.cmp("LT", wx, zero), ctx.cmp("LT", mod, zero))
    adjust = b.and_(mod_set, signs)
    mod = b.select(adjust, fadd(ctx, mod, wx, adjust), mod)
    div = b.select(adjust, fsub(ctx, div, ctx.f(1.0), adjust), div)
    mod = b.select(mod_set, mod, ctx.copysign(zero, wx))
    floor = b.unary("floor", div)
    snap = ctx.cmp("GT", fsub(ctx, div, floor), ctx.f(0.5))
    floor = b.select(snap, b.binary("add", floor, ctx.f(1.0)), floor)
    return b.select(ctx.cmp("NE", div, zero), floor, ctx.copysign(zero, b.binary("divide", vx, wx)))


@register_lowering("float.mod")
def _fmod(ctx: Context, a: Value, c: Value) -> Value:
    """Python's float %: float_rem is the mod half of _float_div_mod."""
    b = ctx.b
    ctx.flag(ctx.cmp("EQ", c, ctx.f(0.0)))
    zero = ctx.f(0.0)
    mod = remainder(ctx, a, c)
    mod_set = ctx.cmp("NE", mod, zero)
    signs = ctx.cmp("NE", ctx.cmp("LT", c, zero), ctx.cmp("LT", mod, zero))
    adjust = b.and_(mod_set, signs)
    mod = b.select(adjust, fadd(ctx, mod, c, adjust), mod)
    return b.select(mod_set, mod, ctx.copysign(zero, c))


@register_lowering("float.pow")
def fpow(ctx: Context, x: Value, y: Value) -> Value:
    """float ** float and math.pow: identical results, they differ only in which
    error they raise, and every error falls back."""
    b = ctx.b
    zero, one = ctx.f(0.0), ctx.f(1.0)
    ax = b.unary("abs", x)
    y_zero = ctx.cmp("EQ", y, zero)
    x_nan, y_nan = ctx.isnan(x), ctx.isnan(y)
    x_inf, y_inf = ctx.isinf(x), ctx.isinf(y)
    x_zero = ctx.cmp("EQ", x, zero)
    odd = ctx.cmp("EQ", b.binary("remainder", b.unary("abs", y), ctx.f(2.0)), one)
    y_pos, y_neg = ctx.cmp("GT", y, zero), ctx.cmp("LT", y, zero)
    # finite, non-zero x and y
    earlier = b.or_(b.or_(b.or_(y_zero, x_nan), b.or_(y_nan, y_inf)), x_inf)
    ctx.flag(b.and_(b.and_(b.not_(earlier), x_zero), y_neg))
    general = b.not_(b.or_(earlier, x_zero))
    negative = ctx.cmp("LT", x, zero)
    integral = ctx.cmp("EQ", y, b.unary("floor", y))
    ctx.flag(b.and_(general, b.and_(negative, b.not_(integral))))
    r = b.library("power", ax, y)
    r = b.select(ctx.cmp("EQ", ax, one), one, r)
    ctx.flag(b.and_(general, b.or_(ctx.isinf(r), ctx.tiny(r))))
    r = b.select(b.and_(negative, odd), b.unary("negate", r), r)
    # the special values, innermost (lowest priority) first
    r = b.select(x_zero, b.select(odd, x, zero), r)
    inf_x = b.select(y_pos, b.select(odd, x, ax), b.select(odd, ctx.copysign(zero, x), zero))
    r = b.select(x_inf, inf_x, r)
    big = ctx.cmp("EQ", y_pos, ctx.cmp("GT", ax, one))
    inf_y = b.select(ctx.cmp("EQ", ax, one), one, b.select(big, b.unary("abs", y), zero))
    r = b.select(y_inf, inf_y, r)
    r = b.select(y_nan, b.select(ctx.cmp("EQ", x, one), one, y), r)
    r = b.select(x_nan, x, r)
    return b.select(y_zero, one, r)
