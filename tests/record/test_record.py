"""``ppy record`` then ``ppy build`` then ``ppy run``: a program with no ppy
annotations is staged from what a real run called, and prints what python
prints."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import PERMISSIONS
from tests.support.differential import differential
from tests.support.events import json_events

TRAIN = """
import sys
import jax
import jax.numpy as jnp


@jax.jit
def predict(w, x):
    return jnp.tanh(x @ w)


@jax.jit
def loss(w, x, y):
    return jnp.mean((predict(w, x) - y) ** 2)


def main(batches):
    w = jnp.ones((4, 3), jnp.float32) / 4
    for batch in batches:
        x = jnp.arange(batch * 4, dtype=jnp.float32).reshape(batch, 4) / 100
        y = jnp.zeros((batch, 3), jnp.float32)
        print(batch, round(float(loss(w, x, y)), 6), predict(w, x).shape)


if __name__ == "__main__":
    main([int(b) for b in sys.argv[1:]] or [8])
"""


def _project(tmp_path: Path, source: str = TRAIN) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    (root / "model.ppy").write_text(textwrap.dedent(source).lstrip())
    (root / "pyproject.toml").write_text(PERMISSIONS)
    return root


def _ppy(root: Path, cache: Path, *args: str) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run(
        [sys.executable, "-m", "ppy", *args],
        cwd=root,
        env={**os.environ, "PPY_CACHE_DIR": str(cache)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _file(root: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((root / ".ppy" / "signatures.json").read_text())
    return data


def _recorded(tmp_path: Path, source: str, *argv: str) -> tuple[Path, Path, dict[str, Any]]:
    """A project of ``source`` recorded once with ``argv``: its root, its
    executable cache, and the recorded functions."""
    root = _project(tmp_path, source)
    cache = tmp_path / "cache"
    recorded = _ppy(root, cache, "record", "model.ppy", *argv)
    assert recorded.returncode == 0, recorded.stderr
    return root, cache, _file(root)["functions"]


@dataclass(frozen=True)
class Recording:
    """``TRAIN`` recorded once with some argv, for the tests of this file that
    start from that recording: read ``root``, or work on a ``copy``."""

    root: Path
    #: What ``ppy record model.ppy ARGV`` did.
    done: subprocess.CompletedProcess[str]

    def copy(self, tmp_path: Path) -> tuple[Path, Path]:
        """The test's own copy of the recorded project, and a fresh executable cache."""
        return shutil.copytree(self.root, tmp_path / "project"), tmp_path / "cache"


@pytest.fixture(scope="module")
def recordings(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Recording]:
    """``recordings(*argv)``: ``TRAIN`` recorded with ``argv``, once per argv."""
    made: dict[tuple[str, ...], Recording] = {}

    def get(*argv: str) -> Recording:
        if argv not in made:
            base = tmp_path_factory.mktemp("recorded")
            root = _project(base)
            made[argv] = Recording(root, _ppy(root, base / "cache", "record", "model.ppy", *argv))
        return made[argv]

    return get


def test_record_prints_what_python_prints_and_writes_the_signatures(
    recordings: Callable[..., Recording],
) -> None:
    shared = recordings("32", "128")
    root, recorded = shared.root, shared.done
    plain = subprocess.run(
        [sys.executable, "model.ppy", "32", "128"], cwd=root, capture_output=True, text=True
    )
    assert (recorded.stdout, recorded.stderr, recorded.returncode) == (
        plain.stdout,
        plain.stderr,
        plain.returncode,
    )
    data = _file(root)
    assert data["runs"] == 1
    loss = data["functions"]["model.loss"]
    assert loss["calls"] == 2
    # B took 32 and 128, in x and y alike: one symbol; the 4 and the 3 never moved.
    assert loss["description"] == {
        "w": "float32[4,3]",
        "x": "float32[B,4]",
        "y": "float32[B,3]",
    }
    assert loss["dims"] == {"B": [32, 128]}
    # predict is called by main (2), and inside the traces of loss, which are not calls.
    assert data["functions"]["model.predict"]["calls"] == 2


def test_a_recorded_function_is_staged_and_serves_a_third_size(
    tmp_path: Path, recordings: Callable[..., Recording]
) -> None:
    shared = recordings("32", "128")
    assert shared.done.returncode == 0, shared.done.stderr
    root, cache = shared.copy(tmp_path)
    built = _ppy(root, cache, "build")
    assert built.returncode == 0, built.stdout + built.stderr
    (line,) = [line for line in built.stdout.splitlines() if " loss(" in line]
    assert "loss(w: float32[4,3], x: float32[B,4], y: float32[B,3])" in line
    assert line.endswith("exported for cpu; recorded: 2 calls in 1 run"), line
    compared = differential(root, "7", cache=cache, build=False)
    assert {"loss", "predict"} <= compared.bound()
    assert compared.staged_calls("loss") == 1  # batch 7, never recorded: the symbolic export
    assert not compared.fallbacks()


