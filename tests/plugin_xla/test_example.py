"""examples/40_xla_scalar prints the same under python and under ppy run, compiled.

The example is built once for the session (``built_examples``), shared with
tests/integration/test_examples.py; the run here is in a copy of that build.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from tests.conftest import BuiltExample

EXAMPLE = "40_xla_scalar"


def test_example_prints_the_same_under_python_and_ppy_run(
    tmp_path: Path, ppy, built_examples: Callable[[str], BuiltExample]
) -> None:
    shared = built_examples(EXAMPLE)
    plain, built = shared.plain, shared.build
    assert plain.returncode == 0, plain.stderr
    assert built.returncode == 0, built.stdout + built.stderr
    for name in ("collatz_steps", "longest_chain", "leibniz"):
        line = next(ln for ln in built.stdout.splitlines() if f" {name} " in ln)
        assert "stays" not in line, line
    # wave() has no loop: a staged call would cost more than its body.
    wave = next(ln for ln in built.stdout.splitlines() if " wave " in ln)
    assert "stays" in wave and "has no loop" in wave, wave
    project = shared.copy(tmp_path)
    staged = ppy("run", "-v", "--log-format", "json", "model.ppy", cwd=project)
    assert staged.returncode == 0, staged.stderr
    assert staged.stdout == plain.stdout
    events = [json.loads(ln) for ln in staged.stderr.splitlines() if ln.startswith("{")]
    bound = {e["function"] for e in events if e["event"] == "run.bind"}
    assert bound == {"collatz_steps", "longest_chain", "leibniz"}
    fallbacks = [e for e in events if e["event"] == "run.fallback"]
    assert [e["function"] for e in fallbacks] == ["collatz_steps"]  # the 2**62 + 1 chain
    assert plain.stdout.splitlines()[0] == "26623"
