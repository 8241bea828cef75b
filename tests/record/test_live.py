"""Jitted functions that read names made while the program runs are exported
by the recorded process itself (``ppy.record.live``), put into the artifact
by ``ppy build`` as they are, and served by ``ppy run`` only where every
value their trace read is the same."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import PERMISSIONS, cpu_backend, models
from tests.support.differential import differential
from tests.support.events import json_events

#: Four devices of the CPU, for the programs laid out over a mesh.
FOUR = {"XLA_FLAGS": "--xla_force_host_platform_device_count=4"}

#: Written as jax's own examples are: everything in main(), the optimizer's
#: functions read by the jitted step from main()'s closure.
OPTIMIZER = """
import sys

import jax.numpy as jnp
import numpy as np
from jax import grad, jit
from jax.example_libraries import optimizers


def loss(params, batch):
    x, y = batch
    return jnp.mean((x @ params["w"] + params["b"] - y) ** 2)


def main():
    step_size = float(sys.argv[1]) if len(sys.argv) > 1 else 0.05
    opt_init, opt_update, get_params = optimizers.momentum(step_size, mass=0.9)

    @jit
    def update(i, opt_state, batch):
        params = get_params(opt_state)
        return opt_update(i, grad(loss)(params, batch), opt_state)

    rng = np.random.RandomState(0)
    x = rng.normal(size=(32, 3)).astype(np.float32)
    y = x @ np.array([[1.0], [-2.0], [0.5]], np.float32)
    opt_state = opt_init({"w": jnp.zeros((3, 1)), "b": jnp.zeros((1,))})
    for i in range(20):
        opt_state = update(i, opt_state, (x, y))
    print(f"loss {float(loss(get_params(opt_state), (x, y))):.6f}")


if __name__ == "__main__":
    main()
"""

#: A module-level jit that reads globals the main guard sets.
MAIN_GUARD = """
import os

import jax
import jax.numpy as jnp


@jax.jit
def scaled(x):
    return jnp.tanh(x * scale) + offset


if __name__ == "__main__":
    scale = float(os.environ.get("SCALE", "2.0"))
    offset = 1
    for n in (4, 4, 4):
        print(scaled(jnp.arange(n, dtype=jnp.float32)))
"""

#: A local of main() that is an array, read by the jitted function.
LOCAL_ARRAY = """
import sys

import jax
import jax.numpy as jnp
import numpy as np


def main():
    weights = np.linspace(0.0, 1.0, 8, dtype=np.float32).reshape(2, 4)
    if len(sys.argv) > 1:
        weights[0, 0] = float(sys.argv[1])

    @jax.jit
    def project(x):
        return x @ weights

    for _ in range(3):
        print(project(jnp.ones((3, 2), jnp.float32)))


main()
"""

#: The step made in main() called at the batch sizes argv names.
BATCHES = """
import sys

import jax.numpy as jnp
from jax import jit


def main():
    sizes = [int(size) for size in sys.argv[1:]] or [8, 16]
    scale = 0.5

    w = jnp.linspace(-1.0, 1.0, 12, dtype=jnp.float32).reshape(4, 3)

    @jit
    def step(x):
        return jnp.tanh(x @ w) * scale

    for n in sizes:
        for _ in range(2):
            x = jnp.arange(n * 4, dtype=jnp.float32).reshape(n, 4) / 10
            print(step(x).sum())


main()
"""


#: Jits of variables that hold functions: a module-level partial jitted under
#: its own name, and main()'s jit(grad(...)) of a partial of a def of main(),
#: called leaving xtest to its default but once.
VARIABLES = """
import sys
from functools import partial

import jax
import jax.numpy as jnp
from jax import grad, jit


def sgd(params, grads, learning_rate):
    return [p - learning_rate * g for p, g in zip(params, grads)]


optimizer = partial(sgd, learning_rate=0.1)
optimizer = jax.jit(optimizer)


def main():
    scale = float(sys.argv[1]) if len(sys.argv) > 1 else 1.0

    def loss(params, x, xtest=None, squared=False):
        error = params[0] * x * scale - 1.0
        if xtest is not None:
            error = error + 0.1 * xtest
        return jnp.sum(error**2 if squared else jnp.abs(error)) + jnp.sum(params[1] ** 2)

    marginal = partial(loss, squared=True)
    grad_fun = jit(grad(marginal))
    params = [jnp.ones(3), jnp.full(2, 0.5)]
    x = jnp.arange(3.0)
    for _ in range(5):
        params = optimizer(params, grad_fun(params, x))
    print(params[0], params[1])
    print(grad_fun(params, x, x + 1.0)[0])


