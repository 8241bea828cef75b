"""Does XLA compile a symbolic export, given sizes, as jit? (``ppy_plugin_jax.refinement``)

Each function is exported with a symbolic batch and handed to ``diverges``
as the worker hands it one, with real jax and XLA on the CPU: ``ramp``
calls ``jnp.linspace``, a jitted function of its own that the refined export
inlines and XLA then folds otherwise than jit's module (the case
tests/fidelity/test_refinement.py shows end to end); ``normalize`` calls
nothing, and compiles the same.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from jax import export
from ppy.plugin import MeshSpec
from ppy_plugin_jax.mesh import place
from ppy_plugin_jax.refinement import PROBES, Uncompared, diverges

from tests.conftest import cpu_backend
from tests.support.devices import on_host_devices

#: What XLA folds is the CPU compiler's: another backend's need not differ.
pytestmark = cpu_backend


def ramp(x: jax.Array) -> jax.Array:
    return x + jax.nn.gelu(jnp.linspace(-3, 3, 64) * 1.3)


def normalize(x: jax.Array) -> jax.Array:
    return (x - x.mean(-1, keepdims=True)) / (x.std(-1, keepdims=True) + 1e-6)


def first(x: jax.Array, unused: jax.Array) -> jax.Array:
    return x * 2


def _leaves(count: int = 1, constraints: Sequence[str] = ()) -> list[Any]:
    """``count`` float32 inputs of ``(B, 64)``, ``B`` under ``constraints``."""
    (batch,) = export.symbolic_shape("B", constraints=constraints)
    return [jax.ShapeDtypeStruct((batch, 64), jnp.float32)] * count


def _diverges(
    fn: Callable[..., Any], leaves: Sequence[Any], platforms: Sequence[str] | None = None
) -> dict[str, int] | None:
    exported = export.export(jax.jit(fn), platforms=platforms)(*leaves)
    return diverges(lambda sized: jax.jit(fn).lower(*sized), exported, leaves)


def test_an_export_xla_compiles_otherwise_than_jit_is_found_at_the_first_size() -> None:
    assert _diverges(ramp, _leaves()) == {"B": PROBES[0]}


def test_an_export_xla_compiles_as_jit_is_not() -> None:
    assert _diverges(normalize, _leaves()) is None


def test_an_input_jit_leaves_out_of_its_module_is_no_difference() -> None:
    # jit drops the input ``first`` never reads; the export takes it.
    assert _diverges(first, _leaves(2)) is None


def test_the_first_size_both_compile_for_is_compared() -> None:
    # B >= 10 rules out 8 and 3: the export is compared at 16.
    assert _diverges(ramp, _leaves(constraints=("B >= 10",))) == {"B": 16}


def test_an_export_no_probe_compiles_for_cannot_be_checked() -> None:
    with pytest.raises(Uncompared, match="none of the sizes 8, 3, 16, 2, 1, 32, 64 compiles"):
        _diverges(normalize, _leaves(constraints=("B >= 100",)))


def test_an_export_with_no_symbol_or_for_another_platform_is_not_compared() -> None:
    fixed = [jax.ShapeDtypeStruct((3, 64), jnp.float32)]
    assert _diverges(ramp, fixed) is None
    # The TPU's compiler is not here to ask.
    assert _diverges(ramp, _leaves(), platforms=["tpu"]) is None


def test_a_backend_jax_calls_by_an_alias_is_compared_under_the_export_s_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On an NVIDIA GPU ``jax.default_backend()`` says ``gpu`` and an export
    lists ``cuda``: the two names of one platform. This CPU is given the same
    pair of names (its backend says ``gpu``, jax canonicalises that to
    ``cpu`` as it does to ``cuda`` there), and the export is still compared
    with jit, and found to differ."""
    from jax._src import xla_bridge

    monkeypatch.setitem(xla_bridge._alias_to_platforms, "gpu", ["cpu"])
    monkeypatch.setattr(xla_bridge, "default_backend", lambda: "gpu")
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    assert jax.export.default_export_platform() == "cpu"
    assert _diverges(ramp, _leaves()) == {"B": PROBES[0]}


def weigh(*, b: jax.Array, a: jax.Array) -> jax.Array:
    return b - 2 * a


def test_keyword_inputs_are_matched_in_the_order_jit_takes_them() -> None:
    """The export takes ``b, a`` in the signature's order; jit takes keywords by
    sorted name, ``a, b``: ``order`` says so, and the two programs match."""
    leaves = _leaves(2)
    exported = export.export(jax.jit(lambda b, a: weigh(b=b, a=a)))(*leaves)

    def lowered(sized: list[Any]) -> Any:
        return jax.jit(weigh).lower(b=sized[0], a=sized[1])

    assert diverges(lowered, exported, leaves, [1, 0]) is None
    # Matched parameter for parameter in the wrong order, they differ.
    assert diverges(lowered, exported, leaves) == {"B": 8}
    with pytest.raises(Uncompared, match="jit takes the keyword arguments in another order"):
        diverges(lowered, exported, leaves, [1])


SHARDED = """\
import jax
import jax.numpy as jnp
from jax import export
from ppy.plugin import MeshSpec
from ppy_plugin_jax.mesh import place
from ppy.plugin import MeshSpec
from ppy_plugin_jax.mesh import place
from ppy_plugin_jax.refinement import diverges

def ramp(x):
    return x + jax.nn.gelu(jnp.linspace(-3, 3, 64) * 1.3)

def normalize(x):
    return (x - x.mean(-1, keepdims=True)) / (x.std(-1, keepdims=True) + 1e-6)

mesh = MeshSpec(("data",), (4,), ("explicit",))
(B,) = export.symbolic_shape("B")
for fn in (ramp, normalize):
    leaves = place(
        [jax.ShapeDtypeStruct((4 * B, 64), jnp.float32)],
        [{"name": "x", "sharding": ("data",), "dims": ["4*B", 64]}],
        mesh,
    )
    exported = export.export(jax.jit(fn))(*leaves)
    print(fn.__name__, diverges(lambda sized: jax.jit(fn).lower(*sized), exported, leaves))
"""


def test_a_sharded_export_is_compared_on_a_mesh_of_this_process_s_devices() -> None:
    assert on_host_devices(SHARDED) == ["ramp {'B': 8}", "normalize None"]


def test_a_sharded_export_over_more_devices_than_this_process_has_is_not_compared() -> None:
    # This process has one device, the mesh four: the run's compiler is not here to ask.
    (batch,) = export.symbolic_shape("B")
    leaves = place(
        [jax.ShapeDtypeStruct((4 * batch, 64), jnp.float32)],
        [{"name": "x", "sharding": ("data",), "dims": ["4*B", 64]}],
        MeshSpec(("data",), (4,), ("explicit",)),
    )
    assert len(jax.devices()) < 4
    assert _diverges(ramp, leaves) is None
