"""The jax plugin's contract with core, without starting a worker: settings, rules,
fingerprint, what importing it costs, and the worker's environment."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
from importlib import metadata

import pytest
from ppy.discovery.differentiation import TRANSFORMS
from ppy.discovery.module import discover_source
from ppy.discovery.records import FunctionInfo
from ppy.errors import ConfigError
from ppy.plugin import Plugin
from ppy_plugin_jax.plugin import JaxExportPlugin
from ppy_plugin_jax.supervisor import worker_environment

SOURCE = """\
import functools
from typing import Annotated

import jax
import ppy

X = Annotated[jax.Array, ppy.Shape("B"), ppy.DType("float32")]

@jax.jit
def plain(x: X, y: X):
    return x + y

@functools.partial(jax.jit, static_argnames=("n",))
def static(x: X, n: int):
    return x * n

@functools.partial(jax.jit, donate_argnums=0)
def donated(x: X):
    return x * 2

DONATE = 0

@functools.partial(jax.jit, donate_argnums=DONATE)
def donated_unread(x: X):
    return x * 2

@jax.jit
def variadic(x: X, *rest: X, scale: X, **extra: X):
    return x

class Model:
    @jax.jit
    def method(self, x: X):
        return x

    @staticmethod
    @jax.jit
    def static_method(x: X):
        return x

    @classmethod
    @jax.jit
    def class_method(cls, x: X):
        return x

def outer():
    @jax.jit
    def nested(x: X):
        return x

    @jax.jit
    def defaulted(x: X, k=2):
        return x * k
    return nested, defaulted
