"""CPython's arithmetic on float, int and bool, written as StableHLO.

Each operation returns the bits CPython computes, or raises the fallback flag
(through ``flag``) for every input where it cannot: int results outside
int64, division by zero, math domain errors, overflow that CPython reports,
and any float result that would be subnormal. The last one is needed because
XLA's CPU runtime executes with flush-to-zero and denormals-are-zero set: a
subnormal is turned into zero where CPython keeps it. Since every producer of
a float flags a result that should have been subnormal, and arguments that
are subnormal go to Python at the call, no subnormal ever flows through a
compiled function.

The algorithms follow CPython 3.11 (``Objects/floatobject.c``
``_float_div_mod``/``float_pow``, ``Objects/longobject.c``,
``Modules/mathmodule.c``) line by line where signs of zero or special values
matter.
"""

from __future__ import annotations

from collections.abc import Callable

from ppy.kinds.xla_scalar import INT64_MAX as I64_MAX
from ppy.kinds.xla_scalar import INT64_MIN as I64_MIN
from ppy.kinds.xla_scalar import MIN_NORMAL_FLOAT64 as MIN_NORMAL

from ppy_plugin_xla.hlo import Builder, Value

__all__ = ["I64_MAX", "I64_MIN", "MIN_NORMAL", "Numeric"]

#: Below this a divisor's remainders may be subnormal (its ulp is under MIN_NORMAL).
_SMALL_DIVISOR = 2.0**-969
_TWO63 = 9223372036854775808.0

Flag = Callable[[Value], None]


