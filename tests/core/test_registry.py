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


@pytest.fixture(scope="module")
def future(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder where pip installed plugins and a runtime written for other
    versions of ppy's contracts (``ppy.plugin.CONTRACT``, ``ppy.runtime.CONTRACT``)."""
    target = tmp_path_factory.mktemp("future")
    pip_install_target(target, FIXTURES / "ppy-plugin-future")
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
    lines = [line for line in result.stdout.splitlines() if line.split()[0] == "broken"]
    assert lines and "FAILED" in lines[0] and "a_module_that_is_not_installed" in lines[0]
    # An import that fails an assert is a failure like any other (stevedore
    # itself lets AssertionError through).
    asserting = [line for line in result.stdout.splitlines() if line.split()[0] == "asserting"]
    assert asserting and "FAILED: AssertionError: this plugin needs Python 4" in asserting[0]
    assert "Traceback" not in result.stderr


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


def test_a_plugin_or_runtime_written_for_another_contract_is_reported_and_skipped(
    future: Path, ppy: Callable[..., subprocess.CompletedProcess[str]]
) -> None:
    from ppy.plugin import CONTRACT as PLUGINS
    from ppy.runtime import CONTRACT as RUNTIMES

    listed = ppy("plugins", PYTHONPATH=str(future))
    assert listed.returncode == 0, listed.stderr
    assert "constructed" not in listed.stdout + listed.stderr
    speaks = f"this ppy-core speaks {PLUGINS[0]}.{PLUGINS[1]}"
    lines = {line.split()[0]: line for line in listed.stdout.splitlines() if "future" in line}
    assert "ppy-plugin-future 3.0.0" in lines["future"]
    assert (
        f"FAILED: it was written for the ppy.plugins contract 2.0; {speaks} (skipped)"
        in lines["future"]
    )
    assert "FAILED: its class declares no `contract`" in lines["unversioned"]
    assert (
        "FAILED: it was written for the ppy.runtimes contract 1.999; this ppy-core speaks "
        f"{RUNTIMES[0]}.{RUNTIMES[1]} (skipped)" in lines["future.kind"]
    )
    # ppy's own still load beside them.
    assert "ppy-plugin-jax" in listed.stdout and "loaded" in listed.stdout
    # Each skip is one warning, with what to do.
    warnings = [line for line in listed.stderr.splitlines() if "registry.incompatible" in line]
    assert len(warnings) == 3, listed.stderr
    future_warning = next(line for line in warnings if "name=future " in line)
    assert "distribution=ppy-plugin-future" in future_warning
    assert (
        "install a version of ppy-plugin-future written for the ppy.plugins contract "
        f"{PLUGINS[0]}.x (at most {PLUGINS[0]}.{PLUGINS[1]})" in future_warning
    )


def test_a_build_goes_on_without_a_plugin_written_for_another_contract(
    future: Path,
    make_project: Callable[..., Path],
    ppy: Callable[..., subprocess.CompletedProcess[str]],
) -> None:
    root = make_project({"hello.ppy": 'print("hello")\n'})
    built = ppy("build", str(root), PYTHONPATH=str(future))
    assert built.returncode == 0, built.stderr
    assert "registry.incompatible" in built.stderr and "name=future " in built.stderr
    assert "constructed" not in built.stdout + built.stderr


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


def test_stevedore_loads_only_the_runtimes_a_run_names(site: Path) -> None:
    """``ppy run`` names the kinds its artifact holds: stevedore's
    ``NamedExtensionManager`` imports those and no other, so a broken
    distribution registered for another group or kind costs a run nothing."""
    code = (
        "import sys\n"
        "from ppy.registry import load_runtimes\n"
        "loaded = load_runtimes({'shout.upper'})\n"
        "print(sorted(loaded.by_name), [i.name for i in loaded.failures])\n"
        "print(sorted(m for m in ('stevedore.named', 'ppy_plugin_shout', 'ppy_plugin_broken',"
        " 'ppy_runtime_pjrt.export') if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(site)},
    )
    assert out.stdout.splitlines() == [
        "['shout.upper'] []",
        "['ppy_plugin_shout', 'stevedore.named']",
    ]
