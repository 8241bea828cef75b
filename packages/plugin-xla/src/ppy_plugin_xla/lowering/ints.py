"""Rules of CPython's int operators on int64, every overflow flagged.

CPython's ints do not overflow; the module's are int64, so each rule flags
the inputs whose result would leave int64 (and Python answers). ``//`` and
``%`` take Python's signs (``Objects/longobject.c``), ``/`` divides the
doubles where CPython does, and ``**`` squares with every product checked.
A constant operand (``n + 1``, ``n % 2``) makes the check one comparison,
or none.
"""

from __future__ import annotations

from ppy_plugin_xla.lowering.context import I64_MAX, I64_MIN, Context
from ppy_plugin_xla.lowering.hlo import Value
from ppy_plugin_xla.lowering.registry import register_lowering

__all__ = ["imul", "ineg"]


@register_lowering("int.add")
def _iadd(ctx: Context, a: Value, c: Value) -> Value:
    b = ctx.b
    if c.const is not None and a.const is None:
        a, c = c, a
    if a.const is not None:  # constant + x: one comparison
        k = int(a.const)
        if k > 0:
            ctx.flag(ctx.cmp("GT", c, ctx.i(I64_MAX - k)))
        elif k < 0:
            ctx.flag(ctx.cmp("LT", c, ctx.i(I64_MIN - k)))
        return b.binary("add", c, a) if k else c
    r = b.binary("add", a, c)
    both = b.binary("and", b.binary("xor", a, r), b.binary("xor", c, r))
    ctx.flag(ctx.cmp("LT", both, ctx.i(0)))
    return r


@register_lowering("int.sub")
def _isub(ctx: Context, a: Value, c: Value) -> Value:
    b = ctx.b
    if c.const is not None:
        k = int(c.const)
        if k > 0:
            ctx.flag(ctx.cmp("LT", a, ctx.i(I64_MIN + k)))
        elif k < 0:
            ctx.flag(ctx.cmp("GT", a, ctx.i(I64_MAX + k)))
        return b.binary("subtract", a, c) if k else a
    r = b.binary("subtract", a, c)
    both = b.binary("and", b.binary("xor", a, c), b.binary("xor", a, r))
    ctx.flag(ctx.cmp("LT", both, ctx.i(0)))
    return r


@register_lowering("int.mul")
def imul(ctx: Context, a: Value, c: Value) -> Value:
    b = ctx.b
    if c.const is not None and a.const is None:
        a, c = c, a
    if a.const is not None:
        k = int(a.const)
        if k == 0:
            return a
        if k == 1:
            return c
        if k == -1:
            return ineg(ctx, c)
        if k > 0:
            hi, lo = I64_MAX // k, -((-I64_MIN) // k)
        else:
            hi, lo = I64_MIN // k, -((-I64_MAX) // k)
        ctx.flag(b.or_(ctx.cmp("GT", c, ctx.i(hi)), ctx.cmp("LT", c, ctx.i(lo))))
        return b.binary("multiply", a, c)
    r = b.binary("multiply", a, c)
    nonzero = ctx.cmp("NE", a, ctx.i(0))
    minus_one = ctx.cmp("EQ", a, ctx.i(-1))
    safe = b.select(b.and_(nonzero, b.not_(minus_one)), a, ctx.i(1))
    back = ctx.cmp("NE", b.binary("divide", r, safe), c)
    general = b.and_(b.and_(nonzero, b.not_(minus_one)), back)
    special = b.and_(minus_one, ctx.cmp("EQ", c, ctx.i(I64_MIN)))
    ctx.flag(b.or_(general, special))
    return r


@register_lowering("int.neg")
def ineg(ctx: Context, a: Value) -> Value:
    ctx.flag(ctx.cmp("EQ", a, ctx.i(I64_MIN)))
    return ctx.b.unary("negate", a)


@register_lowering("int.abs")
def _iabs(ctx: Context, a: Value) -> Value:
    ctx.flag(ctx.cmp("EQ", a, ctx.i(I64_MIN)))
    return ctx.b.unary("abs", a)


