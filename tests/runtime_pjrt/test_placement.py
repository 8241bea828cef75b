"""Which calls a sharded export's placement lets through, in this process.

One CPU device is enough for a 1-device mesh: what is checked is how each
input is laid out, against the export's ``PartitionSpec`` and axis types.
The four-device programs that print the same under ``ppy run`` as under
``python`` are in tests/fidelity/test_sharded.py.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding, PartitionSpec
from ppy.spec import MeshSpec, TensorSpec
from ppy_runtime_pjrt.guard import Fallback
from ppy_runtime_pjrt.placement import Placed, Placement

W = TensorSpec((4, 2), "float32", "w")
X = TensorSpec((4, 4), "float32", "x", sharding=("data",))


def _placement(kind: str) -> tuple[Placement, jax.sharding.Mesh]:
    axis = AxisType.Explicit if kind == "explicit" else AxisType.Auto
    mesh = jax.make_mesh((1,), ("data",), axis_types=(axis,))
    return Placement(MeshSpec(("data",), (1,), (kind,)), (W, X)), mesh


def _on(mesh: jax.sharding.Mesh, value: np.ndarray, *spec: str | None) -> jax.Array:
    return jax.device_put(value, NamedSharding(mesh, PartitionSpec(*spec)))


W_VALUE = np.ones((4, 2), np.float32)
X_VALUE = np.ones((4, 4), np.float32)


@pytest.mark.parametrize("weights", ["numpy", "jnp"])
def test_an_unplaced_input_the_export_replicates_goes_over_the_batchs_mesh(
    weights: str,
) -> None:
    placement, mesh = _placement("explicit")
    w = W_VALUE if weights == "numpy" else jnp.asarray(W_VALUE)
    placed = placement.check([w, _on(mesh, X_VALUE, "data")])
    assert isinstance(placed, Placed) and placed.mesh == mesh


def test_over_auto_axes_an_unplaced_input_takes_the_original_path() -> None:
    placement, mesh = _placement("auto")
    assert isinstance(placement.check([_on(mesh, W_VALUE), _on(mesh, X_VALUE, "data")]), Placed)
    verdict = placement.check([W_VALUE, _on(mesh, X_VALUE, "data")])
    assert isinstance(verdict, Fallback) and verdict.category == "sharding"
    assert "over auto axes jit lays it out as it chooses" in verdict.detail


def test_an_unplaced_input_the_export_splits_takes_the_original_path() -> None:
    placement, mesh = _placement("explicit")
    with jax.set_mesh(mesh):
        verdict = placement.check([W_VALUE, X_VALUE])
    assert isinstance(verdict, Fallback)
    assert verdict.detail.startswith("x is not laid out over a mesh (ndarray); it is staged as")


def test_the_programs_mesh_serves_when_no_input_names_one() -> None:
    placement, mesh = _placement("explicit")
    replicated = Placement(placement.mesh, (W,))
    verdict = replicated.check([W_VALUE])
    assert isinstance(verdict, Fallback) and "the program set none" in verdict.detail
    with jax.set_mesh(mesh):
        placed = replicated.check([W_VALUE])
    assert isinstance(placed, Placed) and placed.mesh == mesh


def test_inputs_on_another_mesh_than_the_programs_take_the_original_path() -> None:
    placement, mesh = _placement("explicit")
    other = jax.make_mesh((1,), ("data",), axis_types=(AxisType.Auto,))
    with jax.set_mesh(other):
        verdict = placement.check([W_VALUE, _on(mesh, X_VALUE, "data")])
    assert isinstance(verdict, Fallback)
    assert verdict.detail == "the inputs are laid out over another mesh than the program set"


def test_an_input_in_host_memory_takes_the_original_path() -> None:
    placement, mesh = _placement("explicit")
    pinned = NamedSharding(mesh, PartitionSpec("data"), memory_kind="pinned_host")
    verdict = placement.check([W_VALUE, jax.device_put(X_VALUE, pinned)])
    assert isinstance(verdict, Fallback) and verdict.category == "sharding"
    assert (
        verdict.detail == "x is in pinned_host memory; the export runs on the devices' own (device)"
    )
