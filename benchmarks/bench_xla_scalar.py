"""Scalar loops: CPython, the @xla.jit function through ``ppy run``, and numba's njit.

A project with one program, ``model.ppy``, holding two ``@xla.jit`` functions:

- collatz: the start below 300 000 with the longest Collatz chain (a while
  loop nested in a range loop, calling another compiled function);
- series: 4 * sum((-1.0) ** k / (2k + 1)) for k below 3 000 000 (a float loop).

Each mode runs in fresh processes and the program times one call of each
function after one small warm-up call (which, staged, compiles the module or
loads it from the executable cache; for numba it compiles). Figures are the
medians over ``--processes`` processes (default 3).

    python benchmarks/bench_xla_scalar.py [--processes 3]

Targets: staged at least 15x faster than CPython and within 3x of numba.
numba is needed only here, for the comparison.
"""

from __future__ import annotations

import argparse
import importlib.machinery
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

MODEL = """
import json
import sys
import time

from ppy import xla

LIMIT = 300000
TERMS = 3000000


@xla.jit
def collatz_steps(n: int) -> int:
    steps = 0
    while n != 1:
        if n % 2 == 0:
            n = n // 2
        else:
            n = 3 * n + 1
        steps += 1
    return steps


@xla.jit
def longest_chain(limit: int) -> int:
    best = 0
    best_start = 1
    for start in range(1, limit):
        steps = collatz_steps(start)
        if steps > best:
            best = steps
            best_start = start
    return best_start


@xla.jit
def series(terms: int) -> float:
    total = 0.0
    for k in range(terms):
        total += (-1.0) ** k / (2 * k + 1)
    return 4.0 * total


def measure(functions=None) -> dict:
    functions = functions or {"collatz": longest_chain, "series": series}
    figures = {}
    for name, arg, warm in (("collatz", LIMIT, 1000), ("series", TERMS, 10)):
        fn = functions[name]
        fn(warm)
        start = time.perf_counter()
        value = fn(arg)
        figures[name] = time.perf_counter() - start
        figures[name + "_value"] = value
    return figures


if __name__ == "__main__":
    print(json.dumps(measure()))
"""

PYPROJECT = '[project]\nname = "bench-xla-scalar"\n'


def _numba_worker(model: Path) -> None:
    """Load model.ppy as a module and njit its Python functions (numba resolves the
    global collatz_steps when it compiles longest_chain, so that one goes first)."""
    from numba import njit

    loader = importlib.machinery.SourceFileLoader("bench_model", str(model))
    spec = importlib.util.spec_from_loader("bench_model", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    module.collatz_steps = njit(module.collatz_steps)
    module.longest_chain = njit(module.longest_chain)
    module.series = njit(module.series)
    print(json.dumps(module.measure({"collatz": module.longest_chain, "series": module.series})))


def _run(command: list[str], cwd: Path, env: dict[str, str]) -> dict[str, Any]:
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stdout}\n{done.stderr}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--numba-worker", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.numba_worker:
        _numba_worker(args.numba_worker)
        return 0

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "model.ppy").write_text(textwrap.dedent(MODEL))
        (root / "pyproject.toml").write_text(PYPROJECT)
        env = {**os.environ, "PPY_CACHE_DIR": str(root / "cache")}
        built = subprocess.run(
            [sys.executable, "-m", "ppy", "build", "."],
            cwd=root,
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
        print(built.stdout.rstrip())
        if built.returncode != 0:
            print(built.stderr)
            return 1
        modes = {
            "python": [sys.executable, "model.ppy"],
            "staged": [sys.executable, "-m", "ppy", "run", "--no-build", "model.ppy"],
            "numba": [
                sys.executable,
                str(Path(__file__).resolve()),
                "--numba-worker",
                str(root / "model.ppy"),
            ],
        }
        runs: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
        for _ in range(args.processes):
            for mode, command in modes.items():  # interleaved, so load affects all alike
                runs[mode].append(_run(command, root, env))

    ok = True
    for loop in ("collatz", "series"):
        values = {m: {r[loop + "_value"] for r in rs} for m, rs in runs.items()}
        if len({v for vs in values.values() for v in vs}) != 1:
            print(f"{loop}: results differ between modes: {values}")
            ok = False
        median = {m: statistics.median(r[loop] for r in rs) for m, rs in runs.items()}
        speedup = median["python"] / median["staged"]
        versus_numba = median["staged"] / median["numba"]
        passed = speedup >= 15 and versus_numba <= 3
        ok = ok and passed
        print(
            f"{loop:8s} python {median['python']:.3f} s  staged {median['staged']:.4f} s  "
            f"numba {median['numba']:.4f} s  |  python/staged {speedup:.1f}x (target >= 15)  "
            f"staged/numba {versus_numba:.2f}x (target <= 3)  {'ok' if passed else 'MISSED'}"
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
