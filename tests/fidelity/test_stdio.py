"""A standard stream closed (`>&-`, `2>&-`, `<&-`): `ppy run` and `ppy record`
end as python ends, with its exit status and output; ppy's own lines go nowhere.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import run_ppy
from tests.support.differential import project

#: One function staged, one left to the recording; each run prints on both
#: streams, then ends as its argument says.
PROGRAM = """\
import sys
from typing import Annotated

import jax
import jax.numpy as jnp

import ppy

Batch = Annotated[jax.Array, ppy.Shape("B", 4), ppy.DType("float32")]


@jax.jit
def score(x: Batch) -> jax.Array:
    return jnp.sum(x, axis=-1)


@jax.jit
def unannotated(x):
    return x * 2


x = jnp.ones((2, 4))
print(score(x), unannotated(x).sum())
print("to stderr", file=sys.stderr)
print("stdin", sys.stdin is None, "stdout", sys.stdout is None, "stderr", sys.stderr is None,
      file=sys.stderr if sys.stderr is not None else sys.stdout)
if sys.argv[1] == "raise":
    raise ValueError("the program failed")
sys.exit("the program's message")
"""

PPY = (sys.executable, "-m", "ppy")


def _closed(fd: int, command: list[str], root: Path, cache: Path) -> tuple[int, str, str]:
    """``command`` run with ``fd`` closed, as a shell's ``N>&-`` runs it."""
    ran = subprocess.run(
        ["sh", "-c", f'exec "$@" {fd}>&-', "sh", *command],
        cwd=root,
        capture_output=True,
        text=True,
        env={**os.environ, "PPY_CACHE_DIR": str(cache)},
        timeout=300,
        check=False,
    )
    return ran.returncode, ran.stdout, ran.stderr


def _own_lines_apart(stderr: str) -> str:
    """stderr less ppy's events (one JSON object per line)."""
    kept = []
    for line in stderr.splitlines(keepends=True):
        try:
            event = json.loads(line)
        except ValueError:
            event = None
        if not (isinstance(event, dict) and "event" in event):
            kept.append(line)
    return "".join(kept)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("stdio")
    root = project(base / "p", {"model.ppy": PROGRAM})
    cache = base / "cache"
    built = run_ppy("build", cwd=root, env={"PPY_CACHE_DIR": str(cache)})
    assert built.returncode == 1 and "score" in built.stdout, built.stdout  # unannotated stays
    return root, cache


@pytest.mark.parametrize("ending", ["raise", "exit"])
@pytest.mark.parametrize("fd", [0, 1, 2])
def test_a_closed_stream_ends_the_run_as_it_ends_python(
    built: tuple[Path, Path], fd: int, ending: str
) -> None:
    root, cache = built
    python = _closed(fd, [sys.executable, "model.ppy", ending], root, cache)
    assert python[0] == 1 and ("failed" in python[2] or "message" in python[2] or fd == 2)
    verbose = ["-v", "--log-format", "json"]
    for command in ("run", "record"):
        ran = _closed(fd, [*PPY, *verbose, command, "model.ppy", ending], root, cache)
        code, stdout, stderr = ran
        assert (code, stdout, _own_lines_apart(stderr)) == python, (command, stderr)
        if fd == 2:  # ppy's events had nowhere to go, and went nowhere
            assert "event" not in stdout
    if fd == 2:  # a quiet run's warning (the build it skips) goes nowhere either
        assert _closed(fd, [*PPY, "run", "model.ppy", ending], root, cache) == python
