"""The compiler's shape: two passes over a typed IR, one lowering rule per op.

The front writes ops of ``ir.OPS``; the lowering writes each through the rule
registered for it. A rule no operator test reaches would be CPython's
semantics unchecked, so the sources the operator, math and exactness tests
compile must between them use every op. And no class grows back into the
several hundred lines that held the whole lowering before the passes.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import ppy_plugin_xla
from ppy_plugin_xla import ir
from ppy_plugin_xla.front import trace
from ppy_plugin_xla.lowering import RULES
from ppy_plugin_xla.scope import read_scope

from tests.plugin_xla import test_exactness, test_math_and_control, test_operators

#: The most lines a class of the plugin may have.
MAX_CLASS_LINES = 250


def _classes(package: Path) -> list[tuple[int, str]]:
    found = []
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef):
                assert node.end_lineno is not None
                lines = node.end_lineno - node.lineno + 1
                found.append((lines, f"{path.relative_to(package)}:{node.lineno} {node.name}"))
    return found


def test_no_class_in_the_plugin_is_over_250_lines() -> None:
    package = Path(ppy_plugin_xla.__file__).parent
    classes = _classes(package)
    assert classes, package
    too_long = sorted((n, where) for n, where in classes if n > MAX_CLASS_LINES)
    assert not too_long, f"classes over {MAX_CLASS_LINES} lines: {too_long}"


def test_every_op_has_exactly_one_lowering_rule() -> None:
    assert set(RULES) == set(ir.OPS)


def _ops(source: str) -> set[str]:
    source = textwrap.dedent(source)
    names = {
        node.name
        for node in ast.parse(source).body
        if isinstance(node, ast.FunctionDef)
        and any(ast.unparse(d) == "xla.jit" for d in node.decorator_list)
    }
    scope = read_scope(source, names)
    return set().union(*(ir.ops_used(trace(scope, name).function) for name in sorted(names)))


def test_every_lowering_rule_is_exercised_by_the_operator_tests() -> None:
    """The operator, math and control-flow tests compile these sources and run
    them against CPython: between them they write every op there is."""
    sources = [
        test_operators.binary_source(),
        test_operators.unary_source(),
        test_math_and_control.MATH_SOURCE,
        test_math_and_control.CONTROL,
        *(test_exactness.HEADER + body for body, _args in test_exactness.TABLE.values()),
    ]
    used = set().union(*(_ops(source) for source in sources))
    assert "while" in used
    assert sorted(set(RULES) - used) == [], "rules no operator test reaches"


def test_the_ir_reads_as_text() -> None:
    source = (
        "from ppy import xla\n\n@xla.jit\ndef f(n: int) -> int:\n"
        "    while n > 1:\n        n = n // 2\n    return n\n"
    )
    shown = ir.show(trace(read_scope(source, {"f"}), "f").function)
    assert shown.startswith("f(%0:int):\n"), shown
    assert " = while(" in shown and "int.floordiv(" in shown, shown
    assert "cond(" in shown and "body(" in shown, shown
