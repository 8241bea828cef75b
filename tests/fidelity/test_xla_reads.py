"""What an ``@xla.jit`` body reads from its module: a constant, a compiled
function it calls, a builtin, ``math``. The program rebinds each from outside
the function's own statements, and python reads the new binding."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import PERMISSIONS
from tests.support.differential import differential, project

FORCED = PERMISSIONS + "\n[tool.ppy.plugins.xla]\nforce-staging = true\n"

STEPS = """\
import math

from ppy import xla

STEP = 3
SCALE = 0.5


@xla.jit
def walk(x: int) -> int:
    for _ in range(STEP):
        x = x + 4
    return x


@xla.jit
def shift(x: float) -> float:
    return x + 1.0


@xla.jit
def scaled(x: float) -> float:
    return abs(shift(x)) * SCALE + math.sqrt(4.0)
"""

MODEL = """\
import sys

import ppy  # noqa: F401  (lets python import steps.ppy)
import steps

print(steps.walk(0), steps.scaled(-3.0))
rebound = sys.argv[1:]
if "attribute" in rebound:
    steps.STEP = 10
    steps.SCALE = 2.0
if "namespace" in rebound:
    vars(steps)["STEP"] = 7
    setattr(steps, "shift", lambda x: x - 1.0)
if "builtin" in rebound:
    steps.abs = lambda x: -x
if "math" in rebound:
    steps.math = type("M", (), {"sqrt": staticmethod(lambda x: 0.0)})
if "same" in rebound:
    steps.STEP = int("3")  # an equal value, another object
print(steps.walk(0), steps.scaled(-3.0))
"""


def test_names_an_xla_body_reads_are_compared_when_it_runs(tmp_path: Path) -> None:
    root = project(tmp_path / "p", {"steps.ppy": STEPS, "model.ppy": MODEL}, FORCED)
    unchanged = differential(root, cache=tmp_path / "c")
    assert unchanged.bound() == {"walk", "shift", "scaled"} and not unchanged.fallbacks()
    assert unchanged.staged_calls("walk") == 2
    for rebound, names in (
        ("attribute", {"STEP", "SCALE"}),
        ("namespace", {"STEP", "shift"}),
        ("builtin", {"abs"}),
        ("math", {"math"}),
    ):
        compared = differential(root, rebound, cache=tmp_path / "c", build=False)
        reasons = " ".join(str(f["reason"]) for f in compared.fallbacks())
        assert {f["category"] for f in compared.fallbacks()} == {"captured"}, rebound
        assert all(f"{name} is " in reasons for name in names), (rebound, reasons)
    same = differential(root, "same", cache=tmp_path / "c", build=False)
    assert not same.fallbacks() and same.staged_calls("walk") == 2
