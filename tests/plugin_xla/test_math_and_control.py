"""math functions and every control-flow form, staged against the Python body."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from ppy_plugin_xla.front.calls import MATH

from tests.plugin_xla.harness import I64_MAX, I64_MIN, bind_module, check, staged_without_fallback
from tests.plugin_xla.test_operators import floats, ints

SETTINGS = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)

#: The math functions the compiler has (its table), by their arity.
MATH_ONE = [name for name, function in MATH.items() if function.arity == 1]
MATH_TWO = [name for name, function in MATH.items() if function.arity == 2]


def _math_type(name: str) -> str:
    return MATH[name].result


MATH_SOURCE = "\n".join(
    [
        "import math",
        "from math import pi, sqrt as root",
        "from ppy import xla",
        "TWO_PI = 2 * pi",
        "",
    ]
    + [
        line
        for name in MATH_ONE
        for line in (
            "@xla.jit",
            f"def m_{name}(x: float) -> {_math_type(name)}:",
            f"    return math.{name}(x)",
            "",
            "@xla.jit",
            f"def mi_{name}(x: int) -> {_math_type(name)}:",
            f"    return math.{name}(x)",
            "",
        )
    ]
    + [
        line
        for name in MATH_TWO
        for line in (
            "@xla.jit",
            f"def m2_{name}(x: float, y: float) -> float:",
            f"    return math.{name}(x, y)",
            "",
        )
    ]
    + [
        "@xla.jit",
        "def consts(x: float) -> float:",
        "    return x * math.tau + TWO_PI - math.e + root(abs(x)) + math.inf * 0.0",
        "",
    ]
)


@pytest.fixture(scope="module")
def maths() -> dict:
    return bind_module(MATH_SOURCE)


@pytest.mark.parametrize("name", MATH_ONE)
@SETTINGS
@given(x=floats, i=ints)
@example(x=-0.0, i=0)
@example(x=math.inf, i=-1)
def test_math_function_matches_cpython(maths, name, x, i) -> None:
    check(maths[f"m_{name}"], x)
    check(maths[f"mi_{name}"], i)


@pytest.mark.parametrize("name", MATH_TWO)
@SETTINGS
@given(x=floats, y=floats)
@example(x=0.0, y=-1.0)
@example(x=-8.0, y=1 / 3)
@example(x=1e300, y=1e10)
@example(x=-2.0, y=math.inf)
def test_math_function_of_two_matches_cpython(maths, name, x, y) -> None:
    check(maths[f"m2_{name}"], x, y)


@SETTINGS
@given(x=floats)
def test_math_constants_and_imported_names(maths, x) -> None:
    check(maths["consts"], x)


def test_math_results_for_ordinary_inputs_are_compiled(maths) -> None:
    for name in MATH_ONE:
        assert staged_without_fallback(maths[f"m_{name}"], 0.75), name
    for name in MATH_TWO:
        assert staged_without_fallback(maths[f"m2_{name}"], 2.5, 1.5), name


@pytest.mark.parametrize("name", ["tan", "sqrt", "atan2", "pow"])
def test_libm_functions_match_on_a_sweep(maths, name) -> None:
    """A deterministic sweep across magnitudes, beyond what hypothesis draws:
    every tenth input is within ±1000, where a 1-ulp slip of a newer jaxlib
    (sin and cos in 0.12.1) shows first."""
    import random

    rng = random.Random(5)
    staged = maths[f"m2_{name}"] if name in MATH_TWO else maths[f"m_{name}"]
    for i in range(3000):
        if i % 10:
            x = rng.choice([-1, 1]) * 10.0 ** rng.uniform(-300, 300)
        else:
            x = rng.uniform(-1000.0, 1000.0)
        if name == "sqrt":
            x = abs(x)
        if name in MATH_TWO:
            check(staged, abs(x) if name == "pow" else x, rng.uniform(-40, 40))
        else:
            check(staged, x)


CONTROL = """
from ppy import xla

LIMIT = 50
SCALE = -2.5


@xla.jit
def collatz(n: int) -> int:
    steps = 0
    while n != 1:
        if n % 2 == 0:
            n = n // 2
        else:
            n = 3 * n + 1
        steps += 1
    return steps