if __name__ == "__main__":
    main()
"""


#: A jit a function makes and returns, no name holding it, as jax's kernel
#: least-squares example writes its predictor.
RETURNED = """
import sys

import jax.numpy as jnp
from jax import jit, vmap


def train(xs, scale):
    def predict(x):
        return jnp.sum(jnp.tanh(xs * x * scale))

    return jit(vmap(predict))


def main():
    scale = float(sys.argv[1]) if len(sys.argv) > 1 else 1.0
    predictor = train(jnp.linspace(0.0, 1.0, 4), scale)
    for n in (3, 3, 5):
        print(predictor(jnp.arange(n, dtype=jnp.float32)))


if __name__ == "__main__":
    main()
"""


#: The same under the main guard, as jax's onnx2xla example writes it.
GUARDED_LAMBDA = """
import sys

import jax.numpy as jnp
from jax import jit

if __name__ == "__main__":
    scale = float(sys.argv[1]) if len(sys.argv) > 1 else 1.0
    predict = lambda inputs: jnp.tanh(inputs * scale)
    compiled_predict = jit(predict)
    for _ in range(3):
        print(compiled_predict(jnp.ones((2, 4))))
"""

#: A jit of a lambda main() names, as jax's onnx2xla example compiles its predictor.
LAMBDA = """
import sys

import jax.numpy as jnp
from jax import jit


def main():
    scale = float(sys.argv[1]) if len(sys.argv) > 1 else 1.0
    weights = jnp.linspace(-1.0, 1.0, 12).reshape(4, 3)
    predict = lambda inputs: jnp.tanh(inputs @ weights) * scale
    print(predict(jnp.ones((2, 4))))
    compiled_predict = jit(predict)
    for _ in range(3):
        print(compiled_predict(jnp.ones((2, 4))))


if __name__ == "__main__":
    main()
"""

#: The forms jax's own examples and their like write jits in, besides a
#: decorated def: a lambda written in the jit's own call (in main(), reading
#: its locals, batched by vmap, and at module level); jits called where
#: main() makes them, no name holding them, each the only one on its line
#: (of a def, of its gradient, of a partial binding a local), and two on one
#: line, which are not told apart; and a jit a class holds as a static
#: method, called through the class and inside another jit's trace.
FORMS = """
import sys
from functools import partial

import jax
import jax.numpy as jnp

norms = jax.jit(jax.vmap(lambda v: jnp.sqrt(jnp.dot(v, v))))


class Net:
    @staticmethod
    @jax.jit
    def forward(w, x):
        return jnp.tanh(x @ w)


@jax.jit
def energy(w, x):
    return jnp.sum(Net.forward(w, x) ** 2)


def loss(w, x):
    return jnp.sum(jnp.tanh(x @ w) ** 2)


def scaled(scale, x):
    return jnp.sin(x) * scale


def main():
    scale = float(sys.argv[1]) if len(sys.argv) > 1 else 1.0
    weights = jnp.linspace(-1.0, 1.0, 12).reshape(4, 3)
    predict = jax.jit(lambda inputs: jnp.tanh(inputs @ weights) * scale)
    squares = jax.jit(jax.vmap(lambda v: jnp.dot(v, v) * scale))
    w = weights
    for i in range(3):
        x = jnp.ones((2, 4)) * i
        print(predict(x), squares(x), norms(x))
        print(jax.jit(loss)(w, x))
        w = w - 0.1 * jax.jit(jax.grad(loss))(w, x)
        print(jax.jit(partial(scaled, scale))(x))
        print(jax.jit(loss)(w, x) + jax.jit(loss)(w, -x))
        print(Net.forward(w, x).sum(), energy(w, x))
    print(w)


if __name__ == "__main__":
    main()
"""

#: A jitted helper given the program's lambdas as a static argument, as jax's
#: advi example evaluates its densities on a grid.
STATIC_FUNCTIONS = """
import sys
from functools import partial

import jax.numpy as jnp
from jax import jit, vmap

SCALE = 2.0


def density(x):
    return jnp.exp(-jnp.sum(x**2) / SCALE)


@partial(jit, static_argnums=(0, 1, 3))
def mesh_eval(func, limits, params, num_ticks):
    x = jnp.linspace(*limits, num=num_ticks)
    xy = jnp.stack([x, x]).T
    return vmap(func, in_axes=(0, None))(xy, params).sum()


