"""What the hardening suites share: a real artifact, real projects, the real command.

The artifact the fuzzers start from is the one ``ppy build`` writes for the
xla example (built in-process: no project code runs, no jax), with
``written_by`` pinned so its bytes, and so the case counts that depend on its
length, do not move with the installed jax.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

from ppy.artifact.read import read_artifact
from ppy.artifact.write import dumps

from tests.conftest import run_ppy as ppy  # noqa: F401 - the name the suites import

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
PINNED_WRITER = {"ppy": "0.1.0"}


def copy_example(name: str, target: Path) -> Path:
    """A fresh copy of ``examples/<name>`` under ``target``, without build output."""
    destination = target / name
    shutil.copytree(
        EXAMPLES / name, destination, ignore=shutil.ignore_patterns(".ppy", "__pycache__")
    )
    return destination


@functools.lru_cache(maxsize=1)
def real_artifact() -> bytes:
    """The bytes of a real artifact: the xla example's, from a real build."""
    from ppy.commands.build import build

    with tempfile.TemporaryDirectory(prefix="ppy-hardening-") as tmp:
        project = copy_example("40_xla_scalar", Path(tmp))
        result = build(project)
        artifact = read_artifact(result.project.config.artifact)
    return dumps(dataclasses.replace(artifact, written_by=PINNED_WRITER))


def start_ppy(
    *args: str, cwd: Path | None = None, env: Mapping[str, str] | None = None
) -> subprocess.Popen[str]:
    """``ppy ARGS`` started, not waited for: for runs that overlap."""
    return subprocess.Popen(
        [sys.executable, "-m", "ppy", *args],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )
