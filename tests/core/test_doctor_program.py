"""``ppy doctor --program FILE ARGS``: the program run once, for real, and where
its time went, counted: compiles, cache loads, staged calls, fallbacks.

Counts are asserted, never times: a compile per distinct eager op in a cold
run, none once ppy's executable cache holds them.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

Run = Callable[..., subprocess.CompletedProcess[str]]

#: Three distinct eager ops on one shape (sin twice), and a staged function
#: never called: the project has a candidate, so the jax runtime is loaded
#: and its cache of unstaged computations serves the eager ops.
EAGER = """\
from typing import Annotated

import jax
import jax.numpy as jnp
import numpy as np
import ppy

Row = Annotated[jax.Array, ppy.Shape(4), ppy.DType("float32")]


@jax.jit
def unused(x: Row) -> jax.Array:
    return x * 2


def main() -> None:
    x = np.arange(4, dtype=np.float32)
    for op in (jnp.sin, jnp.cos, jnp.exp, jnp.sin):
        print(np.asarray(op(x)).round(3).tolist())


if __name__ == "__main__":
    main()
"""
PYPROJECT = """\
[project]
name = "eager"

[tool.ppy]
build-execution = "allow"

[tool.ppy.plugins.jax]
allow-build-export = true
"""
#: Every field of the ``program`` object, as docs/cli.md lists them.
FIELDS = {
    "command",
    "exit_code",
    "failure",
    "seconds",
    "interpreter_seconds",
    "import_jax_seconds",
    "jax_imported_by",
    "backend_start_seconds",
    "plugins_seconds",
    "platforms",
    "before_program_seconds",
    "program_seconds",
    "trace",
    "lower",
    "compile",
    "cache_loads",
    "eager_loads",
    "cache_hits",
    "bound",
    "staged_calls",
    "original_calls",
    "fallbacks",
    "rest_seconds",
    "exit_seconds",
}


def _program(ppy: Run, root: Path, *args: str) -> dict[str, Any]:
    done = ppy("doctor", "--json", "--no-import", "--program", *args, cwd=root)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    report: dict[str, Any] = json.loads(done.stdout)  # nothing of the program's in it
    program: dict[str, Any] = report["program"]
    assert set(program) == FIELDS
    return program


def test_the_page_example_run_is_accounted_for(ppy: Run, example: Path) -> None:
    python = subprocess.run(
        [sys.executable, "model.ppy"], cwd=example, capture_output=True, text=True, check=True
    )
    cold = _program(ppy, example, "model.ppy")
    assert cold["exit_code"] == 0 and cold["failure"] is None
    assert cold["jax_imported_by"] == "program"
    for name in ("import_jax_seconds", "backend_start_seconds", "program_seconds"):
        assert cold[name] is not None and cold[name] >= 0, name
    assert "cpu" in cold["platforms"]
    assert cold["bound"] == 2  # normalize and score
    assert cold["staged_calls"] == 1 and cold["original_calls"] == 0
    assert cold["fallbacks"] == {}
    # The staged score and the program's eager ops compile; nothing is loaded.
    assert cold["compile"]["count"] >= 2
    assert cold["cache_loads"]["count"] == 0 and cold["eager_loads"] == 0

    warm = _program(ppy, example, "model.ppy")
    assert warm["compile"]["count"] == 0
    assert warm["lower"]["count"] == 0
    # Each eager op from ppy's cache before lowering, and score's executable.
    assert warm["eager_loads"] == cold["compile"]["count"] - 1
    assert warm["cache_hits"] == warm["eager_loads"] + 1
    # What the program printed went nowhere: a plain run prints it.
    assert python.stdout.strip().splitlines()[-1].startswith("[")


def test_each_distinct_eager_op_compiles_once_cold_and_never_warm(ppy: Run, tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(PYPROJECT)
    (tmp_path / "model.ppy").write_text(EAGER)
    cold = _program(ppy, tmp_path, "model.ppy")
    assert cold["exit_code"] == 0
    assert cold["bound"] == 1 and cold["staged_calls"] == 0
    assert cold["compile"] == {"count": 3, "seconds": cold["compile"]["seconds"]}
    assert cold["eager_loads"] == 0

    warm = _program(ppy, tmp_path, "model.ppy")
    assert warm["compile"]["count"] == 0
    assert warm["eager_loads"] == 3


def test_the_program_arguments_and_its_failure_are_reported(ppy: Run, tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "fails"\n')
    (tmp_path / "model.ppy").write_text("import sys\nprint(sys.argv[1:])\nsys.exit(sys.argv[1])\n")
    program = _program(ppy, tmp_path, "model.ppy", "it failed here", "--json")
    assert program["exit_code"] == 1
    assert program["failure"] == "it failed here"
    assert program["command"][-3:] == ["model.ppy", "it failed here", "--json"]
    assert program["import_jax_seconds"] is None  # jax was never imported
    assert program["compile"] == {"count": 0, "seconds": 0.0}


def test_the_text_report_says_where_the_run_went(ppy: Run, tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(PYPROJECT)
    (tmp_path / "model.ppy").write_text(EAGER)
    done = ppy("doctor", "--program", "model.ppy", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "import jax  timed in the program's run (below)" in done.stdout
    assert "program run  `ppy run --no-warm model.ppy`" in done.stdout
    assert "XLA compiles (3)" in done.stdout
    assert "[0.0, 0.841" not in done.stdout  # the program's own output is not shown


@pytest.mark.parametrize("argv", [["--program"]])
def test_a_program_is_needed(ppy: Run, tmp_path: Path, argv: list[str]) -> None:
    done = ppy("doctor", *argv, cwd=tmp_path)
    assert done.returncode == 2
    assert "--program needs a FILE" in done.stderr
