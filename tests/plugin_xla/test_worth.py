"""``not-worth-staging``: a function whose call does too little work to pay for
a PJRT dispatch stays Python, unless the project forces staging."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from ppy.discovery.module import discover_source
from ppy_plugin_xla.plugin import XlaScalarPlugin
from ppy_plugin_xla.worth import STAGED_CALL_US

HEADER = "from ppy import xla\n\n"

#: name -> (source, whether staging pays)
FUNCTIONS = {
    "no_loop": ("def f(x: float) -> float:\n    return x * 2.0 + 1.0\n", False),
    "small_range": (
        "def f(n: int) -> int:\n    t = 0\n    for i in range(10):\n        t += i * n\n"
        "    return t\n",
        False,
    ),
    "nested_small_ranges": (
        "def f(n: int) -> int:\n    t = 0\n    for i in range(20):\n        for j in range(20):\n"
        "            t += i * j * n\n    return t\n",
        False,
    ),
    "nested_ranges_that_add_up": (
        "def f(n: int) -> int:\n    t = 0\n    for i in range(100):\n        for j in range(100):\n"
        "            t += i * j * n\n    return t\n",
        True,
    ),
    "range_of_a_parameter": (
        "def f(n: int) -> int:\n    t = 0\n    for i in range(n):\n        t += i\n    return t\n",
        True,
    ),
    "while": (
        "def f(n: int) -> int:\n    while n > 1:\n        n = n // 2\n    return n\n",
        True,
    ),
}


def _checks(source: str, settings: dict[str, object] | None = None):
    module = discover_source(HEADER + source, module="m", path="m.ppy")
    function = next(f for f in module.functions if f.qualname == "f")
    plugin = XlaScalarPlugin()
    return plugin.check(function, module, plugin.validate_settings(settings or {}, "p"))


@pytest.mark.parametrize("name", FUNCTIONS)
def test_staging_pays_only_for_a_loop_that_does_work(name: str) -> None:
    source, pays = FUNCTIONS[name]
    checks = _checks("@xla.jit\n" + source)
    assert [c.rule for c in checks] == ["xla-compilable", "not-worth-staging"]
    worth = checks[1]
    assert worth.passed is pays, worth
    if not pays:
        assert f"about {STAGED_CALL_US} µs" in worth.detail
        assert "force-staging = true" in (worth.remedy or "")


def test_a_callee_with_a_loop_makes_its_caller_pay() -> None:
    source = (
        "@xla.jit\ndef g(n: int) -> int:\n    while n > 1:\n        n -= 2\n    return n\n\n"
        "@xla.jit\ndef f(n: int) -> int:\n    return g(n) + 1\n"
    )
    assert all(check.passed for check in _checks(source))


def test_force_staging_stages_a_function_without_a_loop() -> None:
    source, _ = FUNCTIONS["no_loop"]
    checks = _checks("@xla.jit\n" + source, {"force-staging": True})
    assert all(check.passed for check in checks)
    assert "force-staging = true" in checks[1].detail


MODEL = """\
from ppy import xla


@xla.jit
def scale(x: float) -> float:
    return x * 2.5 - 0.1


@xla.jit
def halvings(n: int) -> int:
    steps = 0
    while n > 1:
        n = n // 2
        steps += 1
    return steps


print(scale(3.0), halvings(1000))
"""


@pytest.mark.parametrize("force", [False, True], ids=["default", "forced"])
def test_a_built_project_keeps_small_functions_python_unless_forced(
    force: bool, tmp_path: Path, ppy
) -> None:
    table = "\n[tool.ppy.plugins.xla]\nforce-staging = true\n" if force else ""
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "worth"\n' + table)
    (tmp_path / "model.ppy").write_text(MODEL)
    built = ppy("build", cwd=tmp_path)
    assert built.returncode == 0, built.stderr
    scale_line = next(line for line in built.stdout.splitlines() if " scale " in line)
    if force:
        assert "compiled" in scale_line, built.stdout
    else:
        assert "stays" in scale_line and "has no loop" in scale_line, built.stdout
        assert f"about {STAGED_CALL_US} µs" in scale_line
    plain = subprocess.run(
        [sys.executable, "model.ppy"], cwd=tmp_path, capture_output=True, text=True, check=True
    )
    run = ppy("run", "-v", "model.ppy", cwd=tmp_path)
    assert (run.returncode, run.stdout) == (0, plain.stdout), run.stderr
    calls = [line for line in run.stderr.splitlines() if "run.call" in line]
    staged = {
        name for name in ("scale", "halvings") if any(name in c and "staged" in c for c in calls)
    }
    assert staged == ({"scale", "halvings"} if force else {"halvings"}), textwrap.indent(
        "\n".join(calls), "  "
    )