def test_a_second_recording_merges_and_replace_starts_afresh(tmp_path: Path) -> None:
    root = _project(tmp_path)
    cache = tmp_path / "cache"
    _ppy(root, cache, "record", "model.ppy", "32")
    assert _file(root)["functions"]["model.loss"]["description"]["x"] == "float32[32,4]"
    _ppy(root, cache, "record", "model.ppy", "64")
    merged = _file(root)
    assert merged["runs"] == 2
    assert merged["functions"]["model.loss"]["description"]["x"] == "float32[B,4]"
    assert merged["functions"]["model.loss"]["dims"] == {"B": [32, 64]}
    _ppy(root, cache, "record", "--replace", "model.ppy", "16")
    fresh = _file(root)
    assert fresh["runs"] == 1
    assert fresh["functions"]["model.loss"]["description"]["x"] == "float32[16,4]"


STATIC = """
from functools import partial
import jax
import jax.numpy as jnp


@partial(jax.jit, static_argnames=("mode",))
def act(x, mode):
    return jnp.tanh(x) if mode == "tanh" else jax.nn.relu(x)


for mode in ("tanh", "relu", "tanh"):
    print(mode, act(jnp.linspace(-1, 1, 5), mode=mode))
"""


def test_static_values_become_variants(tmp_path: Path) -> None:
    root = _project(tmp_path, STATIC)
    cache = tmp_path / "cache"
    assert _ppy(root, cache, "record", "model.ppy").returncode == 0
    assert _file(root)["functions"]["model.act"]["description"] == {
        "x": "float32[5]",
        "mode": 'static "tanh", "relu"',
    }
    compared = differential(root, cache=cache)
    assert compared.staged_calls("act") == 3


ANNOTATED = """
from typing import Annotated
import jax
import jax.numpy as jnp
import ppy


@jax.jit
def double(x: Annotated[jax.Array, ppy.Shape("N"), ppy.DType("float32")]):
    return x * 2


print(double(jnp.ones(3, jnp.int32)))
"""


def test_an_annotation_wins_and_a_disagreeing_recording_is_reported(tmp_path: Path) -> None:
    root = _project(tmp_path, ANNOTATED)
    cache = tmp_path / "cache"
    assert _ppy(root, cache, "record", "model.ppy").returncode == 0
    built = _ppy(root, cache, "build")
    assert "build.recording_disagrees" in built.stderr
    assert "int32[3]" in built.stderr and "float32[N]" in built.stderr
    assert "double(x: float32[N])" in built.stdout


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("{not json", "line 1: not JSON"),
        ('{"format": "ppy-signatures", "version": 1, "runs": 1,\n "functions": []}', "line 2"),
        (
            '{"format": "ppy-signatures", "version": 1, "runs": 1, "functions": {\n'
            '  "model.loss": {"signatures": [{"calls": 1, "inputs": {\n'
            '    "x": {"array": "float32[B,4]"}}}]}}}',
            "line 3",
        ),
        (
            '{"format": "ppy-signatures", "version": 1, "runs": 1, "functions": {\n'
            '  "model.loss": {"signatures": [{"calls": 1, "inputs": {\n'
            '    "x": {"pickle": "cos\\nsystem\\n"}}}]}}}',
            "unknown kind",
        ),
        (
            '{"format": "ppy-signatures", "version": 1, "runs": 1, "functions": {\n'
            '  "model.loss": {"signatures": [{"calls": 1, "inputs": {\n'
            '    "x": {"nest": {"node": {"type": "os:system(\'rm -rf x\')", "data": null,\n'
            '          "children": []}}}}}]}}}',
            "line 3",
        ),
        (
            '{"format": "ppy-signatures", "version": 1, "runs": 1, "functions": {\n'
            '  "model.loss": {"signatures": [{"calls": 1, "inputs": {\n'
            '    "x": {"nest": {"node": {"type": "optax:State",\n'
            '          "data": {"call": "os:system"}, "children": []}}}}}]}}}',
            "line 3",
        ),
        (
            '{"format": "ppy-signatures", "version": 1, "runs": 1, "functions": {\n'
            '  "model.loss": {"signatures": [{"calls": 1, "inputs": {\n'
            '    "<closure>": {"closure": {"lr": {"ref": "os:system(1)"}}}}}]}}}',
            "line 3",
        ),
        ("[" * 100000 + "]" * 100000, "line 1"),
        (
            '{"format": "ppy-signatures", "version": 1, "runs": 1, "functions": {\n'
            '  "model.loss": {"signatures": [{"calls": 1, "inputs": {\n'
            '    "x": {"array": "float99[3]"}}}]}}}',
            "line 3: model.loss: input 'x': 'float99' is not a dtype",
        ),
        (
            '{"format": "ppy-signatures", "version": 1, "runs": 1, "functions": {\n'
            '  "model.loss": {"signatures": [{"calls": 1, "inputs": {\n'
            '    "w": {"nest": {"list": [{"array": "float32[2]"},\n'
            '          {"array": "object[3]"}]}}}}]}}}',
            "line 3: model.loss: input 'w': 'object' is not a dtype",
        ),
    ],
    ids=[
        "not json",
        "functions not an object",
        "a symbol in a recorded array",
        "pickle",
        "a node's type is code",
        "a node's metadata is not data",
        "a closure's value is code",
        "deep",
        "an unknown dtype",
        "an unknown dtype in a nest",
    ],
)
def test_a_bad_file_is_an_error_naming_the_line(tmp_path: Path, text: str, where: str) -> None:
    root = _project(tmp_path)
    (root / ".ppy").mkdir()
    (root / ".ppy" / "signatures.json").write_text(text)
    for command in (("build",), ("record", "model.ppy")):
        done = _ppy(root, tmp_path / "cache", *command)
        assert done.returncode == 2, done.stderr
        assert "signatures.json" in done.stderr and where in done.stderr, done.stderr
        assert "Traceback" not in done.stderr
        assert done.stdout == "" or command == ("build",)


