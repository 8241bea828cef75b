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
from ppy import cache, log, spec
from ppy.annotations import format_like_axes
from ppy.artifact.entry import Entry
from ppy.config import Setting, validate_table
from ppy.decision import Check
from ppy.discovery.module import discover_module
from ppy.discovery.records import ClassInfo, FunctionInfo, ModuleInfo, Parameter
from ppy.errors import ConfigError

PLUGIN_SURFACE = {
    "AXIS_TYPES": spec.AXIS_TYPES,
    "Axis": spec.Axis,
    "Check": Check,
    "ClassInfo": ClassInfo,
    "ConfigError": ConfigError,
    "Entry": Entry,
    "FunctionInfo": FunctionInfo,
    "MeshSpec": spec.MeshSpec,
    "ModuleInfo": ModuleInfo,
    "Parameter": Parameter,
    "Setting": Setting,
    "TensorSpec": spec.TensorSpec,
    "discover_module": discover_module,
    "format_like_axes": format_like_axes,
    "validate_table": validate_table,
}

#: What a runtime needs outside a started run: the entry's records, the
#: logger, the executable cache.
RUNTIME_SURFACE = {
    "Axis": spec.Axis,
    "Entry": Entry,
    "ExecutableCache": cache.ExecutableCache,
    "Held": log.Held,
    "MeshSpec": spec.MeshSpec,
    "TensorSpec": spec.TensorSpec,
    "WEAK_SCALARS": spec.WEAK_SCALARS,
    "executable_key": cache.executable_key,
    "get_logger": log.get_logger,
    "holding": log.holding,
    "show": log.show,
    "verbose": log.verbose,
}


@pytest.mark.parametrize("name", sorted(PLUGIN_SURFACE))
def test_ppy_plugin_gives_each_name_a_plugin_needs(name: str) -> None:
    assert getattr(ppy.plugin, name) is PLUGIN_SURFACE[name]
    assert name in ppy.plugin.__all__


@pytest.mark.parametrize("name", sorted(RUNTIME_SURFACE))
def test_ppy_runtime_gives_each_name_a_runtime_needs(name: str) -> None:
    assert getattr(ppy.runtime, name) is RUNTIME_SURFACE[name]
    assert name in ppy.runtime.__all__


def test_ppy_runtime_names_its_own_contract() -> None:
    assert ppy.runtime.ORIGINAL == "__ppy_original__"
    assert {"ORIGINAL", "NotBound", "Runtime", "ManagedRuntime", "RunContext", "CONTRACT"} <= set(
        ppy.runtime.__all__
    )


@pytest.mark.parametrize("surface", [ppy.plugin, ppy.runtime])
def test_each_contract_has_a_major_and_minor_version(surface: Any) -> None:
    contract = surface.CONTRACT
    assert isinstance(contract, tuple) and len(contract) == 2
    assert all(type(part) is int and part >= 0 for part in contract)
    assert "CONTRACT" in surface.__all__


@pytest.mark.parametrize(
    ("module", "lazy", "name", "loads"),
    [
        (
            "ppy.plugin",
            ("ppy.discovery.records", "ppy.config", "ppy.decision", "ppy.discovery.module"),
            "FunctionInfo",
            "ppy.discovery.records",
        ),
        (
            "ppy.runtime",
            ("ppy.log", "ppy.cache", "ppy.artifact.entry"),
            "get_logger",
            "ppy.log",
        ),
    ],
)
def test_the_surfaces_load_what_they_re_export_only_when_a_name_is_used(
    module: str, lazy: tuple[str, ...], name: str, loads: str
) -> None:
    """``ppy run`` imports ppy.plugin and ppy.runtime at every start and needs
    none of their re-exports until a runtime asks for one."""
    code = (
        f"import sys, {module}\n"
        f"print([m for m in {lazy!r} if m in sys.modules])\n"
        f"from {module} import {name}\n"
        f"print({loads!r} in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split("\n")[:2] == ["[]", "True"]


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="has no attribute 'Stager'"):
        _ = ppy.plugin.Stager  # type: ignore[attr-defined]


class _Bare:
    contract = (1, 0)

    def bind(self, entry: Entry, original: Callable[..., Any]) -> Callable[..., Any]:
        return original


class _Managed(_Bare):
    def __init__(self, waits_for: str | None = None) -> None:
        self.calls: list[str] = []
        self.waits_for = waits_for

    def start(self, run: ppy.runtime.RunContext) -> None:
        self.calls.append("start")
        if self.waits_for is not None:
            name = self.waits_for
            run.after_import(name, lambda: self.calls.append(f"{name} imported"))

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


def test_a_managed_runtime_waits_for_the_programs_import_through_the_run_it_is_given(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``start`` is given the run's services (``RunContext``): its after-import
    hook calls back once the program has imported the module, not before."""
    from ppy.run.program import run_program

    managed = _Managed(waits_for="helper_for_surface")
    (tmp_path / "helper_for_surface.py").write_text("print('helper runs')\n")
    program = tmp_path / "p.py"
    program.write_text("print('before')\nimport helper_for_surface\nprint('after')\n")
    try:
        status = run_program(program, [], artifact=None, runtimes={"m": managed}, root=tmp_path)
    finally:
        sys.modules.pop("helper_for_surface", None)
    assert status == 0
    assert managed.calls == ["start", "helper_for_surface imported", "close"]
    assert capsys.readouterr().out == "before\nhelper runs\nafter\n"