if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else ""
    if mode == "scale":
        SCALE = 3.0
    if mode == "other":
        target = lambda x, _: density(x) * 2
    else:
        target = lambda x, _: density(x)
    approx = lambda x, p: jnp.exp(-jnp.sum((x - p[0]) ** 2) * p[1])
    params = (jnp.zeros(2), jnp.ones(()))
    for _ in range(3):
        print(mesh_eval(target, (-2, 2), 1, 11))
        print(mesh_eval(approx, (-2, 2), params, 11))
        params = (params[0] + 0.1, params[1] * 1.1)
"""


#: jax's spmd_mnist example, in small: arrays laid out over an explicit mesh
#: of four devices, a donating step under ``jax.set_mesh``, and an accuracy
#: of two sizes that do not divide the mesh as one symbol would.
SHARDED = """
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax import NamedSharding, grad
from jax.sharding import AxisType, PartitionSpec as P


def predict(params, x):
    w, b = params
    return jnp.tanh(x @ w + b)


def loss(params, batch):
    x, y = batch
    return jnp.mean((predict(params, x) - y) ** 2)


@jax.jit
def accuracy(params, batch):
    x, y = batch
    return jnp.mean(jnp.abs(predict(params, x) - y) < 0.5)


@jax.jit(donate_argnums=0)
def train_step(params, batch):
    grads = grad(loss)(params, batch)
    return [p - step_size * g for p, g in zip(params, grads)]


if __name__ == "__main__":
    step_size = 0.1
    split_over = sys.argv[1] if len(sys.argv) > 1 else "batch"
    mesh = jax.make_mesh((4,), ("batch",), axis_types=(AxisType.Explicit,))
    replicated = NamedSharding(mesh, P())
    split = NamedSharding(mesh, P(split_over if split_over != "none" else None))
    rng = np.random.RandomState(0)
    params = [rng.randn(3, 2).astype(np.float32), np.zeros(2, np.float32)]
    params = jax.device_put(params, replicated)
    for i in range(3):
        x = jax.device_put(rng.randn(8, 3).astype(np.float32), split)
        y = jax.device_put(rng.randn(8, 2).astype(np.float32), split)
        old = params
        with jax.set_mesh(mesh):
            params = train_step(params, (x, y))
        print(params[1], old[0].is_deleted())
    for rows in (16, 32):
        x = jax.device_put(rng.randn(rows, 3).astype(np.float32), split)
        y = jax.device_put(rng.randn(rows, 2).astype(np.float32), split)
        print(accuracy(params, (x, y)))
"""


#: A jit of a lambda that reads a protobuf message, as jax's onnx2xla example
#: interprets an onnx ModelProto.
PROTOBUF = """
import sys

import jax.numpy as jnp
from google.protobuf import struct_pb2
from jax import jit

if __name__ == "__main__":
    config = struct_pb2.Struct()
    config.update({"scale": float(sys.argv[1]) if len(sys.argv) > 1 else 0.5})
    predict = lambda inputs: jnp.tanh(inputs * config["scale"])
    compiled_predict = jit(predict)
    for _ in range(3):
        print(compiled_predict(jnp.ones((2, 3))))
"""


#: Values the trace reads other than as a global of its own, each changed
#: under ``main()`` by the run given ``changed``: a class's attribute read by
#: its classmethod (``cls.scale``), read by ``getattr`` with a literal name,
#: a class attribute that is a callable read by a method (``self.act``), a
#: project module imported in ``main()`` and a class ``main()`` names, both
#: held in the jit's closure, and the module bound by a partial.
PATHS = """
import sys
from functools import partial

import jax
import jax.numpy as jnp


class Config:
    scale = 2.0

    @classmethod
    def scaled(cls, x):
        return x * cls.scale


class Limits:
    low = -1.0


class Net:
    act = staticmethod(jnp.tanh)

    def forward(self, x):
        return self.act(x) * 2


class Options:
    gain = 0.5


net = Net()


@jax.jit
def by_classmethod(x):
    return Config.scaled(x)


@jax.jit
def by_getattr(x):
    return jnp.maximum(x, getattr(Limits, "low"))


@jax.jit
def by_method(x):
    return net.forward(x)


def shifted(module, x):
    return x + module.shift