def test_a_run_ended_by_an_uncaught_keyboard_interrupt_is_written(tmp_path: Path) -> None:
    """Ctrl-C that the program does not catch ends it as python's ends (by
    SIGINT, after its exit handlers), and what it called until then is in
    the file, as for any other uncaught exception."""
    root = _project(tmp_path, TRAIN.rstrip() + "\n    raise KeyboardInterrupt\n")
    plain = subprocess.run(
        [sys.executable, "model.ppy", "8"], cwd=root, capture_output=True, text=True
    )
    recorded = _ppy(root, tmp_path / "cache", "record", "model.ppy", "8")
    assert (recorded.returncode, recorded.stdout) == (plain.returncode, plain.stdout)
    assert plain.returncode == -signal.SIGINT
    assert _file(root)["functions"]["model.loss"]["calls"] == 1


def test_a_recorded_function_that_is_gone_is_reported_and_ignored(
    tmp_path: Path, recordings: Callable[..., Recording]
) -> None:
    root, cache = recordings("8").copy(tmp_path)  # main's own default, [8]
    source = (root / "model.ppy").read_text().replace("def predict", "def forecast")
    (root / "model.ppy").write_text(source.replace("predict(", "forecast("))
    built = _ppy(root, cache, "build")
    assert built.returncode == 0, built.stderr
    assert "build.recording_unknown" in built.stderr and "model.predict" in built.stderr


def test_a_new_recording_makes_the_artifact_stale(
    tmp_path: Path, recordings: Callable[..., Recording]
) -> None:
    root, cache = recordings("8").copy(tmp_path)
    assert _ppy(root, cache, "build").returncode == 0
    _ppy(root, cache, "record", "model.ppy", "16")
    ran = _ppy(root, cache, "-v", "run", "model.ppy", "24")
    # The recording changed, not the configuration: rebuilt before the run, saying so.
    (rebuilt,) = [line for line in ran.stderr.splitlines() if "run.build " in line]
    assert "the recorded signatures (.ppy/signatures.json) changed" in rebuilt, rebuilt
    assert "float32[B,4]" in _ppy(root, cache, "explain", "loss").stdout
    # A change of [tool.ppy] is still named as such.
    with (root / "pyproject.toml").open("a") as pyproject:
        pyproject.write("export-timeout = 100\n")  # in [tool.ppy.plugins.jax]
    ran = _ppy(root, cache, "-v", "run", "model.ppy", "24")
    (rebuilt,) = [line for line in ran.stderr.splitlines() if "run.build " in line]
    assert "the [tool.ppy] configuration changed" in rebuilt, rebuilt


