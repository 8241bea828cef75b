"""Every staged operator against CPython on generated inputs.

Each function is compiled once (module-scoped fixture); hypothesis then sends
negative operands, zero, -0.0, nan, inf, subnormals, int64 edges and ints
beyond int64 through the same executable, and the staged call must give what
the Python body gives: the same type, the same bits, the same exception.
"""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from ppy_plugin_xla.front.arith import COMPARISONS, OPERATORS

from tests.plugin_xla.harness import (
    FLOAT_EDGES,
    I64_MAX,
    I64_MIN,
    INT_EDGES,
    bind_module,
    check,
    staged_without_fallback,
)

SETTINGS = settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)

floats = st.one_of(st.sampled_from(FLOAT_EDGES), st.floats(), st.floats(-1e6, 1e6))
ints = st.one_of(
    st.sampled_from(INT_EDGES),
    st.integers(-1000, 1000),
    st.integers(I64_MIN, I64_MAX),
    st.integers(-(2**70), 2**70),
)
bools = st.booleans()
VALUES = {"float": floats, "int": ints, "bool": bools}
TYPES = ("float", "int", "bool")
#: The operators and comparisons the compiler has (its tables), by symbol.
OPS = [op.symbol for op in OPERATORS.values()]
CMPS = [op.symbol for op in COMPARISONS.values()]
#: A function's name for each: ``add``, ``floordiv``, ``lt``, ...
NAMES = {op.symbol: op.name.lower() for op in (*OPERATORS.values(), *COMPARISONS.values())}


def _result_type(op: str, a: str, b: str) -> str:
    if op in CMPS:
        return "bool"
    if "float" in (a, b) or op == "/":
        return "float"
    return "int"


def _name(op: str) -> str:
    return NAMES[op]


PAIRS = [
    (op, a, b)
    for op in OPS + CMPS
    for a, b in itertools.product(TYPES, TYPES)
    if not (a == b == "bool" and op not in CMPS and op not in ("+", "*", "//"))
]


def binary_source() -> str:
    """One function per operator and pair of operand types."""
    lines = ["from ppy import xla", ""]
    for op, a, b in PAIRS:
        lines += [
            "@xla.jit",
            f"def {_name(op)}_{a}_{b}(x: {a}, y: {b}) -> {_result_type(op, a, b)}:",
            f"    return x {op} y",
            "",
        ]
    return "\n".join(lines)


@pytest.fixture(scope="module")
def binary() -> dict:
    return bind_module(binary_source())


def _exponents(kind: str) -> st.SearchStrategy:
    # Python computes int ** int exactly, so keep exponents that it finishes quickly
    if kind == "int":
        return st.one_of(st.integers(-5, 70), st.sampled_from([0, 1, -1, 63, 64]))
    if kind == "float":
        return st.one_of(floats.filter(lambda v: not abs(v) > 1e4), st.sampled_from(FLOAT_EDGES))
    return bools


@pytest.mark.parametrize("op,a,b", PAIRS, ids=[f"{_name(o)}_{a}_{b}" for o, a, b in PAIRS])
@SETTINGS
@given(data=st.data())
def test_binary_operator_matches_cpython(binary, op, a, b, data) -> None:
    x = data.draw(VALUES[a] if not (op == "**" and a == "int") else st.integers(-(2**40), 2**40))
    y = data.draw(_exponents(b) if op == "**" else VALUES[b])
    check(binary[f"{_name(op)}_{a}_{b}"], x, y)


def test_ordinary_operands_stay_on_the_compiled_path(binary) -> None:
    samples = {"float": 3.25, "int": 7, "bool": True}
    for op, a, b in PAIRS:
        staged = binary[f"{_name(op)}_{a}_{b}"]
        assert staged_without_fallback(staged, samples[a], samples[b]), staged.entry.qualname


UNARY = {
    "neg": "-x",
    "pos": "+x",
    "not": "not x",
    "abs": "abs(x)",
    "float": "float(x)",
    "int": "int(x)",
    "bool": "bool(x)",
}


def _unary_type(op: str, kind: str) -> str:
    if op in ("not", "bool"):
        return "bool"
    if op == "float":
        return "float"
    if op == "int":
        return "int"
    return "int" if kind == "bool" else kind


def unary_source() -> str:
    """One function per unary operator or conversion and operand type, then
    ``min``/``max`` and chained comparisons."""
    lines = ["from ppy import xla", ""]
    for op, text in UNARY.items():
        for kind in TYPES:
            lines += [
                "@xla.jit",
                f"def {op}_{kind}(x: {kind}) -> {_unary_type(op, kind)}:",
                f"    return {text}",
                "",
            ]
    lines += [
        "@xla.jit",
        "def min3(x: float, y: float, z: float) -> float:",
        "    return min(x, y, z)",
        "",
        "@xla.jit",
        "def max3(x: float, y: float, z: float) -> float:",
        "    return max(x, y, z)",
        "",
        "@xla.jit",
        "def imin(x: int, y: int) -> int:",
        "    return min(x, y)",
        "",
        "@xla.jit",
        "def imax(x: int, y: int) -> int:",
        "    return max(y, x)",
        "",
        "@xla.jit",
        "def bmax(x: bool, y: bool) -> bool:",
        "    return max(x, y)",
        "",
        "@xla.jit",
        "def chain(x: float, y: int, z: float) -> bool:",
        "    return x < y <= z",
        "",
        "@xla.jit",
        "def chain2(x: int, y: float, z: int) -> bool:",
        "    return x == y != z > 0",
        "",
    ]
    return "\n".join(lines)


@pytest.fixture(scope="module")
def unary() -> dict:
    return bind_module(unary_source())


@pytest.mark.parametrize("op", list(UNARY))
@pytest.mark.parametrize("kind", TYPES)
@SETTINGS
@given(data=st.data())
def test_unary_and_conversions_match_cpython(unary, op, kind, data) -> None:
    check(unary[f"{op}_{kind}"], data.draw(VALUES[kind]))


@SETTINGS
@given(x=floats, y=floats, z=floats, i=ints, j=ints)
@example(x=0.0, y=-0.0, z=math.nan, i=0, j=0)
@example(x=math.nan, y=1.0, z=-0.0, i=I64_MAX, j=I64_MIN)
def test_min_max_and_chained_comparisons_match_cpython(unary, x, y, z, i, j) -> None:
    check(unary["min3"], x, y, z)
    check(unary["max3"], x, y, z)
    check(unary["imin"], i, j)
    check(unary["imax"], i, j)
    check(unary["bmax"], i > 0, j > 0)
    check(unary["chain"], x, i, z)
    check(unary["chain2"], i, x, j)
