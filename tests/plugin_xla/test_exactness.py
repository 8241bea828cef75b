"""Constants in the source: the staged result is CPython's, bit for bit.

``test_operators`` draws operands as arguments; here the constants are
written into the function, where a compiler can see them and rewrite the
arithmetic around them (a division by a constant turned into a product by
its reciprocal, ``x + 0.0`` folded to ``x``, ``x * 2.0 / 2.0`` folded,
``a * b + c`` fused into one rounding, ``x ** 3`` expanded into products).
Each case is compiled from its own source, as ``ppy build`` would, and the
staged call must give what the Python body gives: the same type, the same
bits, the same exception; where the module raises its fallback flag, the
Python body answers, which is also CPython's answer.
"""

from __future__ import annotations

import functools
import math
import struct
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ppy_plugin_xla.front.arith import COMPARISONS, OPERATORS
from ppy_plugin_xla.front.calls import MATH as MATH_FUNCTIONS

from tests.plugin_xla.harness import (
    FLOAT_EDGES,
    I64_MAX,
    I64_MIN,
    INT_EDGES,
    bind_module,
    check,
    staged_without_fallback,
)

#: The one-line functions that gave another answer before (python, then ``ppy run``).
TABLE: dict[str, tuple[str, tuple[Any, ...]]] = {
    "n / 3 at 7": ("def f(n: int) -> float:\n    return n / 3", (7,)),
    "x / 3.0 at 7.0": ("def f(x: float) -> float:\n    return x / 3.0", (7.0,)),
    "x + 0.0 at -0.0": ("def f(x: float) -> float:\n    return x + 0.0", (-0.0,)),
    "x / 1e308 at inf": ("def f(x: float) -> float:\n    return x / 1e308", (math.inf,)),
    "x * 2.0 / 2.0 at 1e308": ("def f(x: float) -> float:\n    return x * 2.0 / 2.0", (1e308,)),
    "(x + 1.0) - 1.0 at 0.1": ("def f(x: float) -> float:\n    return (x + 1.0) - 1.0", (0.1,)),
    "x + 1.0 + 1.0 at 1e16": ("def f(x: float) -> float:\n    return x + 1.0 + 1.0", (1e16,)),
    "x ** 3 at 0.3": ("def f(x: float) -> float:\n    return x ** 3", (0.3,)),
    "x * y + z at (0.1, 10.0, -1.0)": (
        "def f(x: float, y: float, z: float) -> float:\n    return x * y + z",
        (0.1, 10.0, -1.0),
    ),
    "x / y / z": (
        "def f(x: float, y: float, z: float) -> float:\n    return x / y / z",
        (1.0, 3.0, 7.0),
    ),
    "x / (y / z)": (
        "def f(x: float, y: float, z: float) -> float:\n    return x / (y / z)",
        (1.0, 3.0, 7.0),
    ),
    "math.copysign(1.0, -x + y) at nan": (
        "def f(x: float, y: float) -> float:\n    return math.copysign(1.0, -x + y)",
        (math.nan, 1.0),
    ),
    "x // 3.0 near 2**63": ("def f(x: float) -> float:\n    return x // 3.0", (2.0**63 - 1024,)),
    "x * y - z": (
        "def f(x: float, y: float, z: float) -> float:\n    return x * y - z",
        (0.1, 10.0, 1.0),
    ),
    "z - x * y": (
        "def f(x: float, y: float, z: float) -> float:\n    return z - x * y",
        (0.1, 10.0, 1.0),
    ),
    "x - -0.0 at -0.0": ("def f(x: float) -> float:\n    return x - -0.0", (-0.0,)),
    "0.0 + x at -0.0": ("def f(x: float) -> float:\n    return 0.0 + x", (-0.0,)),
    "x * 0.0 at inf": ("def f(x: float) -> float:\n    return x * 0.0", (math.inf,)),
    "x * 0.0 at -1.0": ("def f(x: float) -> float:\n    return x * 0.0", (-1.0,)),
    "x - x at inf": ("def f(x: float) -> float:\n    return x - x", (math.inf,)),
    "x / x at 0.0": ("def f(x: float) -> float:\n    return x / x", (0.0,)),
    "x ** 0.5 at -inf": ("def f(x: float) -> float:\n    return x ** 0.5", (-math.inf,)),
    "x ** 2 at 0.1": ("def f(x: float) -> float:\n    return x ** 2", (0.1,)),
    "math.atan2(x, 1.0) at 1.0": (
        "def f(x: float) -> float:\n    return math.atan2(x, 1.0)",
        (1.0,),
    ),
    "math.pow(2.0, x) at -3.1511366869620723": (
        "def f(x: float) -> float:\n    return math.pow(2.0, x)",
        (-3.1511366869620723,),
    ),
}

