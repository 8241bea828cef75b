"""Start-up: a 48-layer model's first call and whole run, staged against not.

A project with one program, ``model.ppy``: ``forward`` applies 48 dense layers,
``tanh(x @ W[i] + b[i])``, to a batch; the weights are made in the program
from ``jax.random`` by ``init``, staged too (an eager jax op would compile the
same way in every mode and hide what staging saves). Every figure is the median of fresh processes:

- first call: ``forward``'s first call as the program times it (trace and
  compile for the jitted function; load from the executable cache for the
  staged one);
- whole run: wall time of ``python model.ppy`` against ``ppy run model.ppy``
  (executable cache warm), and against ``python model.ppy`` with jax's
  persistent compilation cache enabled and warm.

The three modes run in turn, one fresh process each per round, so that drift
on a shared machine hits all of them alike; the comparison with the persistent
cache is also given round by round (each round's ppy run against the same
round's warm python), which drift cannot bias.

    python benchmarks/bench_startup.py [--processes 7]

The artifact comes from ``python -m ppy build``; where no installed plugin
stages ``forward`` (``--self-build``, or the build staged nothing), the
benchmark exports it itself and writes the artifact with ``ppy.artifact``,
then runs ``ppy run --no-build``. ``ppy`` is the console script installed
beside this Python, as a user runs it.

Targets: first call <= 0.3x; whole run <= 0.6x python, and below python with
a warm persistent cache.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LAYERS = 48
WIDTH = 128

PYPROJECT = """\
[project]
name = "startup"

[tool.ppy]
build-execution = "allow"

[tool.ppy.plugins.jax]
allow-build-export = true
"""

MODEL = f"""\
import sys
import time
from typing import Annotated

import jax
import jax.numpy as jnp
import numpy as np

import ppy

Seed = Annotated[jax.Array, ppy.Shape(), ppy.DType("int32")]
Batch = Annotated[jax.Array, ppy.Shape("B", {WIDTH}), ppy.DType("float32")]
Weights = Annotated[jax.Array, ppy.Shape({LAYERS}, {WIDTH}, {WIDTH}), ppy.DType("float32")]
Biases = Annotated[jax.Array, ppy.Shape({LAYERS}, {WIDTH}), ppy.DType("float32")]


@jax.jit
def init(seed: Seed):
    kw, kb, kx = jax.random.split(jax.random.PRNGKey(seed), 3)
    w = jax.random.normal(kw, ({LAYERS}, {WIDTH}, {WIDTH}), jnp.float32) / {WIDTH**0.5}
    b = jax.random.normal(kb, ({LAYERS}, {WIDTH}), jnp.float32) / 10
    x = jax.random.normal(kx, (32, {WIDTH}), jnp.float32)
    return x, w, b


@jax.jit
def forward(x: Batch, w: Weights, b: Biases) -> jax.Array:
    for i in range({LAYERS}):
        x = jnp.tanh(x @ w[i] + b[i])
    return x


def main() -> None:
    x, w, b = jax.block_until_ready(init(np.asarray(0, np.int32)))
    start = time.perf_counter()
    y = forward(x, w, b).block_until_ready()
    print(f"first_call_s={{time.perf_counter() - start:.6f}}", file=sys.stderr)
    print(round(float(np.asarray(y).sum()), 3))


if __name__ == "__main__":
    main()
"""

SELF_BUILD = r"""
import hashlib, sys
from pathlib import Path
import jax
root = Path(sys.argv[1])
sys.path.insert(0, str(root))
import ppy
import model
from ppy.artifact import Artifact, ModuleRecord, write_artifact
from ppy.entry import Entry
from ppy.spec import TensorSpec
B = jax.export.symbolic_shape("B")[0]
def entry(name, specs):
    exported = getattr(jax.export.export(getattr(model, name)), "__call__")(
        *[jax.ShapeDtypeStruct(tuple(B if d == "B" else d for d in s.dims), s.dtype)
          for s in specs])
    outputs = tuple(TensorSpec(tuple(str(d) if not isinstance(d, int) else d for d in a.shape),
                               str(a.dtype)) for a in exported.out_avals)
    return Entry("model", name, "jax.export", tuple(specs), outputs,
                 tuple(exported.platforms), {"export": bytes(exported.serialize())},
                 {"jax_version": jax.__version__,
                  "calling_convention_version": exported.calling_convention_version})
entries = (
    entry("init", [TensorSpec((), "int32", "seed")]),
    entry("forward", [TensorSpec(("B", WIDTH), "float32", "x"),
                      TensorSpec((LAYERS, WIDTH, WIDTH), "float32", "w"),
                      TensorSpec((LAYERS, WIDTH), "float32", "b")]),
)
source = (root / "model.ppy").read_bytes()
artifact = Artifact("startup", "0" * 64, {"jax": jax.__version__},
                    (ModuleRecord("model", "model.ppy", hashlib.sha256(source).hexdigest()),),
                    entries, ())