@xla.jit
def classify(x: float) -> int:
    if x < -1.0:
        return -1
    elif x == 0.0:
        return 0
    elif x != x:
        return 99
    else:
        r = 2
    return r


@xla.jit
def ranges(a: int, b: int, s: int) -> int:
    total = 0
    for i in range(a, b, s):
        total += i
    for j in range(a % 7):
        total -= j
    for k in range(b, a):
        total = total * 3 % 1000003
    return total


@xla.jit
def search(n: int, target: int) -> int:
    found = -1
    for i in range(n):
        if i * i < target:
            continue
        if i > 1000:
            break
        found = i
        break
    return found


@xla.jit
def first_multiple(n: int, d: int) -> int:
    k = 0
    while True:
        k += 1
        if k > 100:
            return -1
        if (n + k) % d == 0:
            return k


@xla.jit
def nested(n: int) -> int:
    count = 0
    for i in range(n):
        j = 0
        while j < i:
            j += 1
            if (i + j) % 3 == 0:
                continue
            count += collatz(i + j + 1) % 5
            if count > 200:
                break
    return count


@xla.jit
def maybe(x: float) -> float:
    if x > 0.0:
        y = x * 2.0
    return y


@xla.jit
def swap(a: int, b: int) -> int:
    for _ in range(5):
        a, b = b, a + b
    return a


@xla.jit
def guarded(x: float, y: float) -> bool:
    return y != 0.0 and x / y > 1.0 or x < 0.0


@xla.jit
def choose(x: int, y: int) -> int:
    return x // y if y != 0 else LIMIT


@xla.jit
def series(n: int) -> float:
    total: float = 0.0
    for k in range(n):
        total += (-1.0) ** k / (2 * k + 1)
    return 4.0 * total * SCALE


@xla.jit
def prev_value(n: int) -> int:
    acc = 0
    for i in range(n):
        if i > 0:
            acc += i - prev
        prev = i * i % 7
    return acc


@xla.jit
def falls_off(x: int) -> int:
    if x > 0:
        return x
"""


@pytest.fixture(scope="module")
def control() -> dict:
    return bind_module(CONTROL)


small = st.integers(-60, 60)


@SETTINGS
@given(n=st.one_of(st.integers(1, 10**6), st.sampled_from([2**62 + 1, 2**61 - 1, 2**40 + 7])))
def test_collatz_while_loop(control, n) -> None:
    check(control["collatz"], n)


@SETTINGS
@given(x=floats)
def test_if_elif_else_and_early_return(control, x) -> None:
    check(control["classify"], x)
    check(control["maybe"], x)


@SETTINGS
@given(a=small, b=small, s=st.one_of(small, st.sampled_from([0, I64_MAX, I64_MIN, 2**62])))
@example(a=I64_MAX - 3, b=I64_MAX, s=2)
@example(a=0, b=I64_MAX, s=2**62)
def test_range_loops(control, a, b, s) -> None:
    if abs(b - a) // max(abs(s), 1) < 10**5:
        check(control["ranges"], a, b, s)


@SETTINGS
@given(n=small, t=st.integers(-100, 5000), d=st.integers(-9, 9))
def test_break_continue_and_returns_in_loops(control, n, t, d) -> None:
    check(control["search"], n, t)
    check(control["first_multiple"], n, d)
    check(control["nested"], n % 25)
    check(control["swap"], n, t)
    check(control["prev_value"], n)


@SETTINGS
@given(x=floats, y=floats, i=ints, j=st.integers(-3, 3))
def test_short_circuit_conditional_and_missing_return(control, x, y, i, j) -> None:
    check(control["guarded"], x, y)
    check(control["choose"], i, j)
    check(control["falls_off"], j)


def test_series_and_typed_locals(control) -> None:
    for n in (0, 1, 2, 1000):
        check(control["series"], n)
    assert staged_without_fallback(control["series"], 1000)
    assert staged_without_fallback(control["nested"], 20)
    assert staged_without_fallback(control["collatz"], 27)
    assert not staged_without_fallback(control["maybe"], -1.0)  # UnboundLocalError: Python's
