"""The collector after the program's imports (``ppy.run.collector``): jax's and
the libraries' objects are set aside, the program's are collected and
finalized as python does."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.conftest import run_ppy
from tests.support.differential import WARM, differential, project
from tests.support.events import json_events

STAGED = """\
import gc
from typing import Annotated

import jax
import jax.numpy as jnp
import optax

import ppy

Batch = Annotated[jax.Array, ppy.Shape("B", 4), ppy.DType("float32")]


@jax.jit
def score(x: Batch) -> jax.Array:
    return jnp.sum(x, axis=-1)


class Node:
    def __init__(self, name):
        self.name = name
        self.me = self  # a cycle: only the collector frees it

    def __del__(self):
        print("freed", self.name, flush=True)


Node("garbage")
print("collected", gc.collect() > 0)
print(score(jnp.ones((2, 4))))
"""


def test_what_the_program_makes_after_jax_is_collected_as_python_collects_it(
    tmp_path: Path,
) -> None:
    root = project(tmp_path / "p", {"model.ppy": STAGED})
    compared = differential(root, cache=tmp_path / "c")
    assert "freed garbage\ncollected True\n" in compared.python.stdout
    assert compared.bound() == {"score"}
    decided = compared.named("run.collector")
    assert [(e["after"], e["frozen"]) for e in decided] == [("jax", True), ("optax", True)]
    assert int(str(decided[0]["objects"])) > 10_000


JOURNAL = """\
class Journal:
    def __init__(self):
        self.me = self  # a cycle: only the collector frees it


journal = Journal()

import jax.numpy as jnp

journal.file = open("journal.txt", "a")
journal.file.write("a line the program never flushes\\n")
print(jnp.arange(3).sum())
"""


def test_a_file_hung_on_what_the_program_made_before_jax_is_flushed_at_exit(
    tmp_path: Path,
) -> None:
    """Frozen, the journal's cycle would never be collected, and its file never
    flushed: the program made it before it imported jax, so nothing is frozen."""
    root = project(tmp_path / "p", {"model.ppy": JOURNAL})
    compared = differential(root, cache=tmp_path / "c")
    runs = 3 if WARM else 2  # python, ppy run, ppy run --warm
    assert (root / "journal.txt").read_text() == "a line the program never flushes\n" * runs
    (decided,) = compared.named("run.collector")
    assert (decided["after"], decided["frozen"]) == ("jax", False)
    assert str(decided["reason"]).startswith("__main__.Journal was made by the program")


def test_a_project_module_that_imports_jax_first_sets_it_aside(tmp_path: Path) -> None:
    """The program's own module imports jax, then makes its functions: jax is
    frozen, and from the end of that module's import on, nothing more is."""
    helpers = "import jax.numpy as jnp\n\n\ndef total(x):\n    return float(jnp.asarray(x).sum())\n"
    program = "import gc\nimport helpers\n\nprint(helpers.total([1.0, 2.0]), gc.collect() >= 0)\n"
    root = project(tmp_path / "p", {"helpers.py": helpers, "model.ppy": program})
    compared = differential(root, cache=tmp_path / "c")
    decided = [(e["after"], e["frozen"]) for e in compared.named("run.collector")]
    assert decided == [("jax", True), ("helpers", False)]


def test_a_recording_collects_as_python_does_and_keeps_what_it_must(tmp_path: Path) -> None:
    """``ppy record`` sets jax aside as ``ppy run`` does, on the same rule."""
    for name, program, frozen in (("staged", STAGED, True), ("journal", JOURNAL, False)):
        root = project(tmp_path / name, {"model.ppy": program})
        plain = subprocess.run(
            [sys.executable, "model.ppy"], cwd=root, capture_output=True, text=True, check=True
        )
        recorded = run_ppy("-v", "--log-format", "json", "record", "model.ppy", cwd=root)
        assert recorded.stdout == plain.stdout, recorded.stderr
        decided = [e["frozen"] for e in json_events(recorded.stderr, "run.collector")]
        assert decided == ([True, True] if frozen else [False])
    journal = (tmp_path / "journal" / "journal.txt").read_text()
    assert journal == "a line the program never flushes\n" * 2
