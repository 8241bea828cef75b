"""The ``ppy`` command on the page's example, as a user runs it.

The example is built once for the session (``built_examples``); a test that
reads that build's report asserts on it, a test that changes the artifact or
builds again works on its own copy (``built_example``).
"""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import BuiltExample
from tests.support.terminal import read_until_closed

Run = Callable[..., subprocess.CompletedProcess[str]]
Built = Callable[[str], BuiltExample]
EXAMPLE = "25_jax_export"


def _drop(path: Path, line: str) -> None:
    text = path.read_text()
    assert line in text
    path.write_text(text.replace(line, ""))


@pytest.mark.parametrize(
    ("removed", "setting", "table"),
    [
        ('build-execution = "allow"\n', 'build-execution = "allow"', "[tool.ppy]"),
        ("allow-build-export = true\n", "allow-build-export = true", "[tool.ppy.plugins.jax]"),
    ],
)
def test_without_a_permission_both_functions_stay_jitted_and_ppy_says_why(
    example: Path, ppy: Run, removed: str, setting: str, table: str
) -> None:
    pyproject = example / "pyproject.toml"
    _drop(pyproject, removed)
    built = ppy("build", str(example))
    assert built.returncode == 0, built.stderr
    for name in ("normalize", "score"):
        line = next(ln for ln in built.stdout.splitlines() if f" {name} " in f" {ln} ")
        assert "stays" in line and "ordinary jitted call" in line
    remedies = [ln for ln in built.stdout.splitlines() if "remedy:" in ln]
    assert len(remedies) == 2
    assert all(setting in r and table in r and str(pyproject) in r for r in remedies)

    explained = ppy("explain", "score", str(example))
    assert explained.returncode == 0, explained.stderr
    assert "ordinary jitted call" in explained.stdout
    assert setting in explained.stdout and str(pyproject) in explained.stdout


def test_without_both_permissions_one_build_names_both(example: Path, ppy: Run) -> None:
    pyproject = example / "pyproject.toml"
    _drop(pyproject, 'build-execution = "allow"\n')
    _drop(pyproject, "allow-build-export = true\n")
    built = ppy("build", str(example))
    assert built.returncode == 0, built.stderr
    remedies = [ln for ln in built.stdout.splitlines() if "remedy:" in ln]
    assert len(remedies) == 2, built.stdout
    for remedy in remedies:
        assert 'build-execution = "allow" under [tool.ppy]' in remedy, remedy
        assert "allow-build-export = true under [tool.ppy.plugins.jax]" in remedy, remedy
        assert str(pyproject) in remedy


def test_build_exports_both_functions_and_inspect_shows_their_signatures(
    built_examples: Built, tmp_path: Path, ppy: Run
) -> None:
    built = built_examples(EXAMPLE).build
    assert built.returncode == 0, built.stderr
    example = built_examples(EXAMPLE).copy(tmp_path)
    for name in ("normalize", "score"):
        line = next(ln for ln in built.stdout.splitlines() if f" {name} " in f" {ln} ")
        assert "exported" in line and f"{name}(x: float32[B,4])" in line
    artifact = example / ".ppy" / "artifact.ppyz"
    shown = ppy("inspect", str(artifact))
    assert shown.returncode == 0, shown.stderr
    assert "score(x: float32[B,4]) -> float32[B]" in shown.stdout
    assert "normalize(x: float32[B,4]) -> float32[B,4]" in shown.stdout
    as_json = json.loads(ppy("inspect", "--json", str(artifact)).stdout)
    assert {e["qualname"] for e in as_json["entries"]} == {"normalize", "score"}

    again = ppy("build", str(example))
    assert again.returncode == 0, again.stderr
    assert sum("reused" in ln for ln in again.stdout.splitlines()) >= 2