NESTED = """
import sys
import jax
import jax.numpy as jnp


def init(sizes):
    pairs = zip(sizes[:-1], sizes[1:], strict=True)
    return [(jnp.ones((m, n), jnp.float32) / m, jnp.zeros(n, jnp.float32)) for m, n in pairs]


@jax.jit
def predict(params, x):
    for w, b in params[:-1]:
        x = jnp.tanh(x @ w + b)
    w, b = params[-1]
    return x @ w + b


@jax.jit
def loss(params, batch):
    x, y = batch
    return jnp.mean((predict(params, x) - y) ** 2)


params = {"layers": init([4, 8, 2])}
for n in [int(a) for a in sys.argv[1:]]:
    x = jnp.arange(n * 4, dtype=jnp.float32).reshape(n, 4) / 10
    print(n, predict(params["layers"], x).sum(), loss(params["layers"], (x, jnp.zeros((n, 2)))))
"""


def test_plain_lists_tuples_and_dicts_of_arrays_are_described(tmp_path: Path) -> None:
    root, cache, functions = _recorded(tmp_path, NESTED, "3", "7")
    described = functions["model.loss"]["description"]
    assert described == {
        "batch": "(float32[B,4], float32[B,2])",
        "params": "[(float32[4,8], float32[8]), (float32[8,2], float32[2])]",
    }
    compared = differential(root, "11", cache=cache)
    assert compared.bound() == {"predict", "loss"}
    assert compared.staged_calls("loss") == 1 and not compared.fallbacks()


WEAK = """
import sys
import jax
import jax.numpy as jnp


@jax.jit
def step(w, x):
    return w * 0.5 + x.sum(axis=0)


@jax.jit
def double(params):
    return {"w": params["w"] * 2}


w = jnp.full((4,), 0.1)  # weakly typed, as the loop's first call passes it
for n in [int(a) for a in sys.argv[1:]]:
    w = step(w, jnp.ones((n, 4), jnp.float32))  # strongly typed from here on
    print(w)
d = double({"w": jnp.full((3,), 1.5)})["w"]
print(d, (d + jnp.ones(3, jnp.bfloat16)).dtype)
"""


def test_an_input_recorded_weakly_typed_gets_a_variant_of_its_own(tmp_path: Path) -> None:
    # jit traces a weakly typed call apart, and its outputs stay weak: python
    # adds the weak result to bfloat16 in bfloat16.
    root, cache, described = _recorded(tmp_path, WEAK, "2", "3")
    assert described["model.step"]["description"] == {
        "w": "(weak) float32[4]",
        "x": "float32[B,4]",
    }
    assert described["model.double"]["description"] == {"params": "{'w': (weak) float32[3]}"}
    compared = differential(root, "5", "6", "7", cache=cache)
    assert compared.python.stdout.endswith("[3. 3. 3.] bfloat16\n")
    assert compared.staged_calls("step") == 3 and compared.staged_calls("double") == 1
    assert not compared.fallbacks()


BY_CALL = """
import os
import sys
from functools import partial
from typing import Annotated
import jax
import jax.numpy as jnp
import numpy as np
import ppy

WIDTH = 0.5
NOISE = np.random.default_rng(int(os.environ.get("SEED", "0"))).random(3).astype(np.float32)


def scale(x, factor):
    return x * factor


def shift(x: Annotated[jax.Array, ppy.Shape("N"), ppy.DType("float32")]):
    return x + 1


def center(x):
    return x - jnp.mean(x)


def exp_kernel(x, y):
    return jnp.exp(-((x - y) ** 2) / WIDTH)


def gram(kernel, xs, ys):
    return jax.vmap(lambda x: jax.vmap(lambda y: kernel(x, y))(ys))(xs)


def loss(w, x):
    return jnp.sum(jnp.tanh(x * w) ** 2)


def add(noise, x):
    return x.sum() + noise


scaled = jax.jit(scale, static_argnames=("factor",))
shift = jax.jit(shift)
center = jax.jit(center)
gram_ = jax.jit(partial(gram, exp_kernel))
rows = jax.jit(jax.vmap(center))
grad_fun = jax.jit(jax.grad(loss))
noisy = jax.jit(partial(add, NOISE))

for n in [int(a) for a in sys.argv[1:]]:
    x = jnp.arange(n, dtype=jnp.float32)
    print(scaled(x, factor=2), shift(x), center(x))
    print(gram_(x, x).sum().round(3), rows(jnp.stack([x, 2 * x])))
    print(grad_fun(jnp.float32(0.5), x), noisy(x))
"""


