"""The ``ppy`` command at its edges: what a user types by habit gets the answer a Unix tool gives.

Each ``EDGES`` case is one real ``python -m ppy`` invocation on a built copy
of the xla example: ``--version``, ``NO_COLOR`` on a terminal, a reader that
closes the pipe, a missing artifact, ``ppy run`` without a file, and ``ppy
explain`` after a build that reused every entry. The docs site's own links
are checked with them: it names no repository that is not the project's.
"""

from __future__ import annotations

import os
import pty
import re
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from ppy import __version__

from tests.hardening.support import ROOT, copy_example, ppy
from tests.support.terminal import read_until_closed

ANSI = re.compile(r"\x1b\[[0-9;]*m")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The xla example, built twice: the second build reuses every entry."""
    root = copy_example("40_xla_scalar", tmp_path_factory.mktemp("edges"))
    for _ in range(2):
        assert ppy("build", str(root)).returncode == 0
    return root


def _on_a_terminal(args: list[str], env: dict[str, str]) -> str:
    """What ``ppy ARGS`` writes to stderr when stderr is a terminal."""
    leader, follower = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "ppy", *args],
        stdout=subprocess.DEVNULL,
        stderr=follower,
        env={**os.environ, **env},
    )
    os.close(follower)
    written = read_until_closed(leader)
    assert process.wait(timeout=120) == 0
    return written.decode("utf-8", "replace")


def version(root: Path) -> None:
    shown = ppy("--version")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith(f"ppy {__version__} (python ")


def no_color(root: Path) -> None:
    args = ["build", "-v", str(root)]
    coloured = _on_a_terminal(args, {"NO_COLOR": "", "TERM": "xterm"})
    plain = _on_a_terminal(args, {"NO_COLOR": "1", "TERM": "xterm"})
    assert ANSI.search(coloured), "a terminal without NO_COLOR gets colour"
    assert "build.decision" in plain and not ANSI.search(plain), plain


def closed_pipe(root: Path) -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "ppy", "inspect", "--json", str(root / ".ppy" / "artifact.ppyz")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()  # the reader is gone before ppy writes a byte
    err = process.stderr.read().decode()
    assert process.wait(timeout=120) == 128 + signal.SIGPIPE
    assert err == "", err


def missing_artifact(root: Path) -> None:
    shown = ppy("inspect", str(root / "nothere.ppyz"))
    assert shown.returncode == 2, shown.stderr
    assert shown.stderr.startswith(f"ppy: error: {root / 'nothere.ppyz'}: no such file\n")


def run_without_a_file(root: Path) -> None:
    shown = ppy("run")
    assert shown.returncode == 2
    assert shown.stderr.rstrip().endswith("the following arguments are required: FILE")


def explain_after_reuse(root: Path) -> None:
    shown = ppy("explain", "leibniz", str(root))
    assert shown.returncode == 0, shown.stderr
    assert "outcome:   reused [reused]" in shown.stdout
    assert "reason:    unchanged since the last build; entry reused (compiled for cpu)" in (
        shown.stdout
    )
    assert "[pass] staged: compiled for cpu" in shown.stdout


def docs_link_no_other_repository(root: Path) -> None:
    site = (ROOT / "mkdocs.yml").read_text()
    assert not re.search(r"^(repo_url|repo_name|edit_uri):", site, re.MULTILINE)
    pages = [site, *(p.read_text() for p in sorted((ROOT / "docs").rglob("*.md")))]
    assert not any(re.search(r"https?://(www\.)?(github|gitlab)\.com/", p) for p in pages)


EDGES: dict[str, Callable[[Path], None]] = {
    "ppy --version": version,
    "NO_COLOR on a terminal": no_color,
    "ppy inspect --json into a closed pipe": closed_pipe,
    "ppy inspect of a missing file": missing_artifact,
    "ppy run without a file": run_without_a_file,
    "ppy explain after a reused build": explain_after_reuse,
    "the docs site's links": docs_link_no_other_repository,
}


@pytest.mark.parametrize("case", list(EDGES))
def test_the_command_at_its_edges(case: str, built: Path) -> None:
    EDGES[case](built)
