"""``[tool.ppy]`` read from real pyproject.toml files: defaults, opt-ins, every error."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from ppy.config import Setting, load_config, remedy_for, validate_table
from ppy.errors import ConfigError


def write(root: Path, text: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    path = root / "pyproject.toml"
    path.write_text(textwrap.dedent(text))
    return path


def config_error(root: Path, text: str) -> ConfigError:
    write(root, text)
    with pytest.raises(ConfigError) as caught:
        load_config(root)
    return caught.value


def test_defaults_without_a_tool_ppy_table(tmp_path: Path) -> None:
    pyproject = write(tmp_path / "demo", '[project]\nname = "demo-app"\n')
    config = load_config(tmp_path / "demo")
    assert config.root == pyproject.parent.resolve()
    assert config.pyproject == pyproject.resolve()
    assert config.project == "demo-app"
    assert config.build_execution is False
    assert config.artifact == config.root / ".ppy" / "artifact.ppyz"
    assert dict(config.plugins) == {}


def test_opt_in_and_plugin_tables(tmp_path: Path) -> None:
    write(
        tmp_path,
        """
        [tool.ppy]
        build-execution = "allow"
        artifact = "out/app.ppyz"

        [tool.ppy.plugins.jax]
        allow-build-export = true
        """,
    )
    config = load_config(tmp_path)
    assert config.build_execution is True
    assert config.artifact == tmp_path.resolve() / "out" / "app.ppyz"
    assert dict(config.plugins["jax"]) == {"allow-build-export": True}


def test_deny_is_accepted_and_off(tmp_path: Path) -> None:
    write(tmp_path, '[tool.ppy]\nbuild-execution = "deny"\n')
    assert load_config(tmp_path).build_execution is False


def test_nearest_pyproject_above_a_file_target(tmp_path: Path) -> None:
    write(tmp_path / "outer", '[project]\nname = "outer"\n')
    inner = write(tmp_path / "outer" / "inner", '[project]\nname = "inner"\n')
    source = tmp_path / "outer" / "inner" / "pkg" / "model.ppy"
    source.parent.mkdir(parents=True)
    source.write_text("")
    config = load_config(source)
    assert config.pyproject == inner.resolve()
    assert config.project == "inner"


def test_without_pyproject_the_target_directory_is_the_root(tmp_path: Path) -> None:
    # tmp_path has no pyproject.toml above it on a test machine's temp dir
    root = tmp_path / "loose"
    root.mkdir()
    (root / "model.ppy").write_text("")
    config = load_config(root / "model.ppy")
    if config.pyproject is not None:
        pytest.skip(f"a pyproject.toml above the temp dir: {config.pyproject}")
    assert config.root == root.resolve()
    assert config.project == "loose"
    assert config.build_execution is False
    remedy = remedy_for(config, table="tool.ppy", line='build-execution = "allow"')
    assert remedy == (
        f'create {root.resolve() / "pyproject.toml"} with build-execution = "allow" '
        "under [tool.ppy]"
    )


def test_project_name_falls_back_to_directory_name(tmp_path: Path) -> None:
    write(tmp_path / "named-by-folder", '[tool.ppy]\nbuild-execution = "allow"\n')
    assert load_config(tmp_path / "named-by-folder").project == "named-by-folder"


def test_digest_follows_tool_ppy_only(tmp_path: Path) -> None:
    write(tmp_path, '[project]\nname = "a"\n[tool.ppy]\nbuild-execution = "allow"\n')
    first = load_config(tmp_path).digest
    write(tmp_path, '[project]\nname = "b"\n[tool.ppy]\nbuild-execution = "allow"\n')
    assert load_config(tmp_path).digest == first
    write(tmp_path, '[project]\nname = "b"\n[tool.ppy]\nbuild-execution = "deny"\n')
    assert load_config(tmp_path).digest != first
    assert len(first) == 64 and int(first, 16) >= 0


def test_remedy_names_the_file(tmp_path: Path) -> None:
    pyproject = write(tmp_path, "[tool.ppy]\n")
    config = load_config(tmp_path)
    assert remedy_for(config, table="tool.ppy.plugins.jax", line="allow-build-export = true") == (
        f"add allow-build-export = true under [tool.ppy.plugins.jax] in {pyproject.resolve()}"
    )


def test_malformed_toml_names_line_and_column(tmp_path: Path) -> None:
    error = config_error(tmp_path, '[tool.ppy]\nbuild-execution "allow"\n')
    path = str((tmp_path / "pyproject.toml").resolve())
    assert str(error).startswith(f"{path}:2:")
    assert "invalid TOML" in str(error)
    assert error.exit_code == 2


def test_unknown_key_lists_the_allowed_ones(tmp_path: Path) -> None:
    error = config_error(tmp_path, '[tool.ppy]\nbuild_execution = "allow"\n')
    assert error.key == "tool.ppy.build_execution"
    assert "unknown key 'build_execution'" in error.message
    assert "allowed keys: build-execution, artifact, plugins" in error.message


def test_wrong_type_says_found_and_wanted(tmp_path: Path) -> None:
    error = config_error(tmp_path, "[tool.ppy]\nbuild-execution = true\n")
    assert error.key == "tool.ppy.build-execution"
    assert "is a boolean (true); wanted a string" in error.message


def test_wrong_value_lists_allowed_values(tmp_path: Path) -> None:
    error = config_error(tmp_path, '[tool.ppy]\nbuild-execution = "yes"\n')
    assert error.key == "tool.ppy.build-execution"
    assert '"yes" is not allowed; use one of: "allow", "deny"' in error.message


def test_artifact_must_be_a_string(tmp_path: Path) -> None:
    error = config_error(tmp_path, "[tool.ppy]\nartifact = 3\n")
    assert error.key == "tool.ppy.artifact"
    assert "is an integer (3); wanted a string" in error.message


def test_plugins_must_be_a_table(tmp_path: Path) -> None:
    error = config_error(tmp_path, '[tool.ppy]\nplugins = ["jax"]\n')
    assert error.key == "tool.ppy.plugins"
    assert 'is an array (["jax"])' in error.message
    assert "wanted a table of plugin tables" in error.message


def test_plugin_entry_must_be_a_table(tmp_path: Path) -> None:
    error = config_error(tmp_path, "[tool.ppy.plugins]\njax = true\n")
    assert error.key == "tool.ppy.plugins.jax"
    assert "wanted a table, [tool.ppy.plugins.jax]" in error.message
    assert str(tmp_path.resolve() / "pyproject.toml") in str(error)


def test_tool_ppy_must_be_a_table(tmp_path: Path) -> None:
    error = config_error(tmp_path, "[tool]\nppy = 1\n")
    assert error.key == "tool.ppy"
    assert "wanted a table" in error.message


SCHEMA = {
    "allow-build-export": Setting((bool,), False, "stage functions with jax.export"),
    "workers": Setting((int,), 1, "how many processes export at once"),
    "tolerance": Setting((float,), 0.5, "how close is close"),
    "platform": Setting((str,), "cpu", "where to export for", ("cpu", "cuda")),
}


def validate(table: dict[str, object]) -> dict[str, object]:
    return validate_table(table, SCHEMA, path="/p/pyproject.toml", prefix="tool.ppy.plugins.jax")


def test_validate_table_fills_defaults() -> None:
    assert validate({"workers": 4, "tolerance": 1}) == {
        "allow-build-export": False,
        "workers": 4,
        "tolerance": 1.0,
        "platform": "cpu",
    }


def test_validate_table_rejects_an_int_for_a_bool() -> None:
    with pytest.raises(ConfigError) as caught:
        validate({"allow-build-export": 1})
    assert caught.value.key == "tool.ppy.plugins.jax.allow-build-export"
    assert "is an integer (1); wanted a boolean" in caught.value.message


def test_validate_table_rejects_a_bool_for_an_int() -> None:
    with pytest.raises(ConfigError) as caught:
        validate({"workers": True})
    assert caught.value.key == "tool.ppy.plugins.jax.workers"
    assert "is a boolean (true); wanted an integer" in caught.value.message


def test_validate_table_unknown_key_and_choices() -> None:
    with pytest.raises(ConfigError) as caught:
        validate({"allow_build_export": True})
    assert str(caught.value).startswith(
        "/p/pyproject.toml: tool.ppy.plugins.jax.allow_build_export: unknown key"
    )
    assert "allowed keys: allow-build-export, workers, tolerance, platform" in str(caught.value)
    with pytest.raises(ConfigError) as caught:
        validate({"platform": "tpu"})
    assert 'use one of: "cpu", "cuda"' in caught.value.message


def test_every_key_is_documented() -> None:
    from ppy.config import ALLOWED_KEYS

    docs = (Path(__file__).resolve().parents[2] / "docs" / "config.md").read_text()
    for key in ALLOWED_KEYS:
        assert f"| `{key}` |" in docs
