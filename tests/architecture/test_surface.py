"""Plugins and runtimes import core only through ``ppy.plugin``, ``ppy.runtime`` and ``ppy.kinds``.

The contract is import-linter's, of the type in ``surface.py``, declared in
the root ``pyproject.toml``; ``nox -s lint`` runs it as these tests do.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LEAKY = ROOT / "tests" / "fixtures" / "ppy-plugin-leaky" / "src"
#: Where grimp finds the packages the contract names (it reads them, imports none).
SOURCES = [
    ROOT,
    ROOT / "packages" / "core" / "src",
    ROOT / "packages" / "plugin-jax" / "src",
    ROOT / "packages" / "plugin-xla" / "src",
    ROOT / "packages" / "runtime-pjrt" / "src",
    ROOT / "examples" / "third_party_plugin" / "src",
]


def lint_imports(config: Path, *extra: Path) -> subprocess.CompletedProcess[str]:
    command = Path(sys.executable).with_name("lint-imports")
    if not command.exists():
        pytest.fail(f"{command} is missing: install import-linter (CONTRIBUTING.md)")
    path = os.pathsep.join(str(p) for p in (*SOURCES, *extra))
    return subprocess.run(
        [str(command), str(config), "--no-cache"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": path, "COLUMNS": "400", "NO_COLOR": "1"},
    )


def test_the_plugins_the_runtime_and_the_example_keep_to_the_surface() -> None:
    result = lint_imports(ROOT / "pyproject.toml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "plugins and runtimes import core only through its public surface KEPT" in result.stdout


def test_a_plugin_that_imports_a_core_internal_breaks_the_contract(tmp_path: Path) -> None:
    config = tmp_path / "importlinter.toml"
    config.write_text(
        "[tool.importlinter]\n"
        'root_packages = ["ppy", "ppy_plugin_leaky"]\n'
        'contract_types = ["surface: tests.architecture.surface.SurfaceContract"]\n'
        "[[tool.importlinter.contracts]]\n"
        'name = "the leaky plugin keeps to the surface"\n'
        'type = "surface"\n'
        'packages = ["ppy_plugin_leaky"]\n'
        'core = "ppy"\n'
        'allowed = ["ppy", "ppy.plugin", "ppy.runtime", "ppy.kinds", "ppy.kinds.*"]\n'
    )
    result = lint_imports(config, LEAKY)
    assert result.returncode == 1, result.stdout + result.stderr
    out = result.stdout
    assert "the leaky plugin keeps to the surface BROKEN" in out
    # Both internal imports, the one at module level and the one inside a method.
    assert (
        "ppy_plugin_leaky:11 imports ppy.run.import_hooks "
        "(from ppy.run.import_hooks import after_import)" in out
    )
    assert "ppy_plugin_leaky:18 imports ppy.log (from ppy.log import get_logger)" in out
    # What it may import instead; ppy.runtime itself is allowed.
    assert "imports ppy.runtime" not in out
    assert (
        "ppy_plugin_leaky may import only these of ppy: "
        "ppy, ppy.kinds, ppy.kinds.*, ppy.plugin, ppy.runtime." in out
    )
