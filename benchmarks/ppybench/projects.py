"""The programs the cases run, written into a fresh project directory.

Each is a plain ``.ppy`` project: the page's example as the repository ships
it, a deep dense model whose depth is a parameter, the scalar loops of the
xla plugin, and a project with any number of staged functions for the build
case. A program that times its first call prints ``first_call_s=...`` on
stderr; its stdout is what every mode must print alike.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from ppy.artifact.read import read_artifact

from .machine import ppy_command

__all__ = [
    "build_function",
    "build_project",
    "deep_model",
    "empty_program",
    "optax_training",
    "overhead",
    "page_example",
    "recorded_example",
    "sharded_example",
    "staged_count",
    "xla_scalar",
]

REPOSITORY = Path(__file__).resolve().parents[2]

JAX_PYPROJECT = """\
[project]
name = "{name}"

[tool.ppy]
build-execution = "allow"

[tool.ppy.plugins.jax]
allow-build-export = true
"""

WIDTH = 128

DEEP_MODEL = """\
import sys
import time
from typing import Annotated

import jax
import jax.numpy as jnp
import numpy as np

import ppy

Seed = Annotated[jax.Array, ppy.Shape(), ppy.DType("int32")]
Batch = Annotated[jax.Array, ppy.Shape("B", {width}), ppy.DType("float32")]
Weights = Annotated[jax.Array, ppy.Shape({layers}, {width}, {width}), ppy.DType("float32")]
Biases = Annotated[jax.Array, ppy.Shape({layers}, {width}), ppy.DType("float32")]


@jax.jit
def init(seed: Seed):
    kw, kb, kx = jax.random.split(jax.random.PRNGKey(seed), 3)
    w = jax.random.normal(kw, ({layers}, {width}, {width}), jnp.float32) / {scale}
    b = jax.random.normal(kb, ({layers}, {width}), jnp.float32) / 10
    x = jax.random.normal(kx, (32, {width}), jnp.float32)
    return x, w, b


@jax.jit
def forward(x: Batch, w: Weights, b: Biases) -> jax.Array:
    for i in range({layers}):
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

XLA_MODEL = """\
import json
import time

import jax
from ppy import xla

LIMIT = {limit}
TERMS = {terms}
CALLS = {calls}


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


@xla.jit
def trivial(n: int) -> int:
    return n + 1


# Seconds per call of each side: the best of 5 rounds of CALLS calls, the
# sides alternated round by round.
def per_call(sides: dict) -> dict:
    for call in sides.values():
        for _ in range(1000):
            call()
    best = {{name: float("inf") for name in sides}}
    for _ in range(5):
        for name, call in sides.items():
            start = time.perf_counter()
            for _ in range(CALLS):
                call()
            best[name] = min(best[name], (time.perf_counter() - start) / CALLS)
    return best


def measure(functions=None) -> dict:
    functions = functions or {{"collatz": longest_chain, "series": series, "trivial": trivial}}
    figures = {{}}
    for name, arg, warm in (("collatz", LIMIT, 1000), ("series", TERMS, 10)):
        fn = functions[name]
        fn(warm)
        start = time.perf_counter()
        value = fn(arg)
        figures[name] = time.perf_counter() - start
        figures[name + "_value"] = value
    fn = functions["trivial"]
    # The same function jitted by jax, called with a Python scalar: as it
    # returns (the result still computing) and with its value read as a
    # Python int, which a scalar function's caller gets.
    jitted = jax.jit(lambda n: n + 1)
    figures.update(
        per_call(
            {{
                "trivial": lambda: fn(3),
                "jitted": lambda: jitted(3),
                "jitted_read": lambda: int(jitted(3)),
            }}
        )
    )
    figures["trivial_value"] = fn(3)
    return figures


if __name__ == "__main__":
    print(json.dumps(measure()))
"""

BUILD_FUNCTION = """\
from typing import Annotated

import jax
import jax.numpy as jnp

import ppy

Batch = Annotated[jax.Array, ppy.Shape("B", 8), ppy.DType("float32")]


@jax.jit
def f{index}(x: Batch) -> jax.Array:
    return jnp.tanh(x * {scale}) + {offset}
"""