write_artifact(artifact, Path(sys.argv[2]))
""".replace("LAYERS", str(LAYERS)).replace("WIDTH", str(WIDTH))


def timed(command: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float, str]:
    """(wall seconds, the program's first-call seconds, stdout)."""
    start = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stdout}\n{done.stderr}")
    found = re.search(r"first_call_s=([0-9.]+)", done.stderr)
    if found is None:
        raise SystemExit(f"{' '.join(command)} did not report its first call:\n{done.stderr}")
    return wall, float(found.group(1)), done.stdout


def artifact_entries(project: Path, env: dict[str, str]) -> int:
    probe = (
        "import sys; from pathlib import Path; from ppy.artifact import read_artifact; "
        "print(len(read_artifact(Path(sys.argv[1])).entries))"
    )
    path = project / ".ppy" / "artifact.ppyz"
    if not path.exists():
        return 0
    done = subprocess.run(
        [sys.executable, "-c", probe, str(path)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    return int(done.stdout.strip() or 0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=7)
    parser.add_argument("--self-build", action="store_true")
    args = parser.parse_args()
    n = args.processes
    ppy = Path(sys.executable).with_name("ppy")
    ppy_command = [str(ppy)] if ppy.exists() else [sys.executable, "-m", "ppy"]
    with tempfile.TemporaryDirectory() as tmp:
        project = Path(tmp) / "project"
        project.mkdir()
        (project / "pyproject.toml").write_text(PYPROJECT)
        (project / "model.ppy").write_text(MODEL)
        env = {**os.environ, "PPY_CACHE_DIR": str(Path(tmp) / "ppy-cache")}
        env.pop("JAX_COMPILATION_CACHE_DIR", None)
        run = [*ppy_command, "run", "model.ppy"]
        built_by = "ppy build"
        if not args.self_build:
            subprocess.run(
                [*ppy_command, "build"],
                cwd=project,
                env=env,
                capture_output=True,
                text=True,
                check=False,
            )
        if args.self_build or artifact_entries(project, env) == 0:
            built_by = "this benchmark (no plugin staged forward)"
            artifact = project / ".ppy" / "artifact.ppyz"
            artifact.parent.mkdir(exist_ok=True)
            subprocess.run(
                [sys.executable, "-c", SELF_BUILD, str(project), str(artifact)], env=env, check=True
            )
            run = [*ppy_command, "run", "--no-build", "model.ppy"]
        persistent = {
            **env,
            "JAX_COMPILATION_CACHE_DIR": str(Path(tmp) / "jax-cache"),
            "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
            "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "-1",
        }
        python = [sys.executable, "model.ppy"]
        modes = {"python": (python, env), "persistent": (python, persistent), "ppy": (run, env)}
        timed(run, project, env)  # fills the executable cache
        timed(python, project, persistent)  # fills jax's persistent cache
        samples: dict[str, list[tuple[float, float, str]]] = {name: [] for name in modes}
        for _ in range(n):
            for name, (command, environment) in modes.items():
                samples[name].append(timed(command, project, environment))
        digest = hashlib.sha256(MODEL.encode()).hexdigest()[:12]
    outputs = {s[2] for runs in samples.values() for s in runs}
    if len(outputs) != 1:
        raise SystemExit(f"the modes printed different things: {outputs}")
    wall = {name: statistics.median(s[0] for s in runs) for name, runs in samples.items()}
    first = {name: statistics.median(s[1] for s in runs) for name, runs in samples.items()}
    print(
        f"model: {LAYERS} dense layers of width {WIDTH} (model.ppy {digest}), artifact by "
        f"{built_by}; medians of {n} rounds of fresh processes, modes interleaved"
    )
    print(
        f"first call   python {first['python'] * 1e3:8.1f} ms   persistent cache "
        f"{first['persistent'] * 1e3:8.1f} ms   ppy run {first['ppy'] * 1e3:8.1f} ms"
    )
    print(
        f"whole run    python {wall['python']:8.3f} s    persistent cache "
        f"{wall['persistent']:8.3f} s    ppy run {wall['ppy']:8.3f} s"
    )
    print(f"first call: staged / jitted {first['ppy'] / first['python']:.2f}x (target <= 0.30)")
    print(f"whole run: ppy run / python {wall['ppy'] / wall['python']:.2f}x (target <= 0.60)")
    print(
        f"whole run: ppy run / python with warm persistent cache "
        f"{wall['ppy'] / wall['persistent']:.2f}x (target < 1.00)"
    )
    paired = sorted(
        staged[0] / warm[0]
        for staged, warm in zip(samples["ppy"], samples["persistent"], strict=True)
    )
    print(
        f"  round by round: median {statistics.median(paired):.2f}x, "
        f"ppy run faster in {sum(r < 1 for r in paired)} of {n} rounds "
        f"(range {paired[0]:.2f}..{paired[-1]:.2f})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
