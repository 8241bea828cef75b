"""Sharded exports: on four devices of one machine, over 1x4 and 2x2 meshes.

XLA presents this machine's CPU as four devices
(``--xla_force_host_platform_device_count=4``). Each program runs under
``python`` and ``ppy run`` and must print the same, values, shapes and
shardings alike; the calls whose inputs are laid out as the export's (or
left to jit, where the export replicates them) take the staged path, and
every other layout takes the original's with a ``run.fallback`` of category
``sharding``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import PERMISSIONS, cpu_backend, models, run_ppy
from tests.support.differential import differential, project

#: Four devices are the CPU's, forced (``FOUR``): on an accelerator they are not there.
pytestmark = cpu_backend

FOUR = {"XLA_FLAGS": "--xla_force_host_platform_device_count=4"}

DATA_PARALLEL = """\
from typing import Annotated, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

import ppy


class Params(NamedTuple):
    w: Annotated[jax.Array, ppy.Shape(8, 16), ppy.DType("float32")]
    b: Annotated[jax.Array, ppy.Shape(16), ppy.DType("float32")]
    out: Annotated[jax.Array, ppy.Shape(16, 3), ppy.DType("float32")]


Batch = Annotated[jax.Array, ppy.Shape("4*B", 8), ppy.DType("float32"), ppy.Sharding("data")]


@jax.jit
def mlp(params: Params, x: Batch) -> jax.Array:
    return jnp.tanh(x @ params.w + params.b) @ params.out


def show(label, y):
    print(label, y.shape, y.sharding.spec, jax.typeof(y), y.committed)
    print("  ", np.round(np.asarray(y), 5).tolist()[:3])


mesh = jax.make_mesh((4,), ("data",))
rng = np.random.default_rng(0)
params = Params(*(rng.normal(size=s).astype(np.float32) for s in ((8, 16), (16,), (16, 3))))
params = jax.device_put(params, NamedSharding(mesh, P()))
for rows in (4, 12):
    x = rng.normal(size=(rows, 8)).astype(np.float32)
    x = jax.device_put(x, NamedSharding(mesh, P("data")))
    show(f"rows={rows}", mlp(params, x))

x = rng.normal(size=(8, 8)).astype(np.float32)
show("numpy batch", mlp(params, x))
show("replicated batch", mlp(params, jax.device_put(x, NamedSharding(mesh, P()))))
two = jax.make_mesh((2,), ("data",), devices=jax.devices()[:2])
on_two = jax.device_put(params, NamedSharding(two, P()))
show("two devices", mlp(on_two, jax.device_put(x, NamedSharding(two, P("data")))))
"""

MATMUL = """\
from typing import Annotated

import jax
import numpy as np
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

import ppy

Rows = Annotated[jax.Array, ppy.Shape("2*N", 6), ppy.DType("float32"), ppy.Sharding("data", None)]
Cols = Annotated[jax.Array, ppy.Shape(6, 4), ppy.DType("float32"), ppy.Sharding(None, "model")]


@jax.jit
def project(x: Rows, w: Cols) -> jax.Array:
    return x @ w * 2.0


def run(label, mesh):
    rng = np.random.default_rng(1)
    x = rng.normal(size=(4, 6)).astype(np.float32)
    w = rng.normal(size=(6, 4)).astype(np.float32)
    x = jax.device_put(x, NamedSharding(mesh, P("data", None)))
    w = jax.device_put(w, NamedSharding(mesh, P(None, "model")))
    y = project(x, w)
    placed = sorted((str(s.index), s.device.id) for s in y.addressable_shards)
    print(label, y.sharding.spec, jax.typeof(y), "first block on device", placed[0][1])
    print("  ", np.round(np.asarray(y), 4).tolist())