def main():
    import settings

    if sys.argv[1:] == ["changed"]:
        Config.scale = 3.0
        Limits.low = 1.5
        Net.act = staticmethod(jnp.sin)
        settings.scale = 5.0
        Options.gain = 4.0
        settings.shift = 7.0
    options = Options

    @jax.jit
    def by_closed_module(x):
        return x * settings.scale

    @jax.jit
    def by_closed_class(x):
        return x * options.gain

    by_bound_module = jax.jit(partial(shifted, settings))
    x = jnp.arange(3.0)
    for _ in range(3):
        print(by_classmethod(x), by_getattr(x), by_method(x))
        print(by_closed_module(x), by_closed_class(x), by_bound_module(x))


if __name__ == "__main__":
    main()
"""


def _recorded(
    tmp_path: Path, source: str, files: dict[str, str] | None = None, **env: str
) -> tuple[Path, Path]:
    """A project of ``source`` (and ``files`` beside it) recorded once: its
    root and its executable cache."""
    root = tmp_path / "project"
    root.mkdir()
    (root / "model.ppy").write_text(textwrap.dedent(source).lstrip())
    for name, text in (files or {}).items():
        (root / name).write_text(text)
    (root / "pyproject.toml").write_text(PERMISSIONS)
    cache = tmp_path / "cache"
    recorded = _ppy(root, cache, "--log-format", "json", "-v", "record", "model.ppy", **env)
    assert recorded.returncode == 0, recorded.stderr
    exported = json_events(recorded.stderr, "record.exported")
    assert exported, recorded.stderr
    return root, cache


def _built(tmp_path: Path, source: str, **env: str) -> tuple[Path, Path, str]:
    """A project of ``source`` recorded once and built: its root, its
    executable cache, and what the build printed."""
    root, cache = _recorded(tmp_path, source, **env)
    built = _ppy(root, cache, "build", **env)
    assert built.returncode == 0, built.stdout + built.stderr
    return root, cache, built.stdout


def _staged_until_changed(root: Path, cache: Path, function: str, change: str, named: str) -> None:
    """Each of ``function``'s three calls is staged in a run as recorded, and
    none in a run given ``change`` on its command line, where a fallback's
    reason names ``named``."""
    same = differential(root, cache=cache, build=False)
    assert same.staged_calls(function) == 3
    other = differential(root, change, cache=cache, build=False)
    assert other.staged_calls(function) == 0
    reasons = {str(e["reason"]) for e in other.fallbacks()}
    assert any(named in r for r in reasons), reasons


def _ppy(root: Path, cache: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run(
        [sys.executable, "-m", "ppy", *args],
        cwd=root,
        env={**os.environ, "PPY_CACHE_DIR": str(cache), **env},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@dataclass(frozen=True)
class Shared:
    """A project recorded once for the tests of this file, and a copy of it
    built; a test works on its own copy of either (``copy``)."""

    recorded: Path
    built: Path
    #: What ``ppy build`` printed for ``built``.
    report: str

    @staticmethod
    def copy(folder: Path, tmp_path: Path) -> tuple[Path, Path]:
        """A copy of ``folder`` under ``tmp_path``, and a fresh executable cache."""
        return shutil.copytree(folder, tmp_path / "project"), tmp_path / "cache"


@pytest.fixture(scope="module")
def optimizer(tmp_path_factory: pytest.TempPathFactory) -> Shared:
    """``OPTIMIZER``, recorded and built once: three tests read the same recording."""
    base = tmp_path_factory.mktemp("optimizer")
    recorded, _ = _recorded(base, OPTIMIZER)
    built = shutil.copytree(recorded, base / "built" / "project")
    done = _ppy(built, base / "built" / "cache", "build")
    assert done.returncode == 0, done.stdout + done.stderr
    return Shared(recorded, built, done.stdout)


def test_the_step_made_in_main_is_exported_from_the_recorded_run_and_staged(
    tmp_path: Path, optimizer: Shared
) -> None:
    root, cache = optimizer.copy(optimizer.built, tmp_path)
    (line,) = [line for line in optimizer.report.splitlines() if "main.<locals>.update" in line]
    assert " exported " in line and "in the recorded run, at 1 signature (20 calls)" in line
    compared = differential(root, cache=cache, build=False)
    assert compared.bound() == {"main.<locals>.update"}
    assert compared.staged_calls("main.<locals>.update") == 20
    assert not compared.fallbacks()


def test_another_step_size_in_the_run_falls_back_naming_what_changed(
    tmp_path: Path, optimizer: Shared
) -> None:
    """The optimizer made with another step size: each call takes jit's path,
    and ``run.fallback`` names ``opt_update``, whose closure holds it."""
    root, cache = optimizer.copy(optimizer.built, tmp_path)
    compared = differential(root, "0.2", cache=cache, build=False)
    assert compared.staged_calls("main.<locals>.update") == 0
    (fallback,) = {str(e["reason"]) for e in compared.fallbacks()}
    assert "opt_update of the function around update" in fallback, fallback
    assert "not the value the build traced with" in fallback


def test_globals_set_under_the_main_guard_are_compared_at_the_first_call(tmp_path: Path) -> None:
    root, cache, _ = _built(tmp_path, MAIN_GUARD)
    same = differential(root, cache=cache, build=False)
    assert same.staged_calls("scaled") == 3
    other = differential(root, cache=cache, build=False, env={"SCALE": "3.0"})
    assert other.staged_calls("scaled") == 0
    reasons = {str(e["reason"]) for e in other.fallbacks()}
    assert any("scale" in r and "not the value the build traced with" in r for r in reasons)


def test_an_array_local_to_main_is_compared_by_its_content(tmp_path: Path) -> None:
    root, cache, _ = _built(tmp_path, LOCAL_ARRAY)
    _staged_until_changed(
        root, cache, "main.<locals>.project", "5.0", "weights of the function around project"
    )


def test_a_trace_that_prints_is_not_exported_and_the_recording_prints_what_python_prints(
    tmp_path: Path,
) -> None:
    source = MAIN_GUARD.replace("    return jnp.tanh", "    print('tracing')\n    return jnp.tanh")
    root = tmp_path / "project"
    root.mkdir()
    (root / "model.ppy").write_text(textwrap.dedent(source).lstrip())
    (root / "pyproject.toml").write_text(PERMISSIONS)
    cache = tmp_path / "cache"
    plain = subprocess.run(
        [sys.executable, "model.ppy"], cwd=root, capture_output=True, text=True, check=False
    )
    quiet = _ppy(root, cache, "record", "--replace", "model.ppy")
    assert (quiet.stdout, quiet.returncode) == (plain.stdout, plain.returncode)
    logged = _ppy(root, cache, "--log-format", "json", "record", "--replace", "model.ppy")
    (failed,) = json_events(logged.stderr, "record.export_failed")
    assert failed["rule"] == "trace-side-effect", failed
    assert "Traceback" not in logged.stderr


def test_a_stale_export_is_ignored_with_its_reason(tmp_path: Path, optimizer: Shared) -> None:
    root, cache = optimizer.copy(optimizer.recorded, tmp_path)
    program = root / "model.ppy"
    program.write_text(program.read_text() + "# edited after the recording\n")
    built = _ppy(root, cache, "--log-format", "json", "build")
    (ignored,) = json_events(built.stderr, "build.live_export_ignored")
    assert ignored["function"] == "model.main.<locals>.update"
    assert "source changed since the recording" in str(ignored["reason"])
    (line,) = [line for line in built.stdout.splitlines() if "main.<locals>.update" in line]
    assert " stays " in line, line
    index = json.loads((root / ".ppy" / "exports" / "live.json").read_text())
    assert index["format"] == "ppy-live-exports"


def test_a_batch_size_the_recording_did_not_see_is_served_by_a_symbolic_export(
    tmp_path: Path,
) -> None:
    """Recorded at B=8 and B=16, the step is exported once with a symbol for
    its batch, checked by the refinement rule and the dependence watch as the
    build checks one, and serves B=24 staged."""
    root, cache, built = _built(tmp_path, BATCHES)
    (line,) = [line for line in built.splitlines() if "main.<locals>.step" in line]
    assert "symbolic in B (recorded B=8, 16)" in line, line
    compared = differential(root, "24", cache=cache, build=False)
    assert compared.staged_calls("main.<locals>.step") == 2
    assert not compared.fallbacks()


def test_a_step_whose_trace_asks_its_batch_size_is_exported_at_the_recorded_sizes(
    tmp_path: Path,
) -> None:
    """A trace that branches on the batch size makes the symbol unfaithful:
    the sizes the recording saw are exported, and only those are served."""
    source = BATCHES.replace(
        "        return jnp.tanh(x @ w) * scale",
        "        if x.shape[0] > 12:\n            return jnp.tanh(x @ w) * scale\n"
        "        return x @ w * scale",
    )
    root, cache, built = _built(tmp_path, source)
    (line,) = [line for line in built.splitlines() if "main.<locals>.step" in line]
    assert "at 2 signatures (4 calls); at the recorded sizes, specializes:" in line, line
    seen = differential(root, cache=cache, build=False)
    assert seen.staged_calls("main.<locals>.step") == 4
    unseen = differential(root, "24", cache=cache, build=False)
    assert unseen.staged_calls("main.<locals>.step") == 0


#: A jit under the main guard that reads a typed PRNG key the guard made,
#: as jax's mnist_vae reads its test_rng.
KEY_GLOBAL = """
import sys

