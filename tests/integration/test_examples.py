"""Every program under examples/ prints the same under ``python`` and ``ppy run``."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import EXAMPLES

PROGRAMS = sorted(
    p
    for p in EXAMPLES.rglob("*.ppy")
    if p.is_file() and 'if __name__ == "__main__":' in p.read_text()
)


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: str(p.relative_to(EXAMPLES)))
def test_ppy_run_prints_what_python_prints(
    program: Path, tmp_path: Path, ppy: Callable[..., subprocess.CompletedProcess[str]]
) -> None:
    folder = tmp_path / program.parent.name
    shutil.copytree(program.parent, folder, ignore=shutil.ignore_patterns(".ppy", "__pycache__"))
    copy = folder / program.name
    plain = subprocess.run(
        [sys.executable, str(copy)],
        cwd=folder,
        capture_output=True,
        text=True,
        env=os.environ.copy(),
        check=False,
    )
    assert plain.returncode == 0, plain.stderr
    staged = ppy("-v", "run", str(copy), cwd=folder)
    assert staged.returncode == plain.returncode, staged.stderr
    assert staged.stdout == plain.stdout
    assert "run.bind" in staged.stderr, "nothing was staged and bound"
    again = ppy("run", str(copy), cwd=folder)
    assert again.stdout == plain.stdout
    assert again.stderr == "", "a warm run with a current artifact should say nothing"