def _project(root: Path, name: str, files: dict[str, str], pyproject: str = JAX_PYPROJECT) -> Path:
    root.mkdir(parents=True)
    (root / "pyproject.toml").write_text(pyproject.format(name=name))
    for filename, text in files.items():
        (root / filename).write_text(text)
    return root


def recorded_example(root: Path) -> Path:
    """examples/80_recorded: a training program with no annotations, unrecorded."""
    shutil.copytree(
        REPOSITORY / "examples" / "80_recorded", root, ignore=shutil.ignore_patterns(".ppy")
    )
    return root


def empty_program(root: Path) -> Path:
    """A project whose program only prints: what is left is the runner's own cost."""
    return _project(root, "empty", {"model.ppy": 'print("hi")\n'})


def page_example(root: Path) -> Path:
    """The page's example, copied from examples/25_jax_export."""
    shutil.copytree(
        REPOSITORY / "examples" / "25_jax_export", root, ignore=shutil.ignore_patterns(".ppy")
    )
    return root


def deep_model(root: Path, layers: int) -> Path:
    """``forward`` applies ``layers`` dense layers; ``init`` (staged too) makes the weights."""
    text = DEEP_MODEL.format(layers=layers, width=WIDTH, scale=WIDTH**0.5)
    return _project(root, f"deep-{layers}", {"model.ppy": text})


def xla_scalar(root: Path, *, limit: int, terms: int, calls: int) -> Path:
    """The xla plugin's loops (collatz, Leibniz series) and a trivial scalar function."""
    text = XLA_MODEL.format(limit=limit, terms=terms, calls=calls)
    # force-staging: the trivial function measures a staged call's own cost.
    pyproject = '[project]\nname = "{name}"\n[tool.ppy.plugins.xla]\nforce-staging = true\n'
    return _project(root, "xla-scalar", {"model.ppy": text}, pyproject)


def build_function(index: int, version: int = 0) -> str:
    """The source of staged function ``index``; a new ``version`` is an edit."""
    return BUILD_FUNCTION.format(index=index, scale=index + 1, offset=float(version))


def build_project(root: Path, functions: int) -> Path:
    """``functions`` staged functions, one module each, so an edit touches one."""
    files = {f"m{index}.ppy": build_function(index) for index in range(functions)}
    return _project(root, f"build-{functions}", files)


def staged_count(project: Path) -> int:
    """How many entries the built artifact stages (0 when there is none)."""
    path = project / ".ppy" / "artifact.ppyz"
    return len(read_artifact(path).entries) if path.exists() else 0


OVERHEAD_MODEL = """\
import json
import time
from typing import Annotated, Any

import jax
import jax.numpy as jnp

import ppy

CALLS = {calls}
Small = Annotated[jax.Array, ppy.Shape("B", 4), ppy.DType("float32")]


def example_tree():
    return {{f"layer{{i}}": jnp.full((4,), i, jnp.float32) for i in range(10)}}


Tree = Annotated[Any, ppy.Like(example_tree)]
SmallW = Annotated[jax.Array, ppy.Shape(4, 4), ppy.DType("float32")]
Medium = Annotated[jax.Array, ppy.Shape("B", 256), ppy.DType("float32")]
MediumW = Annotated[jax.Array, ppy.Shape(256, 256), ppy.DType("float32")]


@jax.jit
def small(x: Small, w: SmallW) -> jax.Array:
    return jnp.sum(jnp.tanh(x @ w), axis=-1)


@jax.jit
def medium(x: Medium, w: MediumW) -> jax.Array:
    return jnp.sum(jnp.tanh(x @ w), axis=-1)


@jax.jit
def tree(params: Tree, x: Small) -> jax.Array:
    return jnp.sum(jnp.tanh(x * sum(params.values())), axis=-1)


def per_call(sides, *args) -> dict:
    # Best of five rounds of CALLS calls per side, the sides alternated round by round.
    for fn in sides.values():
        for _ in range(200):
            fn(*args)
    best = {{name: float("inf") for name in sides}}
    for _ in range(5):
        for name, fn in sides.items():
            fn(*args).block_until_ready()
            start = time.perf_counter()
            for _ in range(CALLS):
                fn(*args)
            fn(*args).block_until_ready()
            best[name] = min(best[name], (time.perf_counter() - start) / CALLS)
    return best


def main() -> None:
    if not hasattr(small, "ppy_staged"):
        raise SystemExit("run this program with ppy run: it compares staged calls with jitted ones")
    figures = {{}}
    cases = {{
        "small": (small, jnp.ones((8, 4), jnp.float32), jnp.eye(4, dtype=jnp.float32)),
        "medium": (medium, jnp.ones((64, 256), jnp.float32), jnp.eye(256, dtype=jnp.float32)),
        # A dict of ten arrays: the guard's tree check is jax's own, in C++.
        "tree": (tree, example_tree(), jnp.ones((8, 4), jnp.float32)),
        # An input the description refuses (w is 5x5): the call falls back.
        "fallback": (small, jnp.ones((8, 5), jnp.float32), jnp.eye(5, dtype=jnp.float32)),
    }}
    for name, (staged, *args) in cases.items():
        figures[name] = per_call({{"jitted": staged.__ppy_original__, "staged": staged}}, *args)
    if not small.ppy_stats.fallbacks:
        raise SystemExit("the refused input did not fall back")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
"""


