"""A program with candidates and nothing staged: the build and the run say so, once,
and the run still keeps its compiles in ppy's cache, so it is never slower than python."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import run_ppy
from tests.support.differential import differential, machine_noise, project

PROGRAM = """\
import jax
import jax.numpy as jnp

@jax.jit
def score(x):
    return jnp.tanh(x).sum()

@jax.jit
def scale(x, factor):
    return x * factor

x = jnp.arange(6.0).reshape(2, 3)
print(score(x), scale(x, 2.0))
"""

NOT_OPTED_IN = '[project]\nname = "demo"\n'


def test_a_project_not_opted_in_hears_it_once(tmp_path: Path) -> None:
    root = project(tmp_path / "p", {"model.ppy": PROGRAM}, pyproject=NOT_OPTED_IN)
    env = {"PPY_CACHE_DIR": str(tmp_path / "c")}
    built = run_ppy("build", cwd=root, env=env)
    assert built.returncode == 0, built.stderr
    last = built.stdout.splitlines()[-1]
    assert last.startswith("staged 0 of 2 candidate functions: "), built.stdout
    assert 'build-execution is not "allow"' in last
    compared = differential(root, cache=tmp_path / "c", build=False, quiet_stderr=None)
    (warning,) = compared.named("run.nothing_staged")
    assert warning["level"] == "warning" and warning["candidates"] == 2
    assert 'build-execution = "allow"' in str(warning["remedy"])
    quiet = run_ppy("--quiet", "run", "model.ppy", cwd=root, env=env)
    assert (quiet.stdout, machine_noise(quiet.stderr)) == (compared.python.stdout, "")
    plain = run_ppy("run", "model.ppy", cwd=root, env=env)
    assert plain.stderr.count("run.nothing_staged") == 1, plain.stderr


def test_nothing_staged_still_loads_its_compiles_from_the_cache(tmp_path: Path) -> None:
    root = project(tmp_path / "p", {"model.ppy": PROGRAM}, pyproject=NOT_OPTED_IN)
    env = {"PPY_CACHE_DIR": str(tmp_path / "c")}
    assert run_ppy("build", cwd=root, env=env).returncode == 0
    runs = [
        run_ppy("-vv", "--log-format", "json", "run", "model.ppy", cwd=root, env=env)
        for _ in range(2)
    ]
    events = [
        [json.loads(line) for line in run.stderr.splitlines() if line.startswith("{")]
        for run in runs
    ]
    first, second = (
        [e for e in run if e["event"] == "cache.unstaged" and "jit_score" in str(e)]
        for run in events
    )
    assert first and all(e["source"] == "compiled" for e in first), first
    assert second and all(e["source"] == "cache" for e in second), second


def test_the_summary_counts_what_was_staged(tmp_path: Path) -> None:
    described = PROGRAM.replace(
        "@jax.jit\ndef score(x):",
        "from typing import Annotated\nimport ppy\n"
        '@jax.jit\ndef score(x: Annotated[jax.Array, ppy.Shape(2, 3), ppy.DType("float32")]):',
    )
    root = project(tmp_path / "p", {"model.ppy": described})
    built = run_ppy("build", cwd=root, env={"PPY_CACHE_DIR": str(tmp_path / "c")})
    assert built.stdout.splitlines()[-1] == "staged 1 of 2 candidate functions", built.stdout