HEADER = "import math\nfrom ppy import xla\n\n\n@xla.jit\n"


@functools.cache
def _staged(body: str) -> Any:
    return bind_module(HEADER + body + "\n")["f"]


@pytest.mark.parametrize("case", list(TABLE))
def test_the_table_gives_cpythons_answer(case: str) -> None:
    body, args = TABLE[case]
    check(_staged(body), *args)


#: Constants and operands: an int constant must be within int64 to compile.
INT64_EDGES = [v for v in INT_EDGES if I64_MIN <= v <= I64_MAX]

float_values = st.one_of(st.sampled_from(FLOAT_EDGES), st.floats(), st.floats(-1e6, 1e6))
int_values = st.one_of(
    st.sampled_from(INT64_EDGES), st.integers(-1000, 1000), st.integers(I64_MIN + 1, I64_MAX)
)
VALUES = {"float": float_values, "int": int_values}


def _normal(value: float) -> bool:
    return value == 0 or not abs(value) < 2.2250738585072014e-308


#: Constants as the source may write them: a subnormal literal keeps its
#: function Python (the build says so), so it is drawn as an operand only.
CONSTANTS = {"float": float_values.filter(_normal), "int": int_values}

#: Every operator and comparison the compiler has, and its math functions of
#: two arguments (the front's tables).
OPS = [op.symbol for op in (*OPERATORS.values(), *COMPARISONS.values())]
MATH = [name for name, function in MATH_FUNCTIONS.items() if function.arity == 2]
EXAMPLES = 25
SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def _literal(value: float | int) -> str:
    """``value`` as the source writes it."""
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "math.nan"
    if math.isinf(value):
        return "math.inf" if value > 0 else "-math.inf"
    return repr(value)


def _result(op: str, kinds: tuple[str, str]) -> str:
    if op in ("<", "<=", ">", ">=", "==", "!="):
        return "bool"
    return "float" if "float" in kinds or op == "/" else "int"


@pytest.mark.parametrize("op", OPS)
@SETTINGS
@given(data=st.data())
def test_an_operator_with_a_constant_gives_cpythons_answer(op: str, data: st.DataObject) -> None:
    kind = data.draw(st.sampled_from(["float", "int"]), "operand type")
    constant_kind = data.draw(st.sampled_from(["float", "int"]), "constant type")
    values, constants = VALUES, CONSTANTS
    if op == "**":  # Python computes int ** int exactly: keep to what it finishes quickly
        values = {**VALUES, "int": st.integers(-70, 70)}
        constants = {**CONSTANTS, "int": st.integers(-70, 70)}
    constant = _literal(data.draw(constants[constant_kind], "constant"))
    left = data.draw(st.booleans(), "constant on the left")
    expression = f"{constant} {op} x" if left else f"x {op} {constant}"
    body = f"def f(x: {kind}) -> {_result(op, (kind, constant_kind))}:\n    return {expression}"
    check(_staged(body), data.draw(values[kind], "x"))


@pytest.mark.parametrize("function", MATH)
@SETTINGS
@given(data=st.data())
def test_a_math_function_with_a_constant_gives_cpythons_answer(
    function: str, data: st.DataObject
) -> None:
    constant = _literal(data.draw(CONSTANTS["float"], "constant"))
    arguments = data.draw(st.sampled_from([f"x, {constant}", f"{constant}, x"]), "arguments")
    body = f"def f(x: float) -> float:\n    return math.{function}({arguments})"
    check(_staged(body), data.draw(float_values, "x"))