import jax.numpy as jnp
from jax import jit, random

if __name__ == "__main__":
    test_rng = random.key(int(sys.argv[1]) if len(sys.argv) > 1 else 1)

    @jit
    def evaluate(x):
        return x + random.normal(test_rng, x.shape)

    for _ in range(3):
        print(evaluate(jnp.ones(3)))
"""


def test_a_prng_key_the_trace_reads_is_compared_by_its_key_data(tmp_path: Path) -> None:
    root, cache = _recorded(tmp_path, KEY_GLOBAL)
    assert _ppy(root, cache, "build").returncode == 0
    same = differential(root, cache=cache, build=False)
    assert same.staged_calls("evaluate") == 3
    other = differential(root, "2", cache=cache, build=False)
    assert other.staged_calls("evaluate") == 0
    reasons = {str(e["reason"]) for e in other.fallbacks()}
    assert any("test_rng" in r and "not the value the build traced with" in r for r in reasons)


#: absl flags read inside the jitted step, as jax's dp-sgd example reads its
#: clipping norm and batch size; app.run parses the command line first.
ABSL_FLAGS = """
import jax.numpy as jnp
from absl import app, flags
from jax import jit

_SCALE = flags.DEFINE_float("scale", 2.0, "how much to scale by")
flags.DEFINE_integer("shift", 1, "what to add")
FLAGS = flags.FLAGS