run("2x2", jax.make_mesh((2, 2), ("data", "model")))
# The same axes over the devices in another order: another executable.
run("2x2 reversed", jax.make_mesh((2, 2), ("data", "model"), devices=jax.devices()[::-1]))
# Auto axes trace otherwise than explicit ones: not the export's mesh.
run("auto", jax.make_mesh((2, 2), ("data", "model"), axis_types=(AxisType.Auto,) * 2))
"""


def _mesh(table: str) -> str:
    return PERMISSIONS + f"mesh = {table}\n"


@pytest.mark.parametrize("batch", ["4*B", "B"])
def test_a_data_parallel_mlp_on_a_1x4_mesh(tmp_path: Path, batch: str) -> None:
    # "B" split over data = 4 can only take multiples of 4: it is exported as
    # 4*B, and the build line shows it as written.
    program = DATA_PARALLEL.replace('ppy.Shape("4*B", 8)', f'ppy.Shape("{batch}", 8)')
    root = project(tmp_path / "p", {"model.ppy": program}, _mesh("{ data = 4 }"))
    compared = differential(root, cache=tmp_path / "c", env=FOUR)
    built = run_ppy("build", cwd=root, env={"PPY_CACHE_DIR": str(tmp_path / "c"), **FOUR})
    assert f"x: float32[{batch}@data,8]" in built.stdout, built.stdout
    assert "P('data', None)" in compared.python.stdout
    assert compared.bound() == {"mlp"} and compared.staged_calls("mlp") == 2
    reasons = {str(f["reason"]) for f in compared.fallbacks()}
    assert {f["category"] for f in compared.fallbacks()} == {"sharding"}
    assert any("x is not laid out over a mesh" in r for r in reasons), reasons
    assert any("x is laid out as P()" in r for r in reasons), reasons
    assert any("mesh of data=2 (explicit)" in r for r in reasons), reasons


def test_a_sharded_matmul_on_a_2x2_mesh(tmp_path: Path) -> None:
    root = project(tmp_path / "p", {"model.ppy": MATMUL}, _mesh("{ data = 2, model = 2 }"))
    compared = differential(root, cache=tmp_path / "c", env=FOUR)
    assert "P('data', 'model')" in compared.python.stdout
    assert compared.staged_calls("project") == 2
    (fallback,) = compared.fallbacks()
    assert fallback["category"] == "sharding"
    assert "data=2, model=2 (auto)" in str(fallback["reason"])
    # The quiet run loads both executables from the cache: were the device
    # order not in the key, "2x2 reversed" would print the first's devices.
    assert "first block on device 3" in compared.python.stdout
    # The build line, a reusing build and ppy inspect show each input's layout.
    signature = (
        "project(x: float32[2*N@data,6], w: float32[6,4@model]) -> float32[2*N@data,4@model]"
    )
    rebuilt = run_ppy("build", cwd=root)
    assert rebuilt.returncode == 0 and signature in rebuilt.stdout, rebuilt.stdout
    shown = run_ppy("inspect", ".ppy/artifact.ppyz", cwd=root)
    assert shown.returncode == 0 and signature in shown.stdout, shown.stdout


DOUBLED = """\
from typing import Annotated

import jax
import ppy


@jax.jit
def half(x: Annotated[jax.Array, ppy.Shape("2*B", 4), ppy.DType("float32"), ppy.Sharding("data")]):
    return x * 2