#: Shapes where a compiler is tempted to reassociate, fuse or fold.
SHAPES = [
    "x * {a} + {b}",
    "x * y + {a}",
    "{a} - x * y",
    "(x + {a}) - {a}",
    "x + {a} + {b}",
    "x * {a} / {a}",
    "x / {a} * {a}",
    "(x * {a}) * {b}",
    "x / {a} / {b}",
    "x - (x + {a})",
    "-x + {a}",
    "x ** 3 + {a}",
    "math.copysign({a}, x * y + {b})",
]


@pytest.mark.parametrize("shape", SHAPES)
@SETTINGS
@given(data=st.data())
def test_an_expression_with_constants_gives_cpythons_answer(
    shape: str, data: st.DataObject
) -> None:
    a, b = (_literal(data.draw(CONSTANTS["float"], name)) for name in ("a", "b"))
    body = f"def f(x: float, y: float) -> float:\n    return {shape.format(a=a, b=b)}"
    check(_staged(body), data.draw(float_values, "x"), data.draw(float_values, "y"))


def _bits_of(value: float) -> str:
    return struct.pack(">d", value).hex()


def _nan(bits: str) -> float:
    return float(struct.unpack(">d", bytes.fromhex(bits))[0])


#: A NaN operand, either sign, through each operator with a negation beside it:
#: x86 propagates a NaN with its sign, so CPython's result has a fixed sign,
#: and XLA and LLVM, left alone, fold the negation into the operator.
NAN_SIGNS = {
    "-x + 1.0": ("def f(x: float, y: float) -> float:\n    return -x + 1.0"),
    "(-x) * 2.0 + y": ("def f(x: float, y: float) -> float:\n    return (-x) * 2.0 + y"),
    "-x - 1.0": ("def f(x: float, y: float) -> float:\n    return -x - 1.0"),
    "(-x) / 2.0": ("def f(x: float, y: float) -> float:\n    return (-x) / 2.0"),
    "-(x * 2.0)": ("def f(x: float, y: float) -> float:\n    return -(x * 2.0)"),
    "1.0 - x": ("def f(x: float, y: float) -> float:\n    return 1.0 - x"),
    "y - x": ("def f(x: float, y: float) -> float:\n    return y - x"),
    "-x / y": ("def f(x: float, y: float) -> float:\n    return -x / y"),
}


@pytest.mark.parametrize("case", list(NAN_SIGNS))
@pytest.mark.parametrize("x", ["7ff8000000000000", "fff8000000000000", "7ff8000000000001"])
def test_a_nan_keeps_cpythons_sign_and_payload(case: str, x: str) -> None:
    staged = _staged(NAN_SIGNS[case])
    args = (_nan(x), 3.0)
    assert staged_without_fallback(staged, *args)
    assert _bits_of(staged(*args)) == _bits_of(staged.original(*args))


@pytest.mark.parametrize("op", ["+", "*"])
def test_two_nans_in_a_commutative_operator_give_one_of_them(op: str) -> None:
    """Where CPython itself varies: with a NaN on both sides of ``+`` or ``*``,
    x86 returns the NaN of the operand the C compiler put first, and the C
    compiler may put either first, so which one CPython gives depends on how
    it was built. The staged result is one of the two, bit for bit; a NaN
    made from no NaN (``inf - inf``) is the platform's own, on both paths."""
    staged = _staged(f"def f(x: float, y: float) -> float:\n    return x {op} y")
    for x, y in (
        ("7ff8000000000000", "fff8000000000000"),
        ("fff8000000000001", "7ff8000000000000"),
    ):
        given = {x, y}
        assert _bits_of(staged(_nan(x), _nan(y))) in given
        assert _bits_of(staged.original(_nan(x), _nan(y))) in given
    made = _staged("def f(x: float, y: float) -> float:\n    return x - y")
    assert _bits_of(made(math.inf, math.inf)) == _bits_of(made.original(math.inf, math.inf))
