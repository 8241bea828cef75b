"""An artifact built on another machine's platform: its symbolic exports.

A build compiles each export with a symbolic dim for its own platform and
compares it with what jit compiles (``ppy_plugin_jax.refinement``); the
entry lists where (``compared_on``). The page's example is built here, on
the CPU, and then rewritten as a build on a TPU machine for ``["cpu",
"tpu"]`` would have written it: compared on ``tpu`` only. Run on the CPU,
its symbolic variants are then not served, and the program prints what
python prints through the jitted path, with the reason.
"""

from __future__ import annotations

import dataclasses
import subprocess
from collections.abc import Callable
from pathlib import Path

from ppy.artifact.read import read_artifact
from ppy.artifact.write import write_artifact

from tests.conftest import BuiltExample
from tests.support.events import json_events

Run = Callable[..., subprocess.CompletedProcess[str]]


def test_a_symbolic_export_compared_on_another_platform_is_not_served_here(
    built_examples: Callable[[str], BuiltExample], built_example: Path, ppy: Run
) -> None:
    expected = built_examples("25_jax_export").plain.stdout
    artifact = built_example / ".ppy" / "artifact.ppyz"
    built = read_artifact(artifact)
    assert {tuple(e.metadata["compared_on"]) for e in built.entries} == {("cpu",)}
    run = ("-v", "--log-format", "json", "run", "--no-build", "model.ppy")

    here = ppy(*run, cwd=built_example)
    assert (here.returncode, here.stdout) == (0, expected), here.stderr
    assert not json_events(here.stderr, "run.fallback")

    elsewhere = dataclasses.replace(
        built,
        entries=tuple(
            dataclasses.replace(e, metadata={**e.metadata, "compared_on": ["tpu"]})
            for e in built.entries
        ),
    )
    write_artifact(elsewhere, artifact)
    there = ppy(*run, cwd=built_example)
    assert (there.returncode, there.stdout) == (0, expected), there.stderr
    fallbacks = json_events(there.stderr, "run.fallback")
    assert {e["function"] for e in fallbacks} == {"normalize", "score"}, there.stderr
    for fallback in fallbacks:
        assert fallback["category"] == "platform"
        assert "compared with jit on tpu only: on cpu" in str(fallback["reason"])