"""


def test_what_cannot_be_laid_out_over_the_mesh_stays_unstaged(tmp_path: Path) -> None:
    program = """\
        from typing import Annotated

        import jax
        import ppy

        F32 = ppy.DType("float32")

        @jax.jit
        def odd(x: Annotated[jax.Array, ppy.Shape("B+1", 4), F32, ppy.Sharding("data")]):
            return x * 2

        @jax.jit
        def unknown(x: Annotated[jax.Array, ppy.Shape(8, 4), F32, ppy.Sharding("model")]):
            return x * 2

        @jax.jit
        def deep(x: Annotated[jax.Array, ppy.Shape(8), F32, ppy.Sharding("data", None)]):
            return x * 2

        @jax.jit
        def twice(x: Annotated[jax.Array, ppy.Shape(8, 8), F32, ppy.Sharding("data", "data")]):
            return x * 2
        """
    with_mesh = project(tmp_path / "m", {"model.ppy": program}, _mesh("{ data = 4 }"))
    refused = _refusals(with_mesh, tmp_path / "c")
    reasons = {name: reason for name, (reason, _) in refused.items()}
    remedies = {name: remedy for name, (_, remedy) in refused.items()}
    assert "x dim 0 is 'B+1', which does not divide over data (4 devices)" in reasons["odd"]
    assert remedies["odd"] == "write it as a multiple of 4: '4*(B+1)'"
    assert (
        "sharded over model, which the mesh (data=4 (explicit)) does not have" in reasons["unknown"]
    )
    assert "add model to [tool.ppy.plugins.jax] mesh" in remedies["unknown"]
    assert "x has 1 dims, but its ppy.Sharding gives 2" in reasons["deep"]
    assert "x is sharded over data in more than one dim" in reasons["twice"]
    # Each refusal says what to do about it, not one remedy for all.
    assert len(set(remedies.values())) == 4, remedies
    # "2*B" over 4 devices is exported as 2*2*B, and shown as written.
    doubled = project(tmp_path / "h", {"model.ppy": DOUBLED}, _mesh("{ data = 4 }"))
    built = run_ppy("build", cwd=doubled, env={"PPY_CACHE_DIR": str(tmp_path / "c"), **FOUR})
    (line,) = [line for line in built.stdout.splitlines() if "half(" in line]
    assert "exported" in line and "half(x: float32[2*B@data,4])" in line, built.stdout
    without = project(tmp_path / "n", {"model.ppy": program})
    refused = _refusals(without, tmp_path / "c")
    assert all("the project has no mesh" in r for r, _ in refused.values()), refused


def _refusals(root: Path, cache: Path) -> dict[str, str]:
    built = run_ppy(
        "-v", "--log-format", "json", "build", cwd=root, env={"PPY_CACHE_DIR": str(cache), **FOUR}
    )
    events = [json.loads(line) for line in built.stderr.splitlines() if line.startswith("{")]
    decisions = [e for e in events if e["event"] == "build.decision"]
    assert {d["rule"] for d in decisions} == {"sharding"}, decisions
    return {str(d["function"]): (str(d["reason"]), str(d["remedy"])) for d in decisions}


LIKE_AND_JAXTYPING = """\
from typing import Annotated, Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P
from jaxtyping import Array, Float32

import ppy


def example_params():
    return {"w": jnp.zeros((8, 4), jnp.float32), "b": jnp.zeros((4,), jnp.float32)}


@jax.jit
def step(
    params: Annotated[Any, ppy.Like(example_params), ppy.Sharding()],
    x: Annotated[Float32[Array, "8 8"], ppy.Sharding("data")],
) -> jax.Array:
    return jnp.tanh(x @ params["w"] + params["b"])


mesh = jax.make_mesh((4,), ("data",))
rng = np.random.default_rng(2)
params = {"w": rng.normal(size=(8, 4)).astype(np.float32), "b": np.ones(4, np.float32)}
params = jax.device_put(params, NamedSharding(mesh, P()))
x = jax.device_put(rng.normal(size=(8, 8)).astype(np.float32), NamedSharding(mesh, P("data")))
y = step(params, x)
print(y.sharding.spec, jax.typeof(y), np.round(np.asarray(y), 4).tolist())
# P(None, None) is the replicated layout the description gives: staged.
whole = jax.device_put(params["w"], NamedSharding(mesh, P(None, None)))
print(step({"w": whole, "b": params["b"]}, x).sharding.spec)
# A weight split where the description says replicated: the original path.
split = jax.device_put(params["w"], NamedSharding(mesh, P("data")))
print(step({"w": split, "b": params["b"]}, x).sharding.spec)
"""


@models  # jaxtyping
def test_a_like_pytree_and_a_jaxtyping_array_carry_their_sharding(tmp_path: Path) -> None:
    root = project(tmp_path / "p", {"model.ppy": LIKE_AND_JAXTYPING}, _mesh("{ data = 4 }"))
    compared = differential(root, cache=tmp_path / "c", env=FOUR)
    assert compared.bound() == {"step"} and compared.staged_calls("step") == 2
    (fallback,) = compared.fallbacks()
    assert fallback["category"] == "sharding"
    assert "params['w'] is laid out as P('data',)" in str(fallback["reason"])


UNPLACED = """\
from typing import Annotated

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