def test_a_function_jitted_by_a_call_is_recorded_and_staged(tmp_path: Path) -> None:
    root = _project(tmp_path, BY_CALL)
    cache = tmp_path / "cache"
    # Annotated through the function it wraps: staged with no recording at all.
    built = _ppy(root, cache, "build", "--keep-going")
    (line,) = [line for line in built.stdout.splitlines() if "shift(" in line]
    assert line.split()[2] == "exported" and "shift(x: float32[N])" in line
    assert _ppy(root, cache, "record", "model.ppy", "3", "5").returncode == 0
    functions = _file(root)["functions"]
    assert functions["model.scaled"]["description"] == {"factor": "static 2", "x": "float32[B]"}
    assert functions["model.center"]["description"] == {"x": "float32[B]"}
    # What a partial binds is no input: the kernel and the noise are left out.
    assert functions["model.gram_"]["description"] == {"xs": "float32[B]", "ys": "float32[B]"}
    assert functions["model.noisy"]["description"] == {"x": "float32[B]"}
    # vmap adds the batch axis its function's inputs lack; grad takes its inputs.
    assert functions["model.rows"]["description"] == {"x": "float32[2,B]"}
    assert functions["model.grad_fun"]["description"] == {"w": "float32[]", "x": "float32[B]"}
    compared = differential(root, "4", cache=cache)
    every = {"scaled", "shift", "center", "gram_", "rows", "grad_fun", "noisy"}
    assert compared.bound() == every
    assert all(compared.staged_calls(name) == 1 for name in every - {"shift", "center"})
    assert not compared.fallbacks()
    # Another process draws other noise, which the export baked in at build
    # time: the partial's bound value is compared, and the call is jit's.
    other = differential(root, "4", cache=cache, build=False, env={"SEED": "1"})
    (fallback,) = other.fallbacks()
    assert (fallback["function"], fallback["category"]) == ("noisy", "captured")
    assert other.staged_calls("gram_") == 1


MADE = """
import os
import sys
from functools import partial

import jax
import jax.numpy as jnp

SCALE = 0.5


def loss(w, x):
    return jnp.mean((x @ w - 1.0) ** 2) * SCALE


def minimize(w, x, steps):
    @jax.jit
    def update(w, x):
        return w - 0.1 * jax.grad(loss)(w, x)

    for _ in range(steps):
        w = update(w, x)
    return w, type(update).__name__


def fit(w, x, lr):
    @partial(jax.jit, static_argnames=("n",))
    def step(w, x, n):
        return w - lr * n * jax.grad(loss)(w, x)

    return step(w, x, 2)


def main(batches):
    for batch in batches:
        x = jnp.linspace(0.0, 1.0, batch * 3).reshape(batch, 3)
        w, kind = minimize(jnp.ones(3), x, 3)
        print(batch, w, kind, report(w), fit(w, x, float(os.environ.get("LR", "0.1"))))


if __name__ == "__main__":

    @jax.jit
    def report(w):
        return jnp.sum(w * w)

    main([int(b) for b in sys.argv[1:]] or [8])
"""


def test_a_jit_made_inside_a_function_or_under_the_main_guard_is_recorded_and_staged(
    tmp_path: Path,
) -> None:
    root, cache, functions = _recorded(tmp_path, MADE, "8", "16")
    update = functions["model.minimize.<locals>.update"]
    assert (update["calls"], update["description"]) == (6, {"w": "float32[3]", "x": "float32[B,3]"})
    assert functions["model.report"]["description"] == {"w": "float32[3]"}
    # What step reads of fit (lr) is a literal: recorded, and given back at build.
    step = functions["model.fit.<locals>.step"]
    assert step["description"]["<closure>"] == "lr=0.1"
    built = _ppy(root, cache, "build")
    lines = {line.split()[1]: line for line in built.stdout.splitlines() if "model" in line}
    every = {"minimize.<locals>.update", "fit.<locals>.step", "report"}
    assert all(lines[name].split()[2] == "exported" for name in every)
    # Each minimize() makes its update anew: each is staged, at sizes never recorded,
    # and answers as jit's own (PjitFunction).
    compared = differential(root, "12", "20", cache=cache, build=False)
    assert compared.bound() == every
    assert compared.staged_calls("minimize.<locals>.update") == 6
    assert compared.staged_calls("report") == compared.staged_calls("fit.<locals>.step") == 2
    assert not compared.fallbacks()
    # Another lr than the build's: compared where jit traces, and jit's path taken.
    other = differential(root, "12", cache=cache, build=False, env={"LR": "0.2"})
    assert {(f["function"], f["category"]) for f in other.fallbacks()} == {
        ("fit.<locals>.step", "captured")
    }
    assert other.staged_calls("minimize.<locals>.update") == 3


