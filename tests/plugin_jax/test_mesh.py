"""The project's mesh as jax sees it, and each input laid out over it (``ppy_plugin_jax.mesh``).

Each mesh starts as the user writes it, a ``[tool.ppy.plugins.jax] mesh``
table read by the plugin's own settings, and is laid out with real jax in
this process, which has one device: the build needs none of the mesh's. One
test serves such an export on four host devices, in a process of its own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from jax import export
from jax.sharding import AxisType, NamedSharding, PartitionSpec
from ppy.plugin import MeshSpec
from ppy_plugin_jax.mesh import Unplaced, abstract_mesh, out_shardings, place, spec_of
from ppy_plugin_jax.plugin import JaxExportPlugin

from tests.conftest import cpu_backend
from tests.support.devices import on_host_devices


def _mesh(table: Mapping[str, int], types: object = None) -> MeshSpec:
    """The mesh the plugin reads from ``[tool.ppy.plugins.jax]``."""
    settings: dict[str, object] = {"mesh": dict(table)}
    if types is not None:
        settings["mesh-axis-types"] = types
    mesh = JaxExportPlugin().validate_settings(settings, "pyproject.toml")["mesh"]
    assert isinstance(mesh, MeshSpec)
    return mesh


def _leaf(dims: Sequence[int | str]) -> Any:
    """A float32 input of these dims, a string a symbol (``"4*B"``)."""
    scope = export.SymbolicScope()
    shape = tuple(
        d if isinstance(d, int) else export.symbolic_shape(d, scope=scope)[0] for d in dims
    )
    return jax.ShapeDtypeStruct(shape, jnp.float32)


def _placed(dims: Sequence[int | str], sharding: tuple[Any, ...], mesh: MeshSpec | None) -> Any:
    spec = {"name": "x", "dims": list(dims), "sharding": sharding}
    (leaf,) = place([_leaf(dims)], [spec], mesh)
    return leaf


def test_the_setting_becomes_an_abstract_mesh_with_its_axis_types() -> None:
    over = abstract_mesh(_mesh({"data": 2, "model": 2}, {"model": "auto"}))
    assert over.axis_names == ("data", "model")
    assert tuple(over.axis_sizes) == (2, 2)
    assert tuple(over.axis_types) == (AxisType.Explicit, AxisType.Auto)
    assert tuple(abstract_mesh(_mesh({"data": 4}, "manual")).axis_types) == (AxisType.Manual,)


def test_a_leaf_carries_its_sharding_over_the_mesh_in_its_type() -> None:
    mesh = _mesh({"data": 2, "model": 2})
    leaf = _placed(["4*B", 6], (("data", "model"), None), mesh)
    assert str(leaf.shape[0]) == "4*B" and leaf.shape[1] == 6
    assert isinstance(leaf.sharding, NamedSharding)
    assert leaf.sharding.mesh == abstract_mesh(mesh)
    assert leaf.sharding.spec == PartitionSpec(("data", "model"), None)
    assert spec_of(leaf.sharding) == (("data", "model"), None)


def test_an_export_over_the_mesh_needs_none_of_its_devices() -> None:
    mesh = _mesh({"data": 4})
    leaf = _placed(["4*B", 3], ("data", None), mesh)
    exported = export.export(jax.jit(jnp.tanh))(leaf)
    assert len(jax.devices()) < 4 and exported.nr_devices == 4


def test_outputs_keep_the_sharding_their_type_gives_under_explicit_axes() -> None:
    def both(x: jax.Array) -> tuple[jax.Array, jax.Array]:
        return x * 2, x.sum(0)

    leaf = _placed([8, 4], ("data",), _mesh({"data": 4}))
    found = out_shardings(both, [leaf])
    assert found is not None
    assert [spec_of(s) for s in found] == [("data", None), (None,)]
    # Left to choose, the compiler writes its own: nothing is pinned.
    auto = _placed([8, 4], ("data",), _mesh({"data": 4}, "auto"))
    assert out_shardings(both, [auto]) is None


@pytest.mark.parametrize(
    ("mesh", "dims", "sharding", "reason", "remedy"),
    [
        (
            {"data": 2, "model": 2},
            [8, 4],
            ("rows",),
            "x is sharded over rows, which the mesh (data=2, model=2 (explicit)) does not have",
            "name axes of the mesh (data, model) in ppy.Sharding, or add rows to "
            "[tool.ppy.plugins.jax] mesh",
        ),
        (
            {"data": 2, "model": 2},
            [8],
            ("data", "model"),
            "x has 1 dims, but its ppy.Sharding gives 2",
            "give ppy.Sharding one entry per dim at most",
        ),
        (
            {"data": 2, "model": 2},
            [8, 4],
            ("data", "data"),
            "x is sharded over data in more than one dim",
            "split each mesh axis over one dim only",
        ),
        (
            {"data": 2, "model": 2},
            [6, 4],
            (("data", "model"),),
            "x dim 0 is 6, which does not divide over dataxmodel (4 devices)",
            "give the dim a multiple of 4, or split it over fewer devices",
        ),
        (
            {"data": 4},
            ["B", 4],
            ("data",),
            "x dim 0 is 'B', which does not divide over data (4 devices) at every size",
            "write it as a multiple of 4: '4*B'",
        ),
        (
            {"data": 6},
            ["4*B", 4],
            ("data",),
            "x dim 0 is '4*B', which does not divide over data (6 devices) at every size",
            "write it as a multiple of 6: '12*B'",
        ),
        (
            {"data": 4},
            ["B + 1", 4],
            ("data",),
            "x dim 0 is 'B + 1', which does not divide over data (4 devices) at every size",
            "write it as a multiple of 4: '4*(B + 1)'",
        ),
    ],
)
def test_a_sharding_the_mesh_cannot_take_is_refused_with_a_remedy(
    mesh: dict[str, int],
    dims: list[int | str],
    sharding: tuple[Any, ...],
    reason: str,
    remedy: str,
) -> None:
    with pytest.raises(Unplaced) as refused:
        _placed(dims, sharding, _mesh(mesh))
    assert str(refused.value) == reason
    assert refused.value.remedy.startswith(remedy)


def test_a_sharding_with_no_mesh_in_the_project_is_refused() -> None:
    with pytest.raises(Unplaced) as refused:
        _placed([8, 4], ("data",), None)
    assert str(refused.value) == "x is described with ppy.Sharding, but the project has no mesh"
    assert "[tool.ppy.plugins.jax] mesh = { data = 4 }" in refused.value.remedy


SERVED = """\
import jax
import jax.numpy as jnp
import numpy as np
from jax import export
from jax.sharding import NamedSharding, PartitionSpec
from ppy_plugin_jax.mesh import out_shardings, place
from ppy_plugin_jax.plugin import JaxExportPlugin

spec = JaxExportPlugin().validate_settings({"mesh": {"data": 4}}, "pyproject.toml")["mesh"]
(B,) = export.symbolic_shape("B")
(leaf,) = place(
    [jax.ShapeDtypeStruct((4 * B, 3), jnp.float32)],
    [{"name": "x", "dims": ["4*B", 3], "sharding": ("data", None)}],
    spec,
)

def f(x):
    return jnp.tanh(x) * 2

(out,) = out_shardings(f, [leaf])
blob = export.export(jax.jit(f, out_shardings=out))(leaf).serialize()

mesh = jax.make_mesh((4,), ("data",))
x = jax.device_put(
    np.arange(24, dtype=np.float32).reshape(8, 3), NamedSharding(mesh, PartitionSpec("data"))
)
served, jitted = export.deserialize(blob).call(x), jax.jit(f)(x)
print(len(jax.devices()), served.sharding == jitted.sharding, np.array_equal(served, jitted))
"""


@cpu_backend
def test_an_export_over_the_abstract_mesh_serves_a_mesh_of_its_names_and_sizes() -> None:
    assert on_host_devices(SERVED) == ["4 True True"]