import ppy

F32 = ppy.DType("float32")
Weights = Annotated[jax.Array, ppy.Shape(8, 3), F32]
Batch = Annotated[jax.Array, ppy.Shape("4*B", 8), F32, ppy.Sharding("data")]
Whole = Annotated[jax.Array, ppy.Shape(8, 3), F32, ppy.Sharding()]


@jax.jit
def predict(w: Weights, x: Batch) -> jax.Array:
    return jnp.tanh(x @ w)


@jax.jit
def scale(w: Whole) -> jax.Array:
    return w * 3.0


def show(label, y):
    print(label, y.shape, getattr(y.sharding, "spec", y.sharding), jax.typeof(y), y.committed)
    print("  ", np.round(np.asarray(y), 4).tolist()[:2])


def attempt(label, call):
    try:
        show(label, call())
    except ValueError as error:
        print(label, "refused:", str(error).splitlines()[0][:60])


mesh = jax.make_mesh((4,), ("data",))
rng = np.random.default_rng(3)
w = rng.normal(size=(8, 3)).astype(np.float32)
x = jax.device_put(rng.normal(size=(8, 8)).astype(np.float32), NamedSharding(mesh, P("data")))
# Weights jax has not placed: jit replicates them over the batch's mesh.
show("numpy weights", predict(w, x))
show("jnp weights", predict(jnp.asarray(w), x))
# Weights committed to one device: jit refuses the call, under python and ppy alike.
attempt("weights on device 0", lambda: predict(jax.device_put(w, jax.devices()[0]), x))
# Weights in host memory: jit keeps them there; the export takes device memory.
pinned = NamedSharding(mesh, P(), memory_kind="pinned_host")
y = scale(jax.device_put(w, pinned))
print("pinned weights", y.sharding.memory_kind, np.round(np.asarray(y), 4).tolist()[:1])
# No input on a mesh: the mesh the program set serves.
attempt("no mesh", lambda: scale(w))
with jax.set_mesh(mesh):
    show("set_mesh numpy", scale(w))
    show("set_mesh batch", predict(w, x))
    show("set_mesh numpy batch", predict(w, np.asarray(x)))
# Out of the mesh's context again, as jit: on one device.
show("no mesh again", scale(w))
"""


def test_unplaced_inputs_and_the_programs_mesh(tmp_path: Path) -> None:
    root = project(tmp_path / "p", {"model.ppy": UNPLACED}, _mesh("{ data = 4 }"))
    compared = differential(root, cache=tmp_path / "c", env=FOUR)
    assert "refused" in compared.python.stdout
    assert compared.staged_calls("predict") == 3 and compared.staged_calls("scale") == 1
    reasons = {str(f["reason"]) for f in compared.fallbacks()}
    assert {f["category"] for f in compared.fallbacks()} == {"sharding"}
    assert any("w is committed to its devices (SingleDeviceSharding)" in r for r in reasons)
    assert "pinned weights pinned_host" in compared.python.stdout
    assert "w is in pinned_host memory; the export runs on the devices' own (device)" in reasons
    assert any("the program set none (jax.set_mesh)" in r for r in reasons), reasons
    assert any("x is not laid out over a mesh (ndarray); it is staged as" in r for r in reasons)