MADE_BY_CALLS = """
import os
import sys
from functools import partial
import jax
import jax.numpy as jnp
from jax import jit

WIDTH = float(os.environ.get("WIDTH", "0.5"))


def exp_kernel(x, y):
    return jnp.exp(-((x - y) ** 2) / WIDTH)


def gram(kernel, xs, ys):
    return jax.vmap(lambda x: jax.vmap(lambda y: kernel(x, y))(ys))(xs)


def center(x):
    return x - jnp.mean(x)


def train(xs, scale):
    gram_ = jit(partial(gram, exp_kernel))
    if xs.shape[0] > 0:
        rows = jax.jit(jax.vmap(center))
    scaled = jax.jit(partial(gram, lambda x, y: x * y * scale))  # reads scale: the run's
    return gram_(xs, xs).sum().round(3), rows(jnp.stack([xs, 2 * xs])), scaled(xs, xs).sum()


for n in [int(a) for a in sys.argv[1:]]:
    print(*train(jnp.arange(n, dtype=jnp.float32), float(os.environ.get("SCALE", "2.0"))))
"""


def test_a_jit_made_by_a_call_inside_a_function_is_recorded_and_staged(tmp_path: Path) -> None:
    # jit(partial(gram, kernel)) and jax.jit(jax.vmap(center)) inside train: made
    # each time train runs, bound where they are made, by the line that makes them.
    # scaled's call reads train's scale: the recorded run exports it.
    root, cache, functions = _recorded(tmp_path, MADE_BY_CALLS, "3", "5")
    assert functions["model.train.<locals>.gram_"]["description"] == {
        "xs": "float32[B]",
        "ys": "float32[B]",
    }
    assert functions["model.train.<locals>.rows"]["description"] == {"x": "float32[2,B]"}
    built = _ppy(root, cache, "build")
    lines = {line.split()[1]: line for line in built.stdout.splitlines() if "model" in line}
    assert lines["train.<locals>.gram_"].split()[2] == "exported", built.stdout
    assert lines["train.<locals>.rows"].split()[2] == "exported", built.stdout
    assert "in the recorded run" in lines["train.<locals>.scaled"], built.stdout
    compared = differential(root, "4", "7", cache=cache, build=False)
    made = {"train.<locals>.gram_", "train.<locals>.rows", "train.<locals>.scaled"}
    assert compared.bound() == made
    assert all(compared.staged_calls(name) == 2 for name in made)
    assert not compared.fallbacks()
    # What the partial's function reads is compared where jit traces: another
    # kernel width than the build's takes jit's path.
    other = differential(root, "4", cache=cache, build=False, env={"WIDTH": "2.0"})
    assert {(f["function"], f["category"]) for f in other.fallbacks()} == {
        ("train.<locals>.gram_", "captured")
    }
    # Another scale than the recorded run's, in the lambda scaled's partial binds.
    scaled = differential(root, "4", cache=cache, build=False, env={"SCALE": "3.0"})
    assert {(f["function"], f["category"]) for f in scaled.fallbacks()} == {
        ("train.<locals>.scaled", "captured")
    }


CLOSED_OVER_AN_ARRAY = """
import jax
import jax.numpy as jnp


def train(x):
    scale = jnp.arange(3.0)

    @jax.jit
    def step(x):
        return x * scale

    return step(x)


print(train(jnp.ones(3)))
"""


def test_a_jit_made_inside_a_function_that_reads_an_array_of_it_is_exported_by_the_recording(
    tmp_path: Path,
) -> None:
    """The build alone does not have ``scale``; the recorded process does, and
    exports ``step`` with it baked in as jit bakes it (docs/recording.md)."""
    root = _project(tmp_path, CLOSED_OVER_AN_ARRAY)
    cache = tmp_path / "cache"
    assert _ppy(root, cache, "record", "model.ppy").returncode == 0
    built = _ppy(root, cache, "build", "--keep-going")
    (line,) = [line for line in built.stdout.splitlines() if "step" in line]
    assert line.split()[2] == "exported", line
    assert "in the recorded run, at 1 signature (1 call)" in line
    compared = differential(root, cache=cache, build=False)
    assert compared.staged_calls("train.<locals>.step") == 1


X64_FIRST = """
import os

os.environ["JAX_ENABLE_X64"] = "1"  # read by jax as it loads: before its import

import jax
import jax.numpy as jnp

if __name__ == "__main__":

    @jax.jit
    def double(x):
        return x * 2

    print(double(jnp.arange(3.0)).dtype)
"""


