"""What the command prints for people (``ppy.cli.report``): build lines that
fit a terminal and are whole elsewhere, the plugin table, and what ``ppy
explain`` says when it finds nothing."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from ppy.cli.report import SIGNATURE_WIDTH, build_lines, plugin_lines
from ppy.commands.explain import explain
from ppy.decision import Decision, Outcome
from ppy.errors import UsageError
from ppy.registry import Installed, Registry


def _decision(name: str, signature: str, reason: str = "exported for cpu") -> Decision:
    return Decision(
        "model", name, "model.ppy:1", Outcome.STAGED, "staged", reason, None, "jax",
        "jax.export", signature,
    )  # fmt: skip


#: A pytree of a thousand leaves, and a small function beside it.
LEAVES = ", ".join(f"p{i}: float32[4]" for i in range(1000))
BIG = f"big({LEAVES}, x: float32[B,4]) -> float32[B,3]"
RECORDED = (
    "step(w1: float32[2,16], b1: float32[16], w2: float32[16,3], b2: float32[3], "
    "x: float32[B,2], labels: int32[B]) [recorded: 400 calls in 1 run]"
)
#: A function returning a tuple of many outputs, as a training step does.
OUTPUTS = "train_step(params['w']: float32[4,1], x: float32[B,4]) -> ("
OUTPUTS += ", ".join("float32[4,1]" for _ in range(30)) + ")"


def test_a_build_line_not_on_a_terminal_is_whole_and_a_long_one_pads_no_other() -> None:
    """Piped, in a test or in CI, the line is whole; a pytree of a thousand
    leaves does not pad every other line of the table to its width."""
    big, small = build_lines(
        [_decision("big", BIG), _decision("small", "small(x: float32[4])")], Registry()
    )
    assert big.endswith(f"  {BIG}  exported for cpu")
    assert len(small) < SIGNATURE_WIDTH + 60 and "small(x: float32[4])" in small


@pytest.mark.parametrize("width", [100, 130, 160])
def test_on_a_terminal_a_build_line_fits_its_width_and_says_where_the_whole_one_is(
    width: int,
) -> None:
    """The signature is shortened between its parameters: the first ones, the
    last, the return type and where a recording described it stay."""
    decisions = [_decision("big", BIG), _decision("step", RECORDED), _decision("f", "f(x: int)")]
    *rows, note = build_lines(decisions, Registry(), width=width)
    assert all(len(row) <= width for row in rows), rows
    big, step, small = rows
    assert "big(" in big and "..., x: float32[B,4]) -> float32[B,3]" in big
    assert ("big(p0: float32[4], p1: float32[4]" in big) is (width >= 130)
    assert step.split("  exported")[0].rstrip().endswith(") [recorded: 400 calls in 1 run]")
    assert "f(x: int)" in small
    assert "ppy explain NAME" in note and f"{width} columns" in note


def test_on_a_terminal_a_long_tuple_of_outputs_is_shortened_too() -> None:
    (row, _note) = build_lines([_decision("train_step", OUTPUTS)], Registry(), width=120)
    assert len(row) <= 120 and "train_step(params['w']: float32[4,1]" in row
    assert "-> (...)" in row


def test_on_a_wide_terminal_nothing_is_shortened_and_nothing_is_said() -> None:
    lines = list(build_lines([_decision("step", RECORDED)], Registry(), width=400))
    assert len(lines) == 1 and RECORDED in lines[0]


class _Stager:
    """What ``ppy plugins`` reads of a loaded plugin."""

    def __init__(self, kind: str, decorators: tuple[str, ...]) -> None:
        self.kind = kind
        self.decorators = decorators


def _installed(group: str, name: str, distribution: str, obj: Any) -> Installed:
    return Installed(group, name, f"{name}:Target", distribution, "0.1.0", obj)


def test_the_plugin_table_fits_its_columns_to_long_names_and_kinds() -> None:
    stager = _Stager("a_rather_long_vendor.kind_name", ("vendor.jit",))
    plugins = Registry(
        (
            _installed("ppy.plugins", "jax", "ppy-plugin-jax", _Stager("jax.export", ("jax.jit",))),
            _installed("ppy.plugins", "a_rather_long_vendor", "ppy-plugin-long-vendor", stager),
        )
    )
    runtimes = Registry(
        (
            _installed("ppy.runtimes", "jax.export", "ppy-runtime-pjrt", object()),
            _installed("ppy.runtimes", "a_rather_long_vendor.kind_name", "vendor-rt", object()),
        )
    )
    lines = [ln for ln in plugin_lines(plugins, runtimes) if ln.startswith("  ")]
    # Every row's third column ("loaded") starts at the same place.
    assert len({ln.index(" loaded") for ln in lines}) == 1, lines
    assert all("0.1.0 " in ln for ln in lines)


def test_explain_in_a_project_with_no_candidate_says_so_and_why(
    make_project: Callable[..., Path],
) -> None:
    root = make_project({"model.ppy": "def f(x):\n    return x\n"})
    with pytest.raises(UsageError) as raised:
        explain("nosuch", root)
    message = str(raised.value)
    assert "none" not in message.split("remedy:")[-1].split(), message
    assert "no candidate functions" in message and "1 .ppy file" in message
    assert "@jax.jit" in message


def test_explain_in_a_folder_with_no_ppy_file_says_so(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "empty"\n')
    with pytest.raises(UsageError) as raised:
        explain("nosuch", tmp_path)
    assert "no .ppy files" in str(raised.value), raised.value


def test_explain_of_an_unknown_name_lists_the_candidates(
    make_project: Callable[..., Path],
) -> None:
    source = "import jax\n\n@jax.jit\ndef score(x):\n    return x\n"
    root = make_project({"model.ppy": source})
    with pytest.raises(UsageError) as raised:
        explain("nosuch", root)
    assert "candidates are: score" in str(raised.value)
