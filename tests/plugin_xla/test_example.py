"""examples/40_xla_scalar prints the same under python and under ppy run, compiled."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "40_xla_scalar"


def test_example_prints_the_same_under_python_and_ppy_run(tmp_path: Path, ppy) -> None:
    project = tmp_path / "40_xla_scalar"
    shutil.copytree(EXAMPLE, project, ignore=shutil.ignore_patterns(".ppy"))
    plain = subprocess.run(
        [sys.executable, "model.ppy"], cwd=project, capture_output=True, text=True, check=False
    )
    assert plain.returncode == 0, plain.stderr
    built = ppy("build", ".", cwd=project)
    assert built.returncode == 0, built.stdout + built.stderr
    for name in ("collatz_steps", "longest_chain", "leibniz"):
        line = next(ln for ln in built.stdout.splitlines() if f" {name} " in ln)
        assert "stays" not in line, line
    # wave() has no loop: a staged call would cost more than its body.
    wave = next(ln for ln in built.stdout.splitlines() if " wave " in ln)
    assert "stays" in wave and "has no loop" in wave, wave
    staged = ppy("run", "-v", "--log-format", "json", "model.ppy", cwd=project)
    assert staged.returncode == 0, staged.stderr
    assert staged.stdout == plain.stdout
    events = [json.loads(ln) for ln in staged.stderr.splitlines() if ln.startswith("{")]
    bound = {e["function"] for e in events if e["event"] == "run.bind"}
    assert bound == {"collatz_steps", "longest_chain", "leibniz"}
    fallbacks = [e for e in events if e["event"] == "run.fallback"]
    assert [e["function"] for e in fallbacks] == ["collatz_steps"]  # the 2**62 + 1 chain
    assert plain.stdout.splitlines()[0] == "26623"