def test_a_jit_made_as_the_program_runs_leaves_jax_to_the_programs_import(
    tmp_path: Path,
) -> None:
    # Finding where jax.jit makes it must not import jax ahead of the program.
    root = _project(tmp_path, X64_FIRST)
    cache = tmp_path / "cache"
    recorded = _ppy(root, cache, "record", "model.ppy")
    assert recorded.returncode == 0 and recorded.stdout == "float64\n", recorded.stderr
    compared = differential(root, cache=cache, quiet_stderr=None)
    assert compared.python.stdout == "float64\n"
    assert compared.bound() == {"double"}


SURFACE = """
import jax
import jax.numpy as jnp


@jax.jit
def score(x):
    \"\"\"The row sums.\"\"\"
    return jnp.sum(x, axis=-1)


x = jnp.ones((2, 4))
print(score.__name__, score.__qualname__, score.__doc__, score.__module__)
print(score.__wrapped__.__name__, type(score.__wrapped__).__name__)
print(score.lower(x).as_text() == jax.jit(score.__wrapped__).lower(x).as_text())
print(score.eval_shape(x))
print(score(x), score(x))
print(type(score).__name__, isinstance(score, type(jax.jit(abs))))
print(score._cache_size())
score.clear_cache()
print(score._cache_size(), score(jnp.ones((3, 4))), score._cache_size())
"""


def test_a_recorded_function_answers_as_jit_s_own(tmp_path: Path) -> None:
    """Under ``ppy record`` a jitted function is still jit's own kind of
    object: its type, its cache and what it wraps answer as under python."""
    root = _project(tmp_path, SURFACE)
    plain = subprocess.run(
        [sys.executable, "model.ppy"], cwd=root, capture_output=True, text=True, check=False
    )
    recorded = _ppy(root, tmp_path / "cache", "record", "model.ppy")
    assert (recorded.stdout, recorded.stderr, recorded.returncode) == (
        plain.stdout,
        plain.stderr,
        plain.returncode,
    )
    assert "PjitFunction True" in plain.stdout
    score = _file(root)["functions"]["model.score"]
    assert score["calls"] == 3 and score["description"] == {"x": "float32[B,4]"}


def test_typed_prng_key_inputs_and_outputs_are_recorded_and_staged(tmp_path: Path) -> None:
    """``random.key(...)`` passed to a jitted function and returned by it (jax's
    mnist_vae does): one key at two sizes of the array beside it, a batch of
    keys, a key of another implementation. The recording prints what python
    prints, and every call is served staged with python's output, keys
    included (their key data printed)."""
    source = """
    import jax
    import jax.numpy as jnp
    from jax import random


    @jax.jit
    def noisy(key, x):
        key, sub = random.split(key)
        return key, x + random.normal(sub, x.shape)


    @jax.jit
    def per_row(keys, x):
        return jax.vmap(lambda k, row: row + random.uniform(k, row.shape))(keys, x)


    @jax.jit
    def bits(key):
        return random.split(key)[0], random.bits(key, (2,))


    key = random.key(0)
    for n in (3, 5):
        key, y = noisy(key, jnp.zeros(n))
        print(y.sum(), random.key_data(key), key.dtype)
    print(per_row(random.split(key, 4), jnp.ones((4, 2))))
    other, y = bits(random.key(1, impl="rbg"))
    print(y, random.key_data(other), other.dtype)
    """
    root = _project(tmp_path, source)
    cache = tmp_path / "cache"
    plain = subprocess.run([sys.executable, "model.ppy"], cwd=root, capture_output=True, text=True)
    recorded = _ppy(root, cache, "--log-format", "json", "record", "model.ppy")
    assert (recorded.stdout, recorded.returncode) == (plain.stdout, plain.returncode)
    assert "Traceback" not in recorded.stderr
    assert not json_events(recorded.stderr, "record.skipped")
    compared = differential(root, cache=cache, quiet_stderr=None)
    assert compared.staged_calls("noisy") == 2
    assert compared.staged_calls("per_row") == 1
    assert compared.staged_calls("bits") == 1