def overhead(root: Path, calls: int) -> Path:
    """Staged functions (small, medium, a 10-leaf tree) timed against their jitted originals."""
    return _project(root, "overhead", {"model.ppy": OVERHEAD_MODEL.format(calls=calls)})


OPTAX_HIDDEN = 256
OPTAX_STEPS = 20

OPTAX_MODEL = """\
import sys
import time
from typing import Annotated, Any

import jax
import jax.numpy as jnp
import optax

import ppy

HIDDEN = {hidden}
STEPS = {steps}
optimizer = optax.adamw(1e-3)


def init_params():
    keys = jax.random.split(jax.random.key(0), 3)
    sizes = [(16, HIDDEN), (HIDDEN, HIDDEN), (HIDDEN, 1)]
    return [
        {{"w": jax.random.normal(k, shape, jnp.float32) / shape[0] ** 0.5,
          "b": jnp.zeros(shape[1], jnp.float32)}}
        for k, shape in zip(keys, sizes)
    ]


def init_opt_state():
    return optimizer.init(init_params())


Params = Annotated[Any, ppy.Like(init_params)]
OptState = Annotated[Any, ppy.Like(init_opt_state)]
X = Annotated[jax.Array, ppy.Shape("B", 16), ppy.DType("float32")]
Y = Annotated[jax.Array, ppy.Shape("B", 1), ppy.DType("float32")]


def loss_fn(params, x, y):
    for layer in params[:-1]:
        x = jax.nn.gelu(x @ layer["w"] + layer["b"])
    out = x @ params[-1]["w"] + params[-1]["b"]
    return jnp.mean((out - y) ** 2)


@jax.jit
def train_step(params: Params, opt_state: OptState, x: X, y: Y):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss


def main() -> None:
    params, opt_state = init_params(), init_opt_state()
    x = jnp.linspace(-1.0, 1.0, 64 * 16, dtype=jnp.float32).reshape(64, 16)
    y = jnp.sin(x.sum(axis=1, keepdims=True))
    jax.block_until_ready((params, opt_state, x, y))
    start = time.perf_counter()
    params, opt_state, loss = jax.block_until_ready(train_step(params, opt_state, x, y))
    print(f"first_call_s={{time.perf_counter() - start:.6f}}", file=sys.stderr)
    for _ in range(STEPS - 1):
        params, opt_state, loss = train_step(params, opt_state, x, y)
    print(round(float(loss), 3))


if __name__ == "__main__":
    main()
"""


