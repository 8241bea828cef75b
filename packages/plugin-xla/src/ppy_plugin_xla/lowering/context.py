"""What a lowering rule writes with: the text writer, its op's details, the flag.

A rule is called as ``rule(ctx, *operands)`` with the operands already
written; it returns the op's value. Where CPython would raise, or give what
the module cannot hold, the rule calls ``ctx.flag(cond)``: the op's guard
turns that into the fallback flag under the op's predicate. An op the IR
declares unable to fail (``ir.OPS``) has no guard, and a rule that flags it
anyway is a bug in the declaration, caught here rather than dropped.

The small predicates on floats (``tiny``, ``isnan``, ...) live here because
rules of every kind use them.
"""

from __future__ import annotations

from collections.abc import Callable

from ppy.kinds.xla_scalar import INT64_MAX as I64_MAX
from ppy.kinds.xla_scalar import INT64_MIN as I64_MIN
from ppy.kinds.xla_scalar import MIN_NORMAL_FLOAT64 as MIN_NORMAL

from ppy_plugin_xla.folding import Constant
from ppy_plugin_xla.lowering.hlo import Builder, Value

__all__ = ["I64_MAX", "I64_MIN", "MIN_NORMAL", "Context", "Flag"]

Flag = Callable[[Value], None]


def _cannot_fail(cond: Value) -> None:
    raise AssertionError("a rule set the flag of an op ir.OPS declares unable to fail")


class Context:
    """The writer ``b``, the op's result type ``kind``, its ``param`` (a
    comparison's direction), its ``value`` (a constant's), and ``flag``."""

    def __init__(
        self,
        b: Builder,
        *,
        kind: str = "",
        param: str = "",
        value: Constant | None = None,
        flag: Flag = _cannot_fail,
    ) -> None:
        self.b = b
        self.kind = kind
        self.param = param
        self.value = value
        self._flag = flag

    def flag(self, cond: Value) -> None:
        """CPython would not give the module's value where ``cond`` holds."""
        self._flag(cond)

    def when(self, mask: Value | None, cond: Value) -> None:
        self.flag(cond if mask is None else self.b.and_(mask, cond))

    def collecting(self, flags: list[Value]) -> Context:
        """A context whose flags are appended to ``flags``, for a rule that
        decides itself where they count (inside a loop it writes)."""
        return Context(self.b, kind=self.kind, param=self.param, flag=flags.append)

    # -- constants and comparisons -------------------------------------------------

    def i(self, v: int) -> Value:
        return self.b.const("int", v)

    def f(self, v: float) -> Value:
        return self.b.const("float", v)

    def cmp(self, direction: str, a: Value, b: Value) -> Value:
        return self.b.compare(direction, a, b)

    # -- predicates on floats ------------------------------------------------------

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