class Numeric:
    """Operations on ``Value``s; ``flag(cond)`` raises the fallback flag where cond holds."""

    def __init__(self, builder: Builder, flag: Flag) -> None:
        self.b = builder
        self.flag = flag

    # -- small helpers -------------------------------------------------------------

    def i(self, v: int) -> Value:
        return self.b.const("int", v)

    def f(self, v: float) -> Value:
        return self.b.const("float", v)

    def as_int(self, a: Value) -> Value:
        """bool takes part in arithmetic as int (True + True == 2)."""
        return self.b.convert(a, "int") if a.type == "bool" else a

    def as_float(self, a: Value) -> Value:
        if a.type == "float":
            return a
        return self.b.convert(self.as_int(a), "float")

    def cmp(self, d: str, a: Value, b: Value) -> Value:
        return self.b.compare(d, a, b)

    def when(self, mask: Value | None, cond: Value) -> None:
        self.flag(cond if mask is None else self.b.and_(mask, cond))

    def tiny(self, r: Value) -> Value:
        """|r| below the smallest normal: zero, or a subnormal XLA flushed to zero."""
        return self.cmp("LT", self.b.unary("abs", r), self.f(MIN_NORMAL))

    def isnan(self, a: Value) -> Value:
        return self.cmp("NE", a, a)

    def isinf(self, a: Value) -> Value:
        return self.cmp("EQ", self.b.unary("abs", a), self.f(float("inf")))

    def isfinite(self, a: Value) -> Value:
        return self.cmp("LT", self.b.unary("abs", a), self.f(float("inf")))

    def copysign(self, a: Value, sign: Value) -> Value:
        """C's copysign, on the bits (so it is right for zeros and NaNs)."""
        b = self.b
        magnitude = b.binary("and", b.bitcast(a, "int"), self.i(I64_MAX))
        signbit = b.binary("and", b.bitcast(sign, "int"), self.i(I64_MIN))
        return b.bitcast(b.binary("or", magnitude, signbit), "float")

    def truthy(self, a: Value) -> Value:
        if a.type == "bool":
            return a
        zero = self.f(0.0) if a.type == "float" else self.i(0)
        return self.cmp("NE", a, zero)

    # -- int -----------------------------------------------------------------------

    def iadd(self, a: Value, c: Value) -> Value:
        b = self.b
        if c.const is not None and a.const is None:
            a, c = c, a
        if a.const is not None:  # constant + x: one comparison
            k = int(a.const)
            if k > 0:
                self.flag(self.cmp("GT", c, self.i(I64_MAX - k)))
            elif k < 0:
                self.flag(self.cmp("LT", c, self.i(I64_MIN - k)))
            return b.binary("add", c, a) if k else c
        r = b.binary("add", a, c)
        both = b.binary("and", b.binary("xor", a, r), b.binary("xor", c, r))
        self.flag(self.cmp("LT", both, self.i(0)))
        return r

    def isub(self, a: Value, c: Value) -> Value:
        b = self.b
        if c.const is not None:
            k = int(c.const)
            if k > 0:
                self.flag(self.cmp("LT", a, self.i(I64_MIN + k)))
            elif k < 0:
                self.flag(self.cmp("GT", a, self.i(I64_MAX + k)))
            return b.binary("subtract", a, c) if k else a
        r = b.binary("subtract", a, c)
        both = b.binary("and", b.binary("xor", a, c), b.binary("xor", a, r))
        self.flag(self.cmp("LT", both, self.i(0)))
        return r

    def imul(self, a: Value, c: Value) -> Value:
        b = self.b
        if c.const is not None and a.const is None:
            a, c = c, a
        if a.const is not None:
            k = int(a.const)
            if k == 0:
                return a
            if k == 1:
                return c
            if k == -1:
                return self.ineg(c)
            if k > 0:
                hi, lo = I64_MAX // k, -((-I64_MIN) // k)
            else:
                hi, lo = I64_MIN // k, -((-I64_MAX) // k)
            self.flag(b.or_(self.cmp("GT", c, self.i(hi)), self.cmp("LT", c, self.i(lo))))
            return b.binary("multiply", a, c)
        r = b.binary("multiply", a, c)
        nonzero = self.cmp("NE", a, self.i(0))
        minus_one = self.cmp("EQ", a, self.i(-1))
        safe = b.select(b.and_(nonzero, b.not_(minus_one)), a, self.i(1))
        back = self.cmp("NE", b.binary("divide", r, safe), c)
        general = b.and_(b.and_(nonzero, b.not_(minus_one)), back)
        special = b.and_(minus_one, self.cmp("EQ", c, self.i(I64_MIN)))
        self.flag(b.or_(general, special))
        return r

    def ineg(self, a: Value) -> Value:
        self.flag(self.cmp("EQ", a, self.i(I64_MIN)))
        return self.b.unary("negate", a)

    def iabs(self, a: Value) -> Value:
        self.flag(self.cmp("EQ", a, self.i(I64_MIN)))
        return self.b.unary("abs", a)

    def _idivmod(self, a: Value, c: Value, *, want_quotient: bool) -> Value:
        b = self.b
        zero = self.i(0)
        if c.const is not None and int(c.const) > 0 and int(c.const) & (int(c.const) - 1) == 0:
            # a power of two: Python's floor and mod are the shift and the mask
            k = int(c.const)
            if want_quotient:
                return b.binary("shift_right_arithmetic", a, self.i(k.bit_length() - 1))
            return b.binary("and", a, self.i(k - 1))
        if c.const is not None and int(c.const) not in (0, -1):
            k = int(c.const)
            q = b.binary("divide", a, c)
            r = b.binary("remainder", a, c)
            adjust = self.cmp("LT" if k > 0 else "GT", r, zero)
            if want_quotient:
                return b.select(adjust, b.binary("subtract", q, self.i(1)), q)
            return b.select(adjust, b.binary("add", r, c), r)
        self.flag(self.cmp("EQ", c, zero))
        minus_one = self.cmp("EQ", c, self.i(-1))
        safe = b.select(b.or_(self.cmp("EQ", c, zero), minus_one), self.i(1), c)
        r = b.select(minus_one, zero, b.binary("remainder", a, safe))
        signs = self.cmp("LT", b.binary("xor", r, c), zero)
        adjust = b.and_(self.cmp("NE", r, zero), signs)
        if want_quotient:
            self.flag(b.and_(minus_one, self.cmp("EQ", a, self.i(I64_MIN))))
            q = b.select(minus_one, b.unary("negate", a), b.binary("divide", a, safe))
            return b.select(adjust, b.binary("subtract", q, self.i(1)), q)
        return b.select(adjust, b.binary("add", r, c), r)

    def ifloordiv(self, a: Value, c: Value) -> Value:
        return self._idivmod(a, c, want_quotient=True)

    def imod(self, a: Value, c: Value) -> Value:
        return self._idivmod(a, c, want_quotient=False)

    def itruediv(self, a: Value, c: Value) -> Value:
        """int / int: CPython divides the doubles when both are below 2**53 in size;
        larger operands go to Python (its correctly rounded long division)."""
        b = self.b
        self.flag(self.cmp("EQ", c, self.i(0)))
        limit = 2**53
        for x in (a, c):
            if x.const is None:
                self.flag(
                    b.or_(self.cmp("GT", x, self.i(limit)), self.cmp("LT", x, self.i(-limit)))
                )
            elif abs(int(x.const)) > limit:  # a literal the doubles cannot divide exactly
                self.flag(b.true())
        return b.binary("divide", self.as_float(a), self.as_float(c))

    def ipow(self, a: Value, e: Value) -> Value:
        """int ** int >= 0 by squaring, every product checked; a negative exponent
        gives a float in Python, so it falls back."""
        b = self.b
        if e.const is not None and 0 <= int(e.const) <= 64:
            n = int(e.const)
            result, base = self.i(1), a
            while n:
                if n & 1:
                    result = self.imul(result, base) if result.const != 1 else base
                n >>= 1
                if n:
                    base = self.imul(base, base)
            return result
        self.flag(self.cmp("LT", e, self.i(0)))
        start = b.select(self.cmp("LT", e, self.i(0)), self.i(0), e)
        init = [self.i(1), a, start, b.false()]

        def cond(args: list[Value]) -> Value:
            more = self.cmp("GT", args[2], self.i(0))
            return b.and_(more, b.not_(args[3]))

        def body(args: list[Value]) -> list[Value]:
            result, base, n, over = args
            inner = Numeric(b, lambda _c: None)
            flags: list[Value] = []
            inner.flag = flags.append
            odd = self.cmp("EQ", b.binary("and", n, self.i(1)), self.i(1))
            product = inner.imul(result, base)
            result = b.select(odd, product, result)
            over = b.or_(over, b.and_(odd, flags.pop()))
            n = b.binary("shift_right_arithmetic", n, self.i(1))
            square = inner.imul(base, base)
            more = self.cmp("GT", n, self.i(0))
            base = b.select(more, square, base)
            over = b.or_(over, b.and_(more, flags.pop()))
            return [result, base, n, over]

        result, _base, _n, over = b.while_(init, cond, body)
        self.flag(over)
        return result

    # -- float ---------------------------------------------------------------------

    def fadd(self, a: Value, c: Value, mask: Value | None = None) -> Value:
        r = self.b.binary("add", a, c)
        self.when(mask, self.b.and_(self.tiny(r), self.cmp("NE", a, self.b.unary("negate", c))))
        return r

    def fsub(self, a: Value, c: Value, mask: Value | None = None) -> Value:
        r = self.b.binary("subtract", a, c)
        self.when(mask, self.b.and_(self.tiny(r), self.cmp("NE", a, c)))
        return r

    def fmul(self, a: Value, c: Value, mask: Value | None = None) -> Value:
        b = self.b
        r = b.binary("multiply", a, c)
        nonzero = b.and_(self.cmp("NE", a, self.f(0.0)), self.cmp("NE", c, self.f(0.0)))
        self.when(mask, b.and_(self.tiny(r), nonzero))
        return b.opaque(r)  # never fused with an add that follows

    def fdiv(self, a: Value, c: Value) -> Value:
        b = self.b
        self.flag(self.cmp("EQ", c, self.f(0.0)))
        r = b.binary("divide", a, c)
        live = b.and_(self.cmp("NE", a, self.f(0.0)), b.not_(self.isinf(c)))
        self.flag(b.and_(self.tiny(r), live))
        return r

    def _fmod(self, a: Value, c: Value) -> Value:
        """C fmod (exact); a divisor so small that the remainder may be subnormal
        falls back."""
        b = self.b
        small = self.cmp("LT", b.unary("abs", c), self.f(_SMALL_DIVISOR))
        self.flag(b.and_(small, b.not_(self.cmp("LT", b.unary("abs", a), b.unary("abs", c)))))
        return b.binary("remainder", a, c)

    def _divmod(self, vx: Value, wx: Value) -> tuple[Value, Value]:
        b = self.b
        self.flag(self.cmp("EQ", wx, self.f(0.0)))
        zero = self.f(0.0)
        mod = self._fmod(vx, wx)
        div = self.fdiv(self.fsub(vx, mod), wx)
        mod_set = self.cmp("NE", mod, zero)
        signs = self.cmp("NE", self.cmp("LT", wx, zero), self.cmp("LT", mod, zero))
        adjust = b.and_(mod_set, signs)
        mod = b.select(adjust, self.fadd(mod, wx, adjust), mod)
        div = b.select(adjust, self.fsub(div, self.f(1.0), adjust), div)
        mod = b.select(mod_set, mod, self.copysign(zero, wx))
        floor = b.unary("floor", div)
        snap = self.cmp("GT", self.fsub(div, floor), self.f(0.5))
        floor = b.select(snap, b.binary("add", floor, self.f(1.0)), floor)
        quotient = b.select(
            self.cmp("NE", div, zero), floor, self.copysign(zero, b.binary("divide", vx, wx))
        )
        return quotient, mod

    def ffloordiv(self, a: Value, c: Value) -> Value:
        return self._divmod(a, c)[0]

    def fmod(self, a: Value, c: Value) -> Value:
        """Python's float %: float_rem is the mod half of _float_div_mod."""
        b = self.b
        self.flag(self.cmp("EQ", c, self.f(0.0)))
        zero = self.f(0.0)
        mod = self._fmod(a, c)
        mod_set = self.cmp("NE", mod, zero)
        signs = self.cmp("NE", self.cmp("LT", c, zero), self.cmp("LT", mod, zero))
        adjust = b.and_(mod_set, signs)
        mod = b.select(adjust, self.fadd(mod, c, adjust), mod)
        return b.select(mod_set, mod, self.copysign(zero, c))

    def fpow(self, x: Value, y: Value) -> Value:
        """float ** float and math.pow: identical results, they differ only in which
        error they raise, and every error falls back."""
        b = self.b
        zero, one = self.f(0.0), self.f(1.0)
        ax = b.unary("abs", x)
        y_zero = self.cmp("EQ", y, zero)
        x_nan, y_nan = self.isnan(x), self.isnan(y)
        x_inf, y_inf = self.isinf(x), self.isinf(y)
        x_zero = self.cmp("EQ", x, zero)
        odd = self.cmp("EQ", b.binary("remainder", b.unary("abs", y), self.f(2.0)), one)
        y_pos, y_neg = self.cmp("GT", y, zero), self.cmp("LT", y, zero)
        # finite, non-zero x and y
        earlier = b.or_(b.or_(b.or_(y_zero, x_nan), b.or_(y_nan, y_inf)), x_inf)
        self.flag(b.and_(b.and_(b.not_(earlier), x_zero), y_neg))
        general = b.not_(b.or_(earlier, x_zero))
        negative = self.cmp("LT", x, zero)
        integral = self.cmp("EQ", y, b.unary("floor", y))
        self.flag(b.and_(general, b.and_(negative, b.not_(integral))))
        r = b.library("power", ax, y)
        r = b.select(self.cmp("EQ", ax, one), one, r)
        self.flag(b.and_(general, b.or_(self.isinf(r), self.tiny(r))))
        r = b.select(b.and_(negative, odd), b.unary("negate", r), r)
        # the special values, innermost (lowest priority) first
        r = b.select(x_zero, b.select(odd, x, zero), r)
        inf_x = b.select(y_pos, b.select(odd, x, ax), b.select(odd, self.copysign(zero, x), zero))
        r = b.select(x_inf, inf_x, r)
        big = self.cmp("EQ", y_pos, self.cmp("GT", ax, one))
        inf_y = b.select(self.cmp("EQ", ax, one), one, b.select(big, b.unary("abs", y), zero))
        r = b.select(y_inf, inf_y, r)
        r = b.select(y_nan, b.select(self.cmp("EQ", x, one), one, y), r)
        r = b.select(x_nan, x, r)
        return b.select(y_zero, one, r)

    # -- comparisons ---------------------------------------------------------------

    def compare(self, direction: str, a: Value, c: Value) -> Value:
        """Python's comparison of two numbers; int against float is exact."""
        if a.type == "bool" and c.type == "bool" and direction in ("EQ", "NE"):
            return self.cmp(direction, a, c)
        if a.type == "float" and c.type == "float":
            return self.cmp(direction, a, c)
        if a.type != "float" and c.type != "float":
            return self.cmp(direction, self.as_int(a), self.as_int(c))
        if a.type == "float":
            swapped = {"LT": "GT", "GT": "LT", "LE": "GE", "GE": "LE"}.get(direction, direction)
            return self._int_float(swapped, self.as_int(c), a)
        return self._int_float(direction, self.as_int(a), c)

    def _int_float(self, direction: str, i: Value, x: Value) -> Value:
        b = self.b
        nan = self.isnan(x)
        above = self.cmp("GE", x, self.f(_TWO63))  # every int64 is below
        below = self.cmp("LT", x, self.f(-_TWO63))  # every int64 is above
        inside = b.not_(b.or_(b.or_(above, below), nan))
        floor = b.unary("floor", x)
        whole = b.convert(b.select(inside, floor, self.f(0.0)), "int")
        fraction = self.cmp("NE", x, floor)
        lt = b.or_(self.cmp("LT", i, whole), b.and_(self.cmp("EQ", i, whole), fraction))
        eq = b.and_(inside, b.and_(self.cmp("EQ", i, whole), b.not_(fraction)))
        less = b.or_(above, b.and_(inside, lt))
        greater = b.or_(below, b.and_(inside, self.cmp("GT", i, whole)))
        return {
            "LT": less,
            "GT": greater,
            "EQ": eq,
            "NE": b.not_(eq),
            "LE": b.or_(less, eq),
            "GE": b.or_(greater, eq),
        }[direction]

    # -- conversions ---------------------------------------------------------------

    def float_to_int(self, x: Value, rounding: str | None = None) -> Value:
        """int(x), math.floor/ceil/trunc: nan, inf and results beyond int64 fall back."""
        b = self.b
        if x.type != "float":
            return self.as_int(x)
        y = b.unary(rounding, x) if rounding else x
        inside = b.and_(self.cmp("GE", y, self.f(-_TWO63)), self.cmp("LT", y, self.f(_TWO63)))
        self.flag(b.not_(inside))  # nan compares false: it falls back too
        return b.convert(b.select(inside, y, self.f(0.0)), "int")
