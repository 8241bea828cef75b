"""``ppy build`` on a terminal: a progress line on stderr while functions are
exported, redrawn in place and cleared at the end; nothing of it anywhere
else (a pipe, ``--quiet``, ``--log-format json``), and the table on stdout
the same byte for byte.

The builds run under a real pseudo-terminal (``pty.openpty``): stderr on its
follower end, stdout a pipe, as ``ppy build | tee log`` in a terminal has them.
"""

from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest

from tests.conftest import PERMISSIONS, write_project
from tests.support.terminal import read_until_closed

pytestmark = pytest.mark.slow

#: Ten small functions over two modules, each described, so each is exported.
MODEL = """\
from typing import Annotated

import jax
import jax.numpy as jnp
import ppy

from helpers import h0, h1, h2, h3

Row = Annotated[jax.Array, ppy.Shape(4), ppy.DType("float32")]

{functions}

if __name__ == "__main__":
    x = jnp.arange(4, dtype=jnp.float32)
    print(float(f0(x) + h0(x)))
"""
HELPERS = """\
from typing import Annotated

import jax
import jax.numpy as jnp
import ppy

Row = Annotated[jax.Array, ppy.Shape(4), ppy.DType("float32")]

{functions}
"""
TOTAL = 10


def _functions(prefix: str, count: int) -> str:
    return "\n".join(
        f"@jax.jit\ndef {prefix}{i}(x: Row) -> jax.Array:\n    return jnp.sum(x * {i + 1})\n\n"
        for i in range(count)
    )


NAMES = [f"model.f{i}" for i in range(6)] + [f"helpers.h{i}" for i in range(4)]


def _project(root: Path) -> Path:
    return write_project(
        root,
        {
            "model.ppy": MODEL.format(functions=_functions("f", 6)),
            "helpers.ppy": HELPERS.format(functions=_functions("h", 4)),
        },
        PERMISSIONS,
    )


def _environment(cache: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "NO_COLOR")}
    return {**env, "PPY_CACHE_DIR": str(cache), "TERM": "xterm-256color"}


def _build_on_a_terminal(root: Path, cache: Path, *options: str) -> tuple[int, str, str]:
    """``ppy [OPTIONS] build`` with stderr on a terminal of 120 columns and stdout a
    pipe: its exit code, what the terminal received and what the pipe did."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))
    process = subprocess.Popen(
        [sys.executable, "-m", "ppy", *options, "build"],
        cwd=root,
        env=_environment(cache),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=follower,
    )
    os.close(follower)
    written = read_until_closed(leader)
    assert process.stdout is not None
    stdout = process.stdout.read().decode()
    process.stdout.close()
    return process.wait(timeout=300), written.decode(), stdout


def _build_in_pipes(root: Path, cache: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ppy", "build"],
        cwd=root,
        env=_environment(cache),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _table(stdout: str, root: Path) -> str:
    """The build's table with the project's folder, which the last line names, left out."""
    return stdout.replace(str(root), "<project>")


#: Terminal control sequences (colours, cursor, erase), left out of what is read.
_CONTROL = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


@pytest.fixture(scope="module")
def piped(tmp_path_factory: pytest.TempPathFactory) -> subprocess.CompletedProcess[str]:
    """The build of the project with stdout and stderr both pipes: the usual table."""
    base = tmp_path_factory.mktemp("piped")
    root = _project(base / "project")
    built = _build_in_pipes(root, base / "cache")
    assert built.returncode == 0, built.stderr
    built.stdout = _table(built.stdout, root)
    return built


def test_a_terminal_sees_each_function_exported_and_stdout_is_unchanged(
    tmp_path: Path, piped: subprocess.CompletedProcess[str]
) -> None:
    root = _project(tmp_path / "project")
    code, terminal, stdout = _build_on_a_terminal(root, tmp_path / "c")
    assert code == 0, terminal
    assert _table(stdout, root) == piped.stdout
    assert stdout.count("  exported  jax.export  ") == TOTAL, stdout

    text = _CONTROL.sub("", terminal)
    assert "\r" in text, repr(terminal)  # one line, redrawn in place
    frames = [frame for frame in text.split("\r") if frame.strip()]
    assert len(frames) > TOTAL, frames
    for count in range(1, TOTAL + 1):
        assert f"{count}/{TOTAL}" in text, (count, frames)
    for name in NAMES:  # each function while it is in flight
        assert any(name in frame for frame in frames), (name, frames)
    assert re.search(r"\b0:00:\d\d\b", text), frames  # the time since the build started
    # Erased at the end (the cursor back on its line, the line cleared): the
    # terminal is left with no line of ppy's.
    assert terminal.endswith("\r\x1b[1A\x1b[2K"), repr(terminal[-80:])


def test_a_pipe_gets_nothing_but_the_table(piped: subprocess.CompletedProcess[str]) -> None:
    assert piped.stderr == ""
    assert "\r" not in piped.stdout and "\x1b" not in piped.stdout
    assert piped.stdout.count("  exported  jax.export  ") == TOTAL, piped.stdout


@pytest.mark.parametrize("options", [("-q",), ("--log-format", "json")])
def test_quiet_and_json_draw_nothing_on_a_terminal(
    tmp_path: Path, piped: subprocess.CompletedProcess[str], options: tuple[str, ...]
) -> None:
    root = _project(tmp_path / "project")
    code, terminal, stdout = _build_on_a_terminal(root, tmp_path / "c", *options)
    assert code == 0, terminal
    assert _table(stdout, root) == piped.stdout
    assert terminal == ""


def test_a_rebuild_with_nothing_to_export_draws_nothing(tmp_path: Path) -> None:
    root = _project(tmp_path / "project")
    first = _build_in_pipes(root, tmp_path / "c")
    assert first.returncode == 0, first.stderr
    code, terminal, stdout = _build_on_a_terminal(root, tmp_path / "c")
    assert code == 0, terminal
    assert stdout.count("  reused  jax.export  ") == TOTAL, stdout
    assert terminal == ""
