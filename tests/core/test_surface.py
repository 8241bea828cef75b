"""``ppy.plugin`` and ``ppy.runtime``: everything a plugin or runtime author imports."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ppy.plugin
import ppy.runtime
import pytest
from ppy.artifact.entry import Entry
from ppy.config import Setting, validate_table
from ppy.decision import Check
from ppy.discovery.records import FunctionInfo, ModuleInfo
from ppy.errors import ConfigError
from ppy.spec import TensorSpec

PLUGIN_SURFACE = {
    "Check": Check,
    "ConfigError": ConfigError,
    "Entry": Entry,
    "FunctionInfo": FunctionInfo,
    "ModuleInfo": ModuleInfo,
    "Setting": Setting,
    "TensorSpec": TensorSpec,
    "validate_table": validate_table,
}


@pytest.mark.parametrize("name", sorted(PLUGIN_SURFACE))
def test_ppy_plugin_gives_each_name_a_plugin_needs(name: str) -> None:
    assert getattr(ppy.plugin, name) is PLUGIN_SURFACE[name]
    assert name in ppy.plugin.__all__


def test_ppy_runtime_gives_each_name_a_runtime_needs() -> None:
    assert ppy.runtime.Entry is Entry and ppy.runtime.TensorSpec is TensorSpec
    assert ppy.runtime.ORIGINAL == "__ppy_original__"
    assert {"ORIGINAL", "NotBound", "Runtime", "ManagedRuntime"} <= set(ppy.runtime.__all__)


def test_ppy_plugin_loads_the_records_only_when_a_name_is_used() -> None:
    """``ppy run`` imports ppy.plugin at every start and needs none of them."""
    code = (
        "import sys, ppy.plugin\n"
        "lazy = ('ppy.discovery.records', 'ppy.config', 'ppy.decision')\n"
        "print([m for m in lazy if m in sys.modules])\n"
        "from ppy.plugin import FunctionInfo\n"
        "print('ppy.discovery.records' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split("\n")[:2] == ["[]", "True"]


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="has no attribute 'Stager'"):
        _ = ppy.plugin.Stager  # type: ignore[attr-defined]


class _Bare:
    def bind(self, entry: Entry, original: Callable[..., Any]) -> Callable[..., Any]:
        return original


class _Managed(_Bare):
    def __init__(self) -> None:
        self.calls: list[str] = []

    def start(self) -> None:
        self.calls.append("start")

    def close(self) -> None:
        self.calls.append("close")


def test_only_a_runtime_with_start_and_close_is_managed() -> None:
    assert isinstance(_Managed(), ppy.runtime.ManagedRuntime)
    assert not isinstance(_Bare(), ppy.runtime.ManagedRuntime)
    assert isinstance(_Bare(), ppy.runtime.Runtime)


@pytest.mark.parametrize(
    ("source", "status"), [("print('ran')\n", 0), ("raise SystemExit(3)\n", 3)]
)
def test_ppy_run_starts_and_closes_a_managed_runtime_around_the_program(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], source: str, status: int
) -> None:
    from ppy.run.program import run_program

    managed = _Managed()
    program = tmp_path / "p.py"
    program.write_text(source)
    runtimes = {"m": managed, "b": _Bare()}
    assert run_program(program, [], artifact=None, runtimes=runtimes, root=tmp_path) == status
    assert managed.calls == ["start", "close"]
    assert capsys.readouterr().out == ("ran\n" if status == 0 else "")