GRADIENTS = """
import sys

import jax
import jax.numpy as jnp
import numpy as np

OTHER = sys.argv[1:] == ["other"]


@jax.jit
def surface(board):
    return [[(b - a) * 10.0, a - i * 0.1] for i, (a, b) in enumerate(zip(board, board[1:]))]


@jax.jit
def solve(k, l, x0, v):
    d = jnp.sqrt(v * v + 4.9 * (l - k * x0))
    return (-v - d) / 9.8, (-v + d) / 9.8, k * d, l * d


@jax.jit
def loss(w, x):
    return jnp.sum(jnp.tanh(x * w) ** 2)


def weighted(w):
    scale = jnp.arange(1.0, 7.0)

    @jax.jit
    def energy(w):  # reads an array of weighted(): exported by the recording
        return jnp.sum(jnp.tanh(w * scale) ** 2), w * scale

    return jax.grad(lambda w: energy(w)[0])(w)


def bounce(board, x0, v):
    for i, (k, l) in enumerate(surface(board)):
        first, second, y1, y2 = solve(k, l, x0, v)
        if second > 0.12 - i * 0.01:  # Python control flow on the primal values
            return (second + y1) ** 2 if OTHER else (first * y2) ** 2
    return 0.0


board = jnp.asarray(np.random.default_rng(0).random(6), jnp.float32)
for step in range(4):
    board = board - 0.1 * jax.grad(bounce)(board, 1, 0.5 + 0.1 * step)
    value, g = jax.value_and_grad(loss)(board, jnp.arange(6.0))
    print(step, np.asarray(board).tobytes().hex(), value.tolist(), np.asarray(g).tobytes().hex())
    print(np.asarray(weighted(board)).tobytes().hex())
"""


def test_calls_under_grad_are_served_by_the_programs_jit_runs_there(tmp_path: Path) -> None:
    """Jitted pieces of a Python function that ``jax.grad`` differentiates
    through control flow on their values (jax's ``physical_optimization``):
    the recording notes which inputs carried a tangent and which outputs
    each backward pass gave a cotangent, the build exports jit's own primal
    and transposed programs for them, and every call under ``jax.grad`` is
    staged with python's bits, without ``staged-vjp``; so is a jit the
    recorded run exports itself (it reads an array of a function). A pattern of
    cotangents the recording did not see has its backward pass traced as
    jit traces it, with a line, and the bits are python's still."""
    root, cache, functions = _recorded(tmp_path, GRADIENTS)
    patterns = [call["cotangents"] for call in functions["model.solve"]["gradients"]]
    assert patterns == [[[0, 3]]], patterns
    compared = differential(root, cache=cache)
    names = ("surface", "solve", "loss", "weighted.<locals>.energy")
    calls = {name: compared.staged_calls(name) for name in names}
    solve = functions["model.solve"]["calls"]
    assert calls == dict(zip(names, (4, solve, 4, 4), strict=True)), calls
    assert not compared.fallbacks()
    other = differential(root, "other", cache=cache, build=False)
    assert (other.staged_calls("surface"), other.staged_calls("loss")) == (4, 4)
    assert other.staged_calls("solve") >= 4  # another path: as many calls as python makes
    reasons = {(e["function"], e["category"], str(e["reason"])) for e in other.fallbacks()}
    assert ("solve", "tracer") in {r[:2] for r in reasons}, reasons
    assert all("cotangents of outputs (1, 2)" in r[2] for r in reasons), reasons


def test_a_program_whose_file_name_is_no_identifier_is_recorded_and_run(tmp_path: Path) -> None:
    """``forward-forward-mnist.ppy`` runs under python: its recording (a
    NamedTuple of the program's own among the inputs) is read back, built
    and staged. A name the file cannot hold (a space) is left out
    of the recording with a line, and ``ppy run`` still answers as python."""
    source = """
    from typing import NamedTuple

    import jax
    import jax.numpy as jnp


    class Pair(NamedTuple):
        w: jax.Array
        b: jax.Array


    @jax.jit
    def double(pair, x):
        return pair.w * x * 2 + pair.b


    for n in (2, 3):
        print(double(Pair(jnp.ones(n), jnp.zeros(n)), jnp.ones(n)))
    """
    root = _project(tmp_path, source)
    (root / "model.ppy").rename(root / "forward-forward.ppy")
    (root / "two words.ppy").write_text(textwrap.dedent(source).lstrip())
    cache = tmp_path / "cache"
    assert _ppy(root, cache, "record", "forward-forward.ppy").returncode == 0
    spaced = _ppy(root, cache, "--log-format", "json", "record", "two words.ppy")
    assert spaced.returncode == 0, spaced.stderr
    (skipped,) = json_events(spaced.stderr, "record.skipped")
    assert skipped["function"] == "two words.double", skipped
    assert set(_file(root)["functions"]) == {"forward-forward.double"}
    compared = differential(root, cache=cache, program="forward-forward.ppy")
    assert compared.staged_calls("double") == 2
    differential(root, cache=cache, program="two words.ppy", build=False, quiet_stderr=None)
