"""Runs the xla case's program with numba's ``njit`` on the same function bodies.

    python numba_worker.py model.ppy

It loads ``model.ppy`` as a module, compiles its Python functions with numba
(``collatz_steps`` first: numba resolves it as a global when it compiles
``longest_chain``), and prints what the program's ``measure`` returns.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import sys


def main(path: str) -> None:
    from numba import njit

    loader = importlib.machinery.SourceFileLoader("bench_model", path)
    spec = importlib.util.spec_from_loader("bench_model", loader)
    if spec is None:
        raise SystemExit(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    module.collatz_steps = njit(module.collatz_steps)
    functions = {
        "collatz": njit(module.longest_chain),
        "series": njit(module.series),
        "trivial": njit(module.trivial),
    }
    print(json.dumps(module.measure(functions)))


if __name__ == "__main__":
    main(sys.argv[1])