def optax_unannotated(root: Path) -> Path:
    """The optax training program with no ppy annotation at all, described by
    one ``ppy record`` run (made here, before any timed run)."""
    text = OPTAX_MODEL.format(hidden=OPTAX_HIDDEN, steps=OPTAX_STEPS)
    for written in (
        "import ppy\n",
        "Params = Annotated[Any, ppy.Like(init_params)]\n",
        "OptState = Annotated[Any, ppy.Like(init_opt_state)]\n",
        'X = Annotated[jax.Array, ppy.Shape("B", 16), ppy.DType("float32")]\n',
        'Y = Annotated[jax.Array, ppy.Shape("B", 1), ppy.DType("float32")]\n',
    ):
        if written not in text:
            raise SystemExit(f"OPTAX_MODEL no longer holds {written!r}")
        text = text.replace(written, "")
    text = text.replace(
        "def train_step(params: Params, opt_state: OptState, x: X, y: Y):",
        "def train_step(params, opt_state, x, y):",
    )
    pyproject = JAX_PYPROJECT + '\n[tool.ppy.run]\npreload = ["optax"]\n'
    project = _project(root, "optax-unannotated", {"model.ppy": text}, pyproject)
    return _recorded(project, root.parent / "record-cache")


def _recorded(project: Path, cache: Path) -> Path:
    """``project`` after one ``ppy record model.ppy`` (with its own cache)."""
    recorded = subprocess.run(
        [*ppy_command(), "record", "model.ppy"],
        cwd=project,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PPY_CACHE_DIR": str(cache)},
    )
    if recorded.returncode != 0:
        raise SystemExit(f"ppy record failed in {project}:\n{recorded.stderr}")
    return project


#: The first call of examples/85_main_block's update step, timed as the
#: other programs time theirs.
_MAIN_BLOCK_LOOP = (
    "            opt_state = update(next(itercount), opt_state, next(batches))\n",
    "            if timed:\n"
    "                start = time.perf_counter()\n"
    "                opt_state = jax.block_until_ready(\n"
    "                    update(next(itercount), opt_state, next(batches))\n"
    "                )\n"
    '                print(f"first_call_s={time.perf_counter() - start:.6f}", file=sys.stderr)\n'
    "                timed = False\n"
    "                continue\n"
    "            opt_state = update(next(itercount), opt_state, next(batches))\n",
)


def main_block(root: Path) -> Path:
    """examples/85_main_block, written as jax's own examples are (everything in
    main(), jax.example_libraries' optimizers), its first update timed, and
    described by one ``ppy record`` run (made here, before any timed run)."""
    text = (REPOSITORY / "examples" / "85_main_block" / "model.ppy").read_text()
    counter = "    itercount = itertools.count()\n"
    for written, timed in (
        ("import itertools\n", "import itertools\nimport sys\nimport time\n\nimport jax\n"),
        (counter, f"{counter}    timed = True\n"),
        _MAIN_BLOCK_LOOP,
    ):
        if written not in text:
            raise SystemExit(f"examples/85_main_block/model.ppy no longer holds {written!r}")
        text = text.replace(written, timed)
    project = _project(root, "main-block", {"model.ppy": text})
    return _recorded(project, root.parent / "main-block-record-cache")


def sharded_example(root: Path) -> Path:
    """examples/60_sharded: a data-parallel MLP over four forced host devices."""
    source = REPOSITORY / "examples" / "60_sharded"
    files = {name: (source / name).read_text() for name in ("model.ppy", "pyproject.toml")}
    # _project formats the pyproject with the name: the mesh's braces are literal.
    pyproject = files.pop("pyproject.toml").replace("{", "{{").replace("}", "}}")
    return _project(root, "sharded", files, pyproject)


def optax_training(root: Path, *, opted_in: bool = True) -> Path:
    """An MLP trained with optax; ``train_step`` takes pytrees described by ``ppy.Like``."""
    text = OPTAX_MODEL.format(hidden=OPTAX_HIDDEN, steps=OPTAX_STEPS)
    pyproject = JAX_PYPROJECT if opted_in else '[project]\nname = "{name}"\n'
    # The warm-start server imports optax too (ppy run --warm).
    pyproject += '\n[tool.ppy.run]\npreload = ["optax"]\n'
    return _project(root, "optax-training", {"model.ppy": text}, pyproject)
