"""Third-party plugins, installed for real through their entry points."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import pip_install_target

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder where pip installed the shout and broken plugin distributions."""
    target = tmp_path_factory.mktemp("site")
    pip_install_target(target, FIXTURES / "ppy-plugin-shout", FIXTURES / "ppy-plugin-broken")
    return target


PROGRAM = """\
from ppy_plugin_shout import shout

@shout
def greet(name):
    return f"hello {name}"

print(greet("world"))
"""


def test_plugins_lists_installed_distributions_and_skips_a_broken_one(
    site: Path, ppy: Callable[..., subprocess.CompletedProcess[str]]
) -> None:
    result = ppy("plugins", PYTHONPATH=str(site))
    assert result.returncode == 0, result.stderr
    assert "ppy-plugin-shout 1.2.3" in result.stdout
    assert "ppy-plugin-jax" in result.stdout
    lines = [line for line in result.stdout.splitlines() if "broken" in line]
    assert lines and "FAILED" in lines[0] and "a_module_that_is_not_installed" in lines[0]


def test_a_third_party_plugin_and_runtime_are_used_by_build_and_run(
    site: Path,
    make_project: Callable[..., Path],
    ppy: Callable[..., subprocess.CompletedProcess[str]],
) -> None:
    root = make_project(
        {"hello.ppy": PROGRAM},
        pyproject='[project]\nname = "hi"\n[tool.ppy.plugins.shout]\nvolume = 3\n',
    )
    env = {"PYTHONPATH": str(site)}
    plain = subprocess.run(
        [sys.executable, "hello.ppy"],
        cwd=root,
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        check=True,
    )
    assert plain.stdout == "hello world\n"
    built = ppy("build", str(root), **env)
    assert built.returncode == 0, built.stderr
    assert "greet" in built.stdout and "shouted" in built.stdout
    ran = ppy("run", str(root / "hello.ppy"), **env)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == "HELLO WORLD!!!\n"


XLA_PROGRAM = """\
from ppy import xla

@xla.jit
def total(n: int) -> int:
    s = 0
    for k in range(n):
        s += k
    return s

print(total(7))
"""


def test_loading_plugins_and_runtimes_writes_nothing_in_the_users_cache(
    tmp_path: Path,
    make_project: Callable[..., Path],
    ppy: Callable[..., subprocess.CompletedProcess[str]],
) -> None:
    """stevedore is given the entry points as installed now: its own cache,
    a file under ``$XDG_CACHE_HOME/python-entrypoints`` that it would import
    from unchecked, is neither read nor written (docs/plugins.md)."""
    user_cache = tmp_path / "user-cache"
    env = {"XDG_CACHE_HOME": str(user_cache)}
    root = make_project({"total.ppy": XLA_PROGRAM})
    listed = ppy("plugins", **env)
    assert listed.returncode == 0 and "xla.scalar" in listed.stdout, listed.stderr
    built = ppy("build", str(root), **env)
    assert built.returncode == 0 and "compiled" in built.stdout, built.stderr
    ran = ppy("run", str(root / "total.ppy"), **env)
    assert (ran.returncode, ran.stdout) == (0, "21\n"), ran.stderr
    assert not user_cache.exists(), sorted(p.name for p in user_cache.rglob("*"))
