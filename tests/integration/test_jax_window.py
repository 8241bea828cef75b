"""Artifacts from a jax outside the running jax's compatibility window.

The recorded versions are rewritten in a real built artifact, in both
directions: an export from a newer jaxlib, and one older than jax.export's
6-month backward window. ``ppy run`` rebuilds such an artifact; with
``--no-build`` the entries stay unbound and the log says why. Either way the
program prints what python prints.
"""

from __future__ import annotations

import dataclasses
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from ppy.artifact.read import read_artifact
from ppy.artifact.write import write_artifact

from tests.conftest import BuiltExample

Run = Callable[..., subprocess.CompletedProcess[str]]
EXAMPLE = "25_jax_export"


def _record_exporter(artifact: Path, version: str) -> None:
    """Rewrite which jax and jaxlib the artifact says wrote its exports."""
    old = read_artifact(artifact)
    entries = tuple(
        dataclasses.replace(
            e, metadata={**e.metadata, "jax_version": version, "jaxlib_version": version}
        )
        for e in old.entries
    )
    write_artifact(dataclasses.replace(old, entries=entries), artifact)


@pytest.mark.parametrize(
    ("version", "says"),
    [
        ("99.0.0", "newer than this process's jaxlib"),
        ("0.5.0", "outside jax.export's backward-compatibility window"),
    ],
)
def test_an_export_outside_the_window_is_rebuilt_or_left_unbound(
    built_examples: Callable[[str], BuiltExample],
    built_example: Path,
    ppy: Run,
    version: str,
    says: str,
) -> None:
    shared = built_examples(EXAMPLE)
    assert shared.plain.returncode == 0, shared.plain.stderr  # python model.ppy
    expected = shared.plain.stdout
    assert shared.build.returncode == 0
    example = built_example
    artifact = example / ".ppy" / "artifact.ppyz"
    _record_exporter(artifact, version)

    kept = ppy("run", "--no-build", "model.ppy", cwd=example)
    assert (kept.returncode, kept.stdout) == (0, expected), kept.stderr
    assert kept.stderr.count("run.unbound") == 2 and says in kept.stderr
    assert "Traceback" not in kept.stderr

    rebuilt = ppy("-v", "run", "model.ppy", cwd=example)
    assert (rebuilt.returncode, rebuilt.stdout) == (0, expected), rebuilt.stderr
    assert "run.build" in rebuilt.stderr and says in rebuilt.stderr
    assert "run.unbound" not in rebuilt.stderr and rebuilt.stderr.count("run.bind ") == 2
    entries = read_artifact(artifact).entries
    assert {e.metadata["jaxlib_version"] for e in entries} != {version}

    again = ppy("run", "model.ppy", cwd=example)
    assert (again.stdout, again.stderr) == (expected, "")
