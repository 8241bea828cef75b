"""Compile a module's @xla.jit functions and bind them as ``ppy run`` would.

The functions go through the real compiler (``ppy_plugin_xla``), the real
entry records, and the real runtime (``ppy_runtime_pjrt.scalar``), which
compiles each StableHLO module with XLA on the CPU once; hypothesis then runs
many inputs through the same executable.
"""

from __future__ import annotations

import math
import struct
import textwrap
from collections.abc import Callable
from typing import Any

from ppy_plugin_xla.lower import compile_function
from ppy_plugin_xla.plugin import entry_for
from ppy_plugin_xla.scope import read_scope
from ppy_runtime_pjrt.scalar import ScalarRuntime, StagedScalar

I64_MIN, I64_MAX = -(2**63), 2**63 - 1

#: Operands where float arithmetic goes wrong first: zeros of both signs,
#: subnormals, the largest floats, infinities, nan, 2**53 + 1 and 2**63.
FLOAT_EDGES = [
    0.0,
    -0.0,
    1.0,
    -1.0,
    0.5,
    -0.5,
    2.0,
    -2.0,
    3.0,
    10.0,
    0.1,
    1e308,
    1e-300,
    -1e-300,
    5e-324,
    2.2250738585072014e-308,
    1.7976931348623157e308,
    -1.7976931348623157e308,
    math.inf,
    -math.inf,
    math.nan,
    9007199254740993.0,
    2.0**63,
    -(2.0**63),
    1e16,
]
#: ... and ints: int64's edges, 2**53 + 1, and ints beyond int64.
INT_EDGES = [
    0,
    1,
    -1,
    2,
    -2,
    3,
    -3,
    7,
    -7,
    I64_MIN,
    I64_MAX,
    I64_MIN + 1,
    I64_MAX - 1,
    2**53,
    2**53 + 1,
    -(2**53) - 1,
    2**62,
    2**63,
    -(2**63) - 1,
    10**30,
    -(10**30),
]


def bind_module(source: str) -> dict[str, StagedScalar]:
    """Every @xla.jit function of ``source``, staged, with the original as fallback."""
    source = textwrap.dedent(source)
    namespace: dict[str, Any] = {}
    exec(compile(source, "<xla-test>", "exec"), namespace)
    names = {
        name
        for name, value in namespace.items()
        if callable(value)
        and getattr(value, "__module__", None) is None
        and f"@xla.jit\ndef {name}(" in source
    }
    scope = read_scope(source, names)
    runtime = ScalarRuntime()
    staged: dict[str, StagedScalar] = {}
    for name in sorted(names):
        entry = entry_for("m", compile_function(scope, name))
        bound = runtime.bind(entry, namespace[name])
        assert isinstance(bound, StagedScalar)
        staged[name] = bound
    for name, bound in staged.items():  # calls between functions go to the staged ones
        namespace[name] = bound
    return staged


def outcome(function: Callable[..., Any], *args: Any) -> tuple[str, Any]:
    try:
        return ("value", function(*args))
    except (ArithmeticError, ValueError, TypeError, UnboundLocalError) as error:
        return ("raises", type(error))


def _bits(value: float) -> int:
    return struct.unpack("<q", struct.pack("<d", value))[0]


def same(left: tuple[str, Any], right: tuple[str, Any]) -> bool:
    """Equal as a user can tell: kind, type, value, sign of zero, NaN-ness."""
    if left[0] != right[0] or type(left[1]) is not type(right[1]):
        return False
    a, b = left[1], right[1]
    if isinstance(a, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return _bits(a) == _bits(b)
    return bool(a == b)


def check(staged: StagedScalar, *args: Any) -> None:
    """The staged function and the Python body agree on ``args``.

    Also calls the executable directly: when its flag is clear its result is
    what the user gets, so it must be CPython's.
    """
    want = outcome(staged.original, *args)
    got = outcome(staged, *args)
    assert same(got, want), f"{staged.entry.qualname}{args}: staged {got}, python {want}"
    if staged._guard(args) is None:
        executable = staged._load()
        result, flag = executable.call(args)
        if not flag:
            direct = (
                "value",
                {"float": float, "int": int, "bool": bool}[staged.result_type](result),
            )
            assert same(direct, want), (
                f"{staged.entry.qualname}{args}: module gave {direct} without its flag, "
                f"python {want}"
            )


def staged_without_fallback(staged: StagedScalar, *args: Any) -> bool:
    """Whether ``args`` run on the compiled path (guard passed and flag clear)."""
    if staged._guard(args) is not None:
        return False
    return not staged._load().call(args)[1]