def main(_):
    @jit
    def step(x):
        return x * _SCALE.value + FLAGS.shift

    for _ in range(3):
        print(step(jnp.arange(3.0)))


if __name__ == "__main__":
    app.run(main)
"""


@models  # absl comes with optax
def test_absl_flags_the_trace_reads_are_compared_by_their_parsed_values(tmp_path: Path) -> None:
    # On the CPU: absl's logging would print jax's search for a TPU, timed.
    cpu = {"JAX_PLATFORMS": "cpu"}
    root, cache = _recorded(tmp_path, ABSL_FLAGS, **cpu)
    assert _ppy(root, cache, "build").returncode == 0
    same = differential(root, cache=cache, build=False, env=cpu)
    assert same.staged_calls("main.<locals>.step") == 3
    for changed in ("--scale=3", "--shift=5"):
        other = differential(root, changed, cache=cache, build=False, env=cpu)
        assert other.staged_calls("main.<locals>.step") == 0
        # FLAGS holds every flag's value: it is the first global found changed.
        reasons = {str(e["reason"]) for e in other.fallbacks()}
        assert any("FLAGS is not the value the build traced with" in r for r in reasons), reasons


#: A donating jit that reads a global the main guard sets: python deletes the
#: donated array, so reading it afterwards raises.
DONATING = """
import jax
import jax.numpy as jnp


@jax.jit(donate_argnums=0)
def step(params, x):
    return params * scale + x


if __name__ == "__main__":
    scale = 2.0
    p = jnp.ones(4)
    for i in range(3):
        new = step(p, jnp.full(4, float(i)))
        try:
            print("old params", p.sum())
        except RuntimeError as error:
            print("old params deleted:", type(error).__name__)
        p = new
    print(p)
