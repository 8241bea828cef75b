"""Shared fixtures: real project folders on disk and the real ``ppy`` command.

Tests build small projects in a temporary directory and run ``python -m ppy``
in a subprocess, the way a user runs it, then read the real artifact.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"

PERMISSIONS = """\
[project]
name = "demo"

[tool.ppy]
build-execution = "allow"

[tool.ppy.plugins.jax]
allow-build-export = true
"""


@pytest.fixture
def make_project(tmp_path: Path) -> Callable[..., Path]:
    """Write ``files`` (relative path -> text, dedented) under a fresh folder.

    ``pyproject`` defaults to one granting both permissions; pass None to
    write none.
    """

    def make(files: Mapping[str, str], pyproject: str | None = PERMISSIONS) -> Path:
        return write_project(tmp_path / "project", files, pyproject)

    return make


def write_project(
    root: Path, files: Mapping[str, str], pyproject: str | None = PERMISSIONS
) -> Path:
    """Write ``files`` (relative path -> text, dedented) and the pyproject under ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    if pyproject is not None:
        (root / "pyproject.toml").write_text(textwrap.dedent(pyproject))
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private executable cache for the test and every ppy it starts."""
    path = tmp_path / "cache"
    monkeypatch.setenv("PPY_CACHE_DIR", str(path))
    return path


def run_ppy(
    *args: str,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 300,
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m ppy ARGS`` the way a user does, and return what it did."""
    return subprocess.run(
        [sys.executable, "-m", "ppy", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        check=False,
    )


def pip_install_target(target: Path, *sources: Path) -> Path:
    """Install distributions into ``target`` with pip, as a user would, without
    touching the test environment: put ``target`` on PYTHONPATH to use them."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(target),
            *map(str, sources),
        ],
        check=True,
        capture_output=True,
    )
    return target


@pytest.fixture
def ppy(cache_dir: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    """``run_ppy`` with the test's private executable cache; ``**env`` adds variables."""

    def run(*args: str, cwd: Path | None = None, timeout: float = 300, **env: str):
        return run_ppy(
            *args, cwd=cwd, timeout=timeout, env={"PPY_CACHE_DIR": str(cache_dir), **env}
        )

    return run


@pytest.fixture
def example(tmp_path: Path) -> Path:
    """A copy of the page's example project, without any build output."""
    target = tmp_path / "25_jax_export"
    shutil.copytree(
        EXAMPLES / "25_jax_export", target, ignore=shutil.ignore_patterns(".ppy", "__pycache__")
    )
    return target