def test_inspect_rejects_a_tampered_artifact_naming_the_member(
    built_examples: Built, built_example: Path, ppy: Run
) -> None:
    assert built_examples(EXAMPLE).build.returncode == 0
    example = built_example
    artifact = example / ".ppy" / "artifact.ppyz"
    with zipfile.ZipFile(artifact) as archive:
        members = {i.filename: archive.read(i.filename) for i in archive.infolist()}
    victim = next(
        n for n in sorted(members) if n.endswith("export") or "export" in n.rsplit("/", 1)[-1]
    )
    data = bytearray(members[victim])
    data[len(data) // 2] ^= 0xFF
    members[victim] = bytes(data)
    with zipfile.ZipFile(artifact, "w") as archive:
        for name, payload in members.items():
            archive.writestr(name, payload)
    shown = ppy("inspect", str(artifact))
    assert shown.returncode == 1
    assert victim in shown.stderr and "ppy build" in shown.stderr
    assert "Traceback" not in shown.stderr


@pytest.mark.parametrize(
    ("pyproject", "expected"),
    [
        ("[tool.ppy\n", "pyproject.toml"),
        ('[tool.ppy]\nbuild-execution = "yes"\n', "tool.ppy.build-execution"),
        ("[tool.ppy]\nbuild-execution = true\n", "tool.ppy.build-execution"),
        ('[tool.ppy]\nbuild-executions = "allow"\n', "tool.ppy.build-executions"),
        (
            "[tool.ppy.plugins.jax]\nallow-build-export = 1\n",
            "tool.ppy.plugins.jax.allow-build-export",
        ),
        ("[tool.ppy.plugins.jax]\nexport-timeout = -3\n", "tool.ppy.plugins.jax.export-timeout"),
    ],
)
def test_bad_config_is_one_message_with_exit_code_2(
    make_project: Callable[..., Path], ppy: Run, pyproject: str, expected: str
) -> None:
    root = make_project({"m.ppy": "x = 1\n"}, pyproject=pyproject)
    for args in (("build", str(root)), ("run", str(root / "m.ppy"))):
        result = ppy(*args)
        assert result.returncode == 2, (args, result.stdout, result.stderr)
        assert expected in result.stderr and "Traceback" not in result.stderr
        assert result.stdout == ""


def test_help_for_every_command() -> None:
    for command in ("build", "run", "inspect", "explain", "plugins", "cache"):
        result = subprocess.run(
            [sys.executable, "-m", "ppy", command, "--help"],
            capture_output=True,
            text=True,
            check=False,
        )
        assert result.returncode == 0 and "usage: ppy" in result.stdout


def test_build_json_logs_one_object_per_event(built_examples: Built) -> None:
    result = built_examples(EXAMPLE).build  # ppy --log-format json -v build
    assert result.returncode == 0, result.stderr
    events = [json.loads(line) for line in result.stderr.splitlines() if line.strip()]
    decisions = [e for e in events if e["event"] == "build.decision"]
    assert {e["function"] for e in decisions} == {"normalize", "score"}
    assert all(e["reason"] and e["outcome"] for e in decisions)


#: An ``@xla.jit`` function of sixteen parameters: a build line longer than a
#: terminal, built in-process by the xla plugin (no jax, no worker).
WIDE = """\
from ppy import xla


@xla.jit
def wide({params}) -> int:
    n = a0 + a15
    while n > 1:
        n -= 1
    return n


print(wide(*range(16)))
""".format(params=", ".join(f"a{i}: int" for i in range(16)))
WIDE_SIGNATURE = "wide(" + ", ".join(f"a{i}: int64[]" for i in range(16)) + ")"
WIDE_SIGNATURE += " -> (int64[], bool[])"


def _stdout_on_a_terminal(args: list[str], env: dict[str, str]) -> str:
    """What ``ppy ARGS`` prints when its stdout is a terminal."""
    import os
    import pty

    leader, follower = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "ppy", *args],
        stdout=follower,
        stderr=subprocess.DEVNULL,
        env={**os.environ, **env},
    )
    os.close(follower)
    written = read_until_closed(leader)
    assert process.wait(timeout=120) == 0
    return written.decode().replace("\r\n", "\n")