def _divmod(ctx: Context, a: Value, c: Value, *, want_quotient: bool) -> Value:
    """Python's floor division or modulo of ints: the sign of the divisor."""
    b = ctx.b
    zero = ctx.i(0)
    if c.const is not None and int(c.const) > 0 and int(c.const) & (int(c.const) - 1) == 0:
        # a power of two: Python's floor and mod are the shift and the mask
        k = int(c.const)
        if want_quotient:
            return b.binary("shift_right_arithmetic", a, ctx.i(k.bit_length() - 1))
        return b.binary("and", a, ctx.i(k - 1))
    if c.const is not None and int(c.const) not in (0, -1):
        k = int(c.const)
        q = b.binary("divide", a, c)
        r = b.binary("remainder", a, c)
        adjust = ctx.cmp("LT" if k > 0 else "GT", r, zero)
        if want_quotient:
            return b.select(adjust, b.binary("subtract", q, ctx.i(1)), q)
        return b.select(adjust, b.binary("add", r, c), r)
    ctx.flag(ctx.cmp("EQ", c, zero))
    minus_one = ctx.cmp("EQ", c, ctx.i(-1))
    safe = b.select(b.or_(ctx.cmp("EQ", c, zero), minus_one), ctx.i(1), c)
    r = b.select(minus_one, zero, b.binary("remainder", a, safe))
    signs = ctx.cmp("LT", b.binary("xor", r, c), zero)
    adjust = b.and_(ctx.cmp("NE", r, zero), signs)
    if want_quotient:
        ctx.flag(b.and_(minus_one, ctx.cmp("EQ", a, ctx.i(I64_MIN))))
        q = b.select(minus_one, b.unary("negate", a), b.binary("divide", a, safe))
        return b.select(adjust, b.binary("subtract", q, ctx.i(1)), q)
    return b.select(adjust, b.binary("add", r, c), r)


@register_lowering("int.floordiv")
def _ifloordiv(ctx: Context, a: Value, c: Value) -> Value:
    return _divmod(ctx, a, c, want_quotient=True)


@register_lowering("int.mod")
def _imod(ctx: Context, a: Value, c: Value) -> Value:
    return _divmod(ctx, a, c, want_quotient=False)


@register_lowering("int.div")
def _itruediv(ctx: Context, a: Value, c: Value) -> Value:
    """int / int: CPython divides the doubles when both are below 2**53 in size;
    larger operands go to Python (its correctly rounded long division)."""
    b = ctx.b
    ctx.flag(ctx.cmp("EQ", c, ctx.i(0)))
    limit = 2**53
    for x in (a, c):
        if x.const is None:
            ctx.flag(b.or_(ctx.cmp("GT", x, ctx.i(limit)), ctx.cmp("LT", x, ctx.i(-limit))))
        elif abs(int(x.const)) > limit:  # a literal the doubles cannot divide exactly
            ctx.flag(b.true())
    return b.binary("divide", b.convert(a, "float"), b.convert(c, "float"))


@register_lowering("int.pow")
def _ipow(ctx: Context, a: Value, e: Value) -> Value:
    """int ** int >= 0 by squaring, every product checked; a negative exponent
    gives a float in Python, so it falls back."""
    if e.const is not None and 0 <= int(e.const) <= 64:
        n = int(e.const)
        result, base = ctx.i(1), a
        while n:
            if n & 1:
                result = imul(ctx, result, base) if result.const != 1 else base
            n >>= 1
            if n:
                base = imul(ctx, base, base)
        return result
    return _pow_loop(ctx, a, e)


def _pow_loop(ctx: Context, a: Value, e: Value) -> Value:
    """``a ** e`` for an exponent known only when the function runs: a loop."""
    b = ctx.b
    ctx.flag(ctx.cmp("LT", e, ctx.i(0)))
    start = b.select(ctx.cmp("LT", e, ctx.i(0)), ctx.i(0), e)
    init = [ctx.i(1), a, start, b.false()]

    def cond(args: list[Value]) -> Value:
        more = ctx.cmp("GT", args[2], ctx.i(0))
        return b.and_(more, b.not_(args[3]))

    def body(args: list[Value]) -> list[Value]:
        result, base, n, over = args
        flags: list[Value] = []
        inner = ctx.collecting(flags)
        odd = ctx.cmp("EQ", b.binary("and", n, ctx.i(1)), ctx.i(1))
        product = imul(inner, result, base)
        result = b.select(odd, product, result)
        over = b.or_(over, b.and_(odd, flags.pop()))
        n = b.binary("shift_right_arithmetic", n, ctx.i(1))
        square = imul(inner, base, base)
        more = ctx.cmp("GT", n, ctx.i(0))
        base = b.select(more, square, base)
        over = b.or_(over, b.and_(more, flags.pop()))
        return [result, base, n, over]

    result, _base, _n, over = b.while_(init, cond, body)
    ctx.flag(over)
    return result