"""


def test_a_donating_jit_is_exported_from_the_run_and_its_staged_call_donates(
    tmp_path: Path,
) -> None:
    """The staged executable donates what jit donates: the program reads an
    array python deleted, and fails to as python does. A donation jit could
    not use (an input of no output's shape) is not exported, with the reason."""
    root, cache = _recorded(tmp_path, DONATING)
    compared = differential(root, cache=cache)
    assert "old params deleted: RuntimeError" in compared.python.stdout
    assert compared.staged_calls("step") == 3
    unusable = DONATING.replace("donate_argnums=0", "donate_argnums=(0, 1)")
    (root / "model.ppy").write_text(textwrap.dedent(unusable).lstrip())
    recorded = _ppy(root, cache, "--log-format", "json", "record", "model.ppy")
    (failed,) = json_events(recorded.stderr, "record.export_failed")
    assert failed["rule"] == "static-args", failed
    assert "donated buffers were not usable" in str(failed["reason"]), failed


def test_jits_of_variables_that_hold_functions_are_staged(tmp_path: Path) -> None:
    """``optimizer = jax.jit(optimizer)`` of a partial, and ``jit(grad(marginal))``
    with ``marginal`` a partial of a def of main(): each is staged for every
    call, and another value of what main() closes over falls back, naming it.
    xtest, left to its default by the recorded calls, is traced as jit
    traces it, as its default; the call that passes it takes jit's path."""
    root, cache, _ = _built(tmp_path, VARIABLES)
    same = differential(root, cache=cache, build=False)
    assert same.bound() == {"optimizer", "main.<locals>.grad_fun"}
    assert same.staged_calls("optimizer") == same.staged_calls("main.<locals>.grad_fun") == 5
    (passed,) = same.fallbacks()
    assert (passed["function"], passed["category"]) == ("main.<locals>.grad_fun", "signature")
    assert "xtest passed, which the export does not take" in str(passed["reason"])
    other = differential(root, "2.0", cache=cache, build=False)
    assert other.staged_calls("main.<locals>.grad_fun") == 0
    assert other.staged_calls("optimizer") == 5
    reasons = {str(e["reason"]) for e in other.fallbacks()}
    assert any("scale" in r for r in reasons), reasons


def test_a_jit_a_function_returns_is_staged_where_it_is_made(tmp_path: Path) -> None:
    """``return jit(vmap(predict))``: exported from the recorded run (at each
    size seen, or a symbol over them), served for the calls of the returned
    jit, and jit's where the function it closes over changed."""
    root, cache, built = _built(tmp_path, RETURNED)
    assert "train.<locals>.<return>" in built, built
    same = differential(root, cache=cache, build=False)
    assert same.staged_calls("train.<locals>.<return>") == 3
    assert not same.fallbacks()
    other = differential(root, "2.0", cache=cache, build=False)
    assert other.staged_calls("train.<locals>.<return>") == 0
    assert {e["category"] for e in other.fallbacks()} == {"captured"}


@pytest.mark.parametrize(
    ("source", "name"),
    [(LAMBDA, "main.<locals>.compiled_predict"), (GUARDED_LAMBDA, "compiled_predict")],
    ids=["in-main", "under-the-main-guard"],
)
def test_a_jit_of_a_named_lambda_is_staged(tmp_path: Path, source: str, name: str) -> None:
    """``compiled_predict = jit(predict)`` with ``predict`` a lambda of main(),
    or of the main guard: staged for its calls, bound by the line that makes
    it, and jit's where what the lambda closes over changed."""
    root, cache = _recorded(tmp_path, source)
    assert _ppy(root, cache, "build").returncode == 0
    same = differential(root, cache=cache, build=False)
    assert same.staged_calls(name) == 3
    assert not same.fallbacks()
    other = differential(root, "2.0", cache=cache, build=False)
    assert other.staged_calls(name) == 0
    assert {e["category"] for e in other.fallbacks()} == {"captured"}


def test_the_forms_a_jit_is_written_in_are_staged(tmp_path: Path) -> None:
    """A lambda written in the jit's own call is read as a def; a jit called
    where main() makes it, the only one on its line, is a candidate named by
    the line; a static method's jit is reached through its class. Each is
    staged for every call. Another value of what main()'s jits close over
    falls back for those, naming it; the others stay staged. Two jits on
    one line stay jit's, and so does the static method inside ``energy``'s
    trace, as under python."""
    root, cache, built = _built(tmp_path, FORMS)
    lines = textwrap.dedent(FORMS).lstrip().splitlines()
    loss, grad, partial_ = (
        f"main.<locals>.<jit-{lines.index(text) + 1}>"
        for text in (
            "        print(jax.jit(loss)(w, x))",
            "        w = w - 0.1 * jax.jit(jax.grad(loss))(w, x)",
            "        print(jax.jit(partial(scaled, scale))(x))",
        )
    )
    local = ("main.<locals>.predict", "main.<locals>.squares", partial_)
    others = ("norms", loss, grad, "Net.forward", "energy")
    assert "staged 8 of 8" in built, built
    same = differential(root, cache=cache, build=False)
    assert same.bound() == {*local, *others}
    assert {same.staged_calls(name) for name in (*local, *others)} == {3}
    inside = {(e["function"], e["category"]) for e in same.fallbacks()}
    assert inside <= {("Net.forward", "tracer")}, inside
    other = differential(root, "2.0", cache=cache, build=False)
    assert [other.staged_calls(name) for name in local] == [0, 0, 0]
    assert {other.staged_calls(name) for name in others} == {3}
    reasons = {
        (e["category"], str(e["reason"])) for e in other.fallbacks() if e["category"] != "tracer"
    }
    assert {category for category, _ in reasons} == {"captured"}
    assert all("scale" in reason for _, reason in reasons), reasons


def test_functions_passed_as_static_arguments_are_staged_by_their_fingerprint(
    tmp_path: Path,
) -> None:
    """Lambdas made under the main guard, passed to a jitted function as a
    static argument (with a tuple): exported from the recorded run, one
    variant each, and served to the lambdas the next run makes again. A
    lambda of other code, or one whose trace reads a global the program set
    otherwise, takes jit's path, naming why."""
    root, cache, built = _built(tmp_path, STATIC_FUNCTIONS)
    assert "staged 1 of 1" in built, built
    same = differential(root, cache=cache, build=False)
    assert same.staged_calls("mesh_eval") == 6
    assert not same.fallbacks()
    changes = [("other", "static", "func=the function"), ("scale", "captured", "SCALE")]
    for mode, category, named in changes:
        changed = differential(root, mode, cache=cache, build=False)
        assert changed.staged_calls("mesh_eval") == 3, mode
        (fallback,) = {(str(e["category"]), str(e["reason"])) for e in changed.fallbacks()}
        assert fallback[0] == category and named in fallback[1], fallback


@cpu_backend
def test_arrays_laid_out_over_a_mesh_are_recorded_and_staged_over_it(tmp_path: Path) -> None:
    """Inputs sharded over an explicit mesh of four devices are recorded with
    their layout, exported over that mesh from the recorded run, and served
    laid out so; the donating step deletes what jit's deletes. Inputs laid
    out otherwise take jit's path."""
    root, cache, built = _built(tmp_path, SHARDED, **FOUR)
    assert "staged 2 of 2" in built, built
    same = differential(root, cache=cache, build=False, env=FOUR)
    assert "True" in same.python.stdout  # the donated params were deleted
    assert same.staged_calls("train_step") == 3
    assert same.staged_calls("accuracy") == 2
    assert not same.fallbacks()
    other = differential(root, "none", cache=cache, build=False, env=FOUR)
    assert other.staged_calls("train_step") == other.staged_calls("accuracy") == 0
    assert {e["category"] for e in other.fallbacks()} == {"sharding"}


@models  # protobuf comes with flax (orbax-checkpoint)
def test_a_protobuf_message_the_trace_reads_is_compared_by_its_content(tmp_path: Path) -> None:
    """The message is fingerprinted by its serialization: the next run's,
    made again with the same content, is served; another content falls back."""
    root, cache, _ = _built(tmp_path, PROTOBUF)
    _staged_until_changed(root, cache, "compiled_predict", "2.0", "config")


def test_what_a_trace_reads_through_classes_closures_and_partials_is_compared(
    tmp_path: Path,
) -> None:
    """Each value of ``PATHS`` changed between the recording and the run:
    python's output under ``ppy run``, cold and warm, each jit taking its own
    path and naming the value it read; as recorded, every call is staged."""
    settings = {"settings.py": "scale = 2.0\nshift = 1.0\n"}
    root, cache = _recorded(tmp_path, PATHS, settings)
    built = _ppy(root, cache, "build")
    assert built.returncode == 0, built.stdout + built.stderr
    read = {
        "by_classmethod": "cls.scale of model.Config.scaled",
        "by_getattr": "model.Limits.low",
        "by_method": "self.act of model.net.forward",
        "main.<locals>.by_closed_module": "settings.scale of the function around by_closed_module",
        "main.<locals>.by_closed_class": "options.gain of the function around by_closed_class",
        "main.<locals>.by_bound_module": "module.shift that a partial binds to shifted",
    }
    same = differential(root, cache=cache, build=False)
    assert {name: same.staged_calls(name) for name in read} == dict.fromkeys(read, 3)
    changed = differential(root, "changed", cache=cache, build=False)
    assert {name: changed.staged_calls(name) for name in read} == dict.fromkeys(read, 0)
    reasons = {str(e["function"]): str(e["reason"]) for e in changed.fallbacks()}
    for name, value in read.items():
        assert f"{value} is not the value the build traced with" in reasons[name], reasons