def test_a_build_line_is_whole_in_a_pipe_and_fits_a_terminal(
    make_project: Callable[..., Path], ppy: Run, cache_dir: Path
) -> None:
    """Whatever ``COLUMNS`` says, a pipe gets the whole line; a terminal gets
    a line that fits it, and where to read the whole one."""
    root = make_project({"model.ppy": WIDE}, pyproject='[project]\nname = "wide"\n')
    env = {"COLUMNS": "120", "PPY_CACHE_DIR": str(cache_dir)}
    shown = _stdout_on_a_terminal(["build", str(root)], env).splitlines()
    (line,) = [ln for ln in shown if " wide " in ln]
    assert len(line) <= 120 and line.endswith("  compiled for cpu"), line
    assert "wide(a0: int64[]" in line and "..." in line, line
    note = shown[shown.index(line) + 1]
    assert note == "(signatures cut to fit 120 columns: `ppy explain NAME` shows one whole)"

    piped = ppy("build", str(root), COLUMNS="80")
    assert piped.returncode == 0, piped.stderr
    (line,) = [ln for ln in piped.stdout.splitlines() if " wide " in ln]
    assert f"  {WIDE_SIGNATURE}  unchanged since the last build" in line, line
    assert "ppy explain" not in piped.stdout
    explained = ppy("explain", "wide", str(root))
    assert f"signature: {WIDE_SIGNATURE}" in explained.stdout


def _help(*args: str) -> str:
    shown = subprocess.run(
        [sys.executable, "-m", "ppy", *args, "--help"], capture_output=True, text=True, check=False
    )
    assert shown.returncode == 0, shown.stderr
    return " ".join(shown.stdout.split())  # argparse wraps to the terminal


def test_ppy_help_names_the_exit_codes_and_the_page_of_environment_variables() -> None:
    shown = _help()
    assert "docs/environment.md" in shown
    assert "Exit codes: 0" in shown and "the program's own exit status" in shown


def test_record_help_says_which_jitted_functions_it_records() -> None:
    """Not only module-level ones: jits made inside functions, ``f = jax.jit(g)``,
    under the main guard (docs/recording.md)."""
    shown = _help("record")
    assert "module-level jax.jit functions" not in shown
    assert "inside functions" in shown and "main guard" in shown and "jax.jit(...)" in shown


def test_server_and_cache_actions_are_described_and_named_as_in_the_usage() -> None:
    server = _help("server")
    assert "status" in server and "stop" in server and "ACTION" in server
    assert "each warm server of this user" in _help("server", "status")
    assert "--all" in _help("server", "stop")
    cache = _help("cache")
    assert "show" in cache and "(the default)" in cache and "clear" in cache
    for command in ("server", "cache"):
        wrong = subprocess.run(
            [sys.executable, "-m", "ppy", command, "bogus"], capture_output=True, text=True
        )
        assert wrong.returncode == 2
        usage, *_, error = wrong.stderr.strip().splitlines()
        assert "ACTION" in usage and "argument ACTION: invalid choice: 'bogus'" in error


def test_inspect_json_help_says_what_it_prints() -> None:
    shown = _help("inspect")
    assert "manifest.json" in shown and "every decision" in shown


@pytest.mark.parametrize(
    ("command", "says"),
    [
        ("build", "each function's decision"),
        ("run", "bind"),
        ("record", "recorded"),
        ("plugins", "no events of its own"),
        ("cache", "no events of its own"),
        ("server", "no events of its own"),
        ("inspect", "no events of its own"),
    ],
)
def test_the_verbose_flag_says_what_it_shows_for_each_command(command: str, says: str) -> None:
    shown = _help(command)
    verbose = shown[shown.index("-v, --verbose") :]
    verbose = verbose[: verbose.index("-q, --quiet")]
    assert says in verbose, verbose
    if command != "run":
        assert "fallback" not in verbose, verbose
