"""Every malformed pyproject.toml is one clear configuration error, never a traceback.

Each ``MALFORMED`` case is a pyproject.toml a person could write. Both
``ppy build`` and ``ppy run`` must exit 2 with one ``ppy: error:`` message
naming the file, the key (where there is one), what is wrong and the remedy.
The command runs in-process through ``ppy.cli.main``: an exception that
escaped it would fail the test with its traceback.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from ppy.cli.main import main

HEAD = '[project]\nname = "broken"\n\n'
ALLOW = '[tool.ppy]\nbuild-execution = "allow"\n\n'

#: case -> (the file's bytes, the key named or None, words of the message)
MALFORMED: dict[str, tuple[bytes, str | None, str]] = {
    "unclosed string": (b'[tool.ppy]\nartifact = "out.ppyz\n', None, "invalid TOML"),
    "a key set twice": (
        b'[tool.ppy]\nartifact = "a"\nartifact = "b"\n',
        None,
        "invalid TOML",
    ),
    "a table header twice": (b"[tool.ppy]\n[tool.ppy]\n", None, "invalid TOML"),
    "not UTF-8": (b'[project]\nname = "caf\xe9"\n', None, "is not UTF-8 text"),
    "tool is not a table": (b'tool = 3\n[project]\nname = "x"\n', "tool", "wanted a table"),
    "tool.ppy is not a table": (b'[tool]\nppy = "on"\n', "tool.ppy", "wanted a table"),
    'build-execution = "yes"': (
        b'[tool.ppy]\nbuild-execution = "yes"\n',
        "tool.ppy.build-execution",
        '"yes" is not allowed; use one of: "allow", "deny"',
    ),
    "build-execution = true": (
        b"[tool.ppy]\nbuild-execution = true\n",
        "tool.ppy.build-execution",
        "is a boolean (true); wanted a string",
    ),
    "an unknown key": (
        b'[tool.ppy]\nbuild_execution = "allow"\n',
        "tool.ppy.build_execution",
        "unknown key 'build_execution'",
    ),
    "artifact is a number": (b"[tool.ppy]\nartifact = 3\n", "tool.ppy.artifact", "an integer"),
    "artifact is empty": (b'[tool.ppy]\nartifact = " "\n', "tool.ppy.artifact", "is empty"),
    "artifact holds a NUL": (
        b'[tool.ppy]\nartifact = "a\\u0000b.ppyz"\n',
        "tool.ppy.artifact",
        "holds a control character",
    ),
    "artifact is the program": (
        b'[tool.ppy]\nartifact = "model.ppy"\n',
        "tool.ppy.artifact",
        "does not end in .ppyz",
    ),
    "artifact is pyproject.toml": (
        b'[tool.ppy]\nartifact = "pyproject.toml"\n',
        "tool.ppy.artifact",
        "does not end in .ppyz",
    ),
    "artifact is absolute": (
        b'[tool.ppy]\nartifact = "/tmp/ppy-hardening/x.ppyz"\n',
        "tool.ppy.artifact",
        "is not relative to the project root",
    ),
    "artifact is in the home folder": (
        b'[tool.ppy]\nartifact = "~/x.ppyz"\n',
        "tool.ppy.artifact",
        "is not relative to the project root",
    ),
    "artifact leaves the project": (
        b'[tool.ppy]\nartifact = "../x/y.ppyz"\n',
        "tool.ppy.artifact",
        "outside the project root",
    ),
    "artifact leaves through a linked folder": (
        b'[tool.ppy]\nartifact = "linked/y.ppyz"\n',
        "tool.ppy.artifact",
        "outside the project root",
    ),
    "plugins is a number": (b"[tool.ppy]\nplugins = 3\n", "tool.ppy.plugins", "plugin tables"),
    "a plugin table is a string": (
        b'[tool.ppy.plugins]\njax = "on"\n',
        "tool.ppy.plugins.jax",
        "wanted a table",
    ),
    "a plugin nobody installed": (
        b"[tool.ppy.plugins.nosuch]\nx = 1\n",
        "tool.ppy.plugins.nosuch",
        "no installed plugin is named 'nosuch'",
    ),
    'allow-build-export = "yes"': (
        ALLOW.encode() + b'[tool.ppy.plugins.jax]\nallow-build-export = "yes"\n',
        "tool.ppy.plugins.jax.allow-build-export",
        "wanted a boolean",
    ),
    "platforms is a string": (
        b'[tool.ppy.plugins.jax]\nplatforms = "cpu"\n',
        "tool.ppy.plugins.jax.platforms",
        "wanted an array",
    ),
    "an unknown platform": (
        b'[tool.ppy.plugins.jax]\nplatforms = ["metal"]\n',
        "tool.ppy.plugins.jax.platforms",
        "must be a non-empty list of cpu, cuda, rocm, tpu",
    ),
    "no platforms": (
        b"[tool.ppy.plugins.jax]\nplatforms = []\n",
        "tool.ppy.plugins.jax.platforms",
        "non-empty",
    ),
    "export-timeout = 0": (
        b"[tool.ppy.plugins.jax]\nexport-timeout = 0\n",
        "tool.ppy.plugins.jax.export-timeout",
        "is 0.0; wanted 0.1 to 86400 seconds",
    ),
    "export-timeout = inf": (
        b"[tool.ppy.plugins.jax]\nexport-timeout = inf\n",
        "tool.ppy.plugins.jax.export-timeout",
        "is inf; wanted a finite number",
    ),
    "export-timeout = nan": (
        b"[tool.ppy.plugins.jax]\nexport-timeout = nan\n",
        "tool.ppy.plugins.jax.export-timeout",
        "is nan; wanted a finite number",
    ),
    "export-timeout = 1e308": (
        b"[tool.ppy.plugins.jax]\nexport-timeout = 1e308\n",
        "tool.ppy.plugins.jax.export-timeout",
        "wanted 0.1 to 86400 seconds",
    ),
    'export-timeout = "10"': (
        b'[tool.ppy.plugins.jax]\nexport-timeout = "10"\n',
        "tool.ppy.plugins.jax.export-timeout",
        "wanted a float",
    ),
    "export-memory-limit = -1": (
        b"[tool.ppy.plugins.jax]\nexport-memory-limit = -1\n",
        "tool.ppy.plugins.jax.export-memory-limit",
        "wanted 128 to 1073741824 megabytes",
    ),
    "export-memory-limit = 2**63 - 1": (
        b"[tool.ppy.plugins.jax]\nexport-memory-limit = 9223372036854775807\n",
        "tool.ppy.plugins.jax.export-memory-limit",
        "wanted 128 to 1073741824 megabytes",
    ),
    "captured-array-limit = -1": (
        b"[tool.ppy.plugins.jax]\ncaptured-array-limit = -1\n",
        "tool.ppy.plugins.jax.captured-array-limit",
        "wanted 0 to 1073741824 bytes",
    ),
    "an unknown jax setting": (
        b"[tool.ppy.plugins.jax]\ntimeout = 3\n",
        "tool.ppy.plugins.jax.timeout",
        "unknown key 'timeout'",
    ),
    "an xla setting": (
        b"[tool.ppy.plugins.xla]\nfast = true\n",
        "tool.ppy.plugins.xla.fast",
        "unknown key 'fast'; allowed keys: force-staging",
    ),
}

#: Cases written as they are, without the [project] table first.
WHOLE = {"not UTF-8", "tool is not a table"}
COMMANDS = ("build", "run")


#: ``main`` configures logging for the whole process, as a command does.
pytestmark = pytest.mark.usefixtures("own_logging")


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("case", list(MALFORMED))
def test_a_malformed_pyproject_is_one_clear_error(
    case: str, command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    content, key, words = MALFORMED[case]
    project = tmp_path / "project"
    project.mkdir()
    pyproject = project / "pyproject.toml"
    pyproject.write_bytes(content if case in WHOLE else HEAD.encode() + content)
    program = project / "model.ppy"
    program.write_text('print("the program ran")\n')
    (tmp_path / "outside").mkdir()
    (project / "linked").symlink_to(tmp_path / "outside")
    argv = ["build", str(project)] if command == "build" else ["run", str(program)]

    code = main(argv)

    out, err = capsys.readouterr()
    assert program.read_text() == 'print("the program ran")\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["outside", "project"]
    assert not any((tmp_path / "outside").iterdir())
    assert code == 2, err
    assert "the program ran" not in out
    (first, *rest) = err.rstrip("\n").splitlines()
    where = f"ppy: error: {pyproject}" + (f": {key}: " if key else ":")
    assert first.startswith(where), err
    assert words in first, err
    assert len(rest) == 1 and rest[0].startswith("  remedy: ") and len(rest[0]) > 14, err
    assert "Traceback" not in err
    assert not (project / ".ppy").exists()