"""


def _functions() -> dict[str, FunctionInfo]:
    module = discover_source(SOURCE, module="model", path="model.ppy")
    return {f.qualname.rpartition(".")[2]: f for f in module.functions}


def _failed(name: str) -> dict[str, str]:
    module = discover_source(SOURCE, module="model", path="model.ppy")
    function = _functions()[name]
    checks = JaxExportPlugin().check(function, module, {})
    return {c.rule: c.detail for c in checks if not c.passed}


def test_it_is_a_plugin_with_the_names_core_uses() -> None:
    plugin = JaxExportPlugin()
    assert isinstance(plugin, Plugin)
    assert (plugin.name, plugin.kind, plugin.verb) == ("jax", "jax.export", "exported")
    assert plugin.decorators == frozenset({"jax.jit"})
    assert plugin.version == metadata.version("ppy-plugin-jax")
    req = plugin.requirements
    assert req.build_execution and req.array_specs and req.permission == "allow-build-export"
    assert req.differentiation is not None and "jax.jacrev" in req.differentiation
    # What any of discovery's transforms reaches is exported with its VJP;
    # the runtime decides at each pullback which VJP answers it.
    assert req.differentiable == TRANSFORMS


def test_importing_the_plugin_does_not_import_jax() -> None:
    code = "import sys, ppy_plugin_jax.plugin; print('jax' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "False"


def test_settings_default_to_off_and_the_build_machines_backend() -> None:
    settings = JaxExportPlugin().validate_settings({}, "pyproject.toml")
    assert settings == {
        "allow-build-export": False,
        "platforms": None,
        "export-timeout": 120.0,
        "export-memory-limit": 8192,
        "captured-array-limit": 1 << 20,
        "verify-sizes": True,
        "staged-vjp": False,
        "mesh": None,
        "constraints": [],
    }
    settings = JaxExportPlugin().validate_settings(
        {"allow-build-export": True, "platforms": ["tpu", "cpu", "cpu"], "export-timeout": 3},
        "pyproject.toml",
    )
    assert settings["platforms"] == ["cpu", "tpu"] and settings["export-timeout"] == 3.0


@pytest.mark.parametrize(
    ("table", "key", "words"),
    [
        ({"allow-build-export": "yes"}, "allow-build-export", "bool"),
        ({"platforms": ["cpu", "metal"]}, "platforms", "metal"),
        ({"platforms": []}, "platforms", "non-empty"),
        ({"platforms": "cpu"}, "platforms", "array"),
        ({"export-timeout": 0}, "export-timeout", "wanted 0.1 to 86400 seconds"),
        ({"export-timeout": "10"}, "export-timeout", "float"),
        ({"export-memory-limit": 0}, "export-memory-limit", "wanted 128 to"),
        ({"export-memory-limit": 1.5}, "export-memory-limit", "integer"),
        ({"captured-array-limit": -1}, "captured-array-limit", "wanted 0 to"),
        ({"timeout": 3}, "timeout", "unknown key"),
        ({"mesh": 4}, "mesh", "table"),
        ({"mesh": {}}, "mesh", "no axes"),
        ({"mesh": {"data": 0}}, "mesh", "number of devices from 1 to 1048576"),
        ({"mesh": {"data": "4"}}, "mesh", "number of devices from 1 to 1048576"),
        ({"mesh": {"data": 2**63 - 1}}, "mesh", "number of devices from 1 to 1048576"),
        ({"mesh": {"data": 2**10, "model": 2**11}}, "mesh", "2097152 devices in all"),
        ({"verify-sizes": "always"}, "verify-sizes", "sample"),
        ({"mesh": {"data": 4}, "mesh-axis-types": "diagonal"}, "mesh-axis-types", "diagonal"),
        ({"mesh": {"data": 4}, "mesh-axis-types": {"model": "auto"}}, "mesh-axis-types", "model"),
        ({"mesh-axis-types": {"data": "auto"}}, "mesh-axis-types", "no mesh"),
    ],
)
def test_a_bad_setting_names_its_key(table: dict[str, object], key: str, words: str) -> None:
    with pytest.raises(ConfigError) as caught:
        JaxExportPlugin().validate_settings(table, "proj/pyproject.toml")
    assert caught.value.key == f"tool.ppy.plugins.jax.{key}"
    assert caught.value.path == "proj/pyproject.toml"
    assert words in str(caught.value)


def test_the_mesh_reads_in_axis_order_with_its_types() -> None:
    plugin = JaxExportPlugin()
    settings = plugin.validate_settings(
        {"mesh": {"data": 2, "model": 2}, "mesh-axis-types": {"model": "auto"}}, "pyproject.toml"
    )
    mesh = settings["mesh"]
    assert (mesh.names, mesh.sizes, mesh.types) == (
        ("data", "model"),
        (2, 2),
        ("explicit", "auto"),
    )
    assert str(mesh) == "data=2, model=2 (auto, explicit)" and mesh.devices == 4
    other = plugin.validate_settings({"mesh": {"data": 4}}, "pyproject.toml")
    assert plugin.fingerprint(settings) != plugin.fingerprint(other)


def test_the_plugins_own_rules_say_what_cannot_be_exported() -> None:
    assert _failed("plain") == {}
    assert "static argument 'n' may take any value" in _failed("static")["static-args"]
    assert "static-args" not in _failed("donated")
    assert (
        "donate_argnums or donate_argnames is not a literal"
        in (_failed("donated_unread")["static-args"])
    )
    kinds = _failed("variadic")["parameter-kind"]
    assert "rest (*args)" in kinds and "extra (**kwargs)" in kinds
    assert "scale" not in kinds and "x (" not in kinds
    assert "called through an instance" in _failed("method")["scope"]
    # A static method's class hands on the jit itself; a class method's does not.
    assert _failed("static_method") == {}
    assert _failed("class_method").keys() == {"scope", "decorated"}
    # Made inside a function: staged where jax.jit makes it (the worker
    # refuses one that reads the enclosing function's variables).
    assert "scope" not in _failed("nested")
    assert "defaults (k) are computed each time that code runs" in _failed("defaulted")["scope"]


def test_the_fingerprint_follows_versions_and_platforms() -> None:
    plugin = JaxExportPlugin()
    default = plugin.fingerprint({"platforms": None})
    assert f"jax={metadata.version('jax')}" in default
    assert f"jaxlib={metadata.version('jaxlib')}" in default
    assert plugin.version in default
    assert plugin.fingerprint({"platforms": ["cpu", "cuda"]}) != default
    assert plugin.fingerprint({"platforms": None}) == default


def test_the_worker_environment_keeps_what_jax_needs_and_where_python_imports() -> None:
    parent = {
        "PATH": "/bin",
        "HOME": "/home/u",
        "LC_ALL": "C.UTF-8",
        "JAX_PLATFORMS": "cpu",
        "XLA_FLAGS": "--xla_force_host_platform_device_count=2",
        "CUDA_VISIBLE_DEVICES": "0",
        "AWS_SECRET_ACCESS_KEY": "hunter2",
        "GITHUB_TOKEN": "ghp_x",
        "PYTHONPATH": "/somewhere",
        "PYTHONUSERBASE": "/home/u/.local",
        "PYTHONSTARTUP": "/evil.py",
        "JAX_TOKEN": "t",
        "xla_secret_key": "k",
    }
    env = worker_environment(parent)
    for kept in (
        "PATH",
        "HOME",
        "LC_ALL",
        "JAX_PLATFORMS",
        "XLA_FLAGS",
        "CUDA_VISIBLE_DEVICES",
        "PYTHONPATH",
        "PYTHONUSERBASE",
    ):
        assert env[kept] == parent[kept]
    for dropped in (
        "AWS_SECRET_ACCESS_KEY",
        "GITHUB_TOKEN",
        "PYTHONSTARTUP",
        "JAX_TOKEN",
        "xla_secret_key",
    ):
        assert dropped not in env
    # The user site is python's to decide, as for the program.
    assert "PYTHONNOUSERSITE" not in env


def test_pythonpath_reaches_the_worker_as_python_reads_it_in_the_builds_folder() -> None:
    parent = {"PYTHONPATH": os.pathsep.join(["lib", "", "/abs"])}
    env = worker_environment(parent, cwd="/work/here")
    assert env["PYTHONPATH"].split(os.pathsep) == ["/work/here/lib", "/work/here", "/abs"]


def test_a_missing_module_the_build_finds_is_named_with_where_python_finds_it() -> None:
    from ppy_plugin_jax.supervisor import _missing_remedy

    remedy = _missing_remedy("jax.numpy", ["/project", "/usr/lib/python3"])
    spec = importlib.util.find_spec("jax")
    assert spec is not None and f"python finds jax at {spec.origin}" in remedy
    assert "the export worker looked in /project" in remedy and "PYTHONPATH" in remedy
    remedy = _missing_remedy("nowhere_to_be_found", ["/project"])
    assert "python does not find nowhere_to_be_found either" in remedy


def test_the_worker_refuses_a_request_of_another_protocol() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "ppy_plugin_jax.worker"],
        input=textwrap.dedent('{"protocol": 999}'),
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode != 0 and "protocol" in result.stderr


def test_constraints_are_comparisons_and_part_of_the_fingerprint() -> None:
    plugin = JaxExportPlugin()
    settings = plugin.validate_settings({"constraints": ["F  <= N", "B >= 2"]}, "pyproject.toml")
    assert settings["constraints"] == ["F <= N", "B >= 2"]
    assert plugin.fingerprint(settings) != plugin.fingerprint({"platforms": None})
    for bad in ("F < N", "import os", 3):
        with pytest.raises(ConfigError, match="not a comparison of two dim expressions"):
            plugin.validate_settings({"constraints": [bad]}, "pyproject.toml")
