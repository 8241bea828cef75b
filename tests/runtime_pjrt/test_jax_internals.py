"""The private jax entry points the runtime relies on, checked on the jax
installed here (the test command runs this on each supported jax).

Each is either one every supported jax has, or gated: where a jax differs,
the runtime steps aside and says why. These tests fail where a supported
jax no longer matches, rather than letting a cache layer go quietly off.
"""

from __future__ import annotations

import io
import math
import pickle
import struct
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax._src import core
from ppy.cache import ExecutableCache
from ppy_runtime_pjrt import eager, pickled, unstaged
from ppy_runtime_pjrt.compile import fast_call
from ppy_runtime_pjrt.scalar_exec import ScalarExecutable


@pytest.fixture
def installed(tmp_path: Path):
    store = ExecutableCache(tmp_path / "unstaged")
    try:
        yield unstaged.install(store), eager.install(store, lambda: False)
    finally:
        unstaged.uninstall()


def test_both_unstaged_layers_install_on_this_jax(installed: tuple[bool, str | None]) -> None:
    wrapped, eager_refused = installed
    assert wrapped, "jax's compile step is not the one ppy knows"
    assert eager_refused is None, eager_refused


def test_an_aval_read_back_from_an_executable_equals_the_one_jax_makes() -> None:
    aval = core.ShapedArray((3, 4), np.dtype("float32"))
    with io.BytesIO() as file:
        pickle.Pickler(file).dump(aval)
        data = file.getvalue()
    device = jax.devices()[0]
    again = pickled.load(data, device.client, [device])
    assert again == aval and hash(again) == hash(aval)


def test_a_loaded_executable_gives_arrays_whose_avals_are_jax_s_own() -> None:
    from jax.experimental import serialize_executable

    compiled = jax.jit(lambda x: x * 2).lower(jnp.ones((3,), jnp.float32)).compile()
    data, in_tree, out_tree = serialize_executable.serialize(compiled)
    device = jax.devices()[0]
    loaded = pickled.load_compiled(data, in_tree, out_tree, device.client, [device])
    result = loaded(jnp.ones((3,), jnp.float32))
    assert result.aval == jnp.ones((3,), jnp.float32).aval
    assert np.asarray(result).tolist() == [2.0, 2.0, 2.0]


def test_a_compiled_executable_has_a_cpp_dispatch_function() -> None:
    compiled = jax.jit(lambda x: x + 1).lower(jnp.ones((2,), jnp.float32)).compile()
    call = fast_call(compiled)
    assert call is not compiled
    assert np.asarray(call(jnp.ones((2,), jnp.float32))).tolist() == [2.0, 2.0]


#: main(x, n, flag) returns its parameter ``PICK`` and a flag of 1 (convention 2).
PACKED = """func.func public @main(%args: tensor<3xi64>) -> (tensor<2xi64>) {
  %w = "stablehlo.slice"(%args) {start_indices = array<i64: PICK>,
    limit_indices = array<i64: NEXT>, strides = array<i64: 1>} : (tensor<3xi64>) -> tensor<1xi64>
  %f = stablehlo.constant dense<1> : tensor<1xi64>
  %o = "stablehlo.concatenate"(%w, %f) {dimension = 0 : i64}
    : (tensor<1xi64>, tensor<1xi64>) -> tensor<2xi64>
  return %o : tensor<2xi64>
}
"""


@pytest.mark.parametrize(
    ("pick", "result_type", "args", "expected"),
    [
        (0, "float", (0.1, 1, True), 0.1),  # not rounded through float32
        (0, "float", (-0.0, 1, True), -0.0),
        (0, "float", (math.inf, 1, True), math.inf),
        (1, "int", (0.1, -(2**63), True), -(2**63)),
        (1, "int", (0.1, 2**63 - 1, True), 2**63 - 1),
        (2, "bool", (0.1, 1, True), 1),
        (2, "bool", (0.1, 1, False), 0),
    ],
)
def test_scalars_travel_packed_as_they_are(
    tmp_path: Path, monkeypatch, pick: int, result_type: str, args: tuple, expected: object
) -> None:
    monkeypatch.setenv("PPY_CACHE_DIR", str(tmp_path))
    text = PACKED.replace("PICK", str(pick)).replace("NEXT", str(pick + 1))
    executable = ScalarExecutable(text, ["float", "int", "bool"], result_type, name="pick")
    result, flag = executable.call(args)
    assert (type(result), flag) == (type(expected), 1)
    word = "<d" if result_type == "float" else "<q"
    assert struct.pack(word, result) == struct.pack(word, expected)


def test_the_configuration_check_sees_what_changes_a_trace() -> None:
    from jax._src import config
    from ppy_runtime_pjrt.conditions import _debug_state

    before = config.trace_context()
    with jax.numpy_rank_promotion("raise"):
        assert config.trace_context() != before
    with jax.disable_jit():
        assert config.trace_context() != before
    debug = _debug_state(config)
    assert not debug.value
    with jax.debug_nans(True):
        assert debug.value
    with jax.debug_infs(True):
        assert debug.value
    assert not debug.value


def test_a_loaded_executable_can_leave_its_outputs_uncommitted() -> None:
    from jax.experimental import serialize_executable

    shape = jax.ShapeDtypeStruct((3,), jnp.float32)
    exported = jax.export.export(jax.jit(lambda x: x * 2))(shape)
    compiled = jax.jit(exported.call).lower(shape).compile()
    assert compiled(jnp.ones(3, jnp.float32))._committed  # as exported.call commits
    data, in_tree, out_tree = serialize_executable.serialize(compiled)
    device = jax.devices()[0]
    loaded = pickled.load_compiled(
        data, in_tree, out_tree, device.client, [device], committed=False
    )
    assert not loaded(jnp.ones(3, jnp.float32))._committed


def test_the_dispatcher_caches_by_signature_and_trace_context() -> None:
    from ppy.kinds.dispatch import dispatcher

    compiled = jax.jit(lambda x: x * 2).lower(jnp.ones((3,), jnp.float32)).compile()
    served = fast_call(compiled)
    misses: list[int] = []

    def miss(*args: object) -> object:
        misses.append(len(args))
        return served._cache_miss(*args)

    bound = dispatcher("twice", lambda x: x * 2, miss)
    assert bound is not None
    x = jnp.ones((3,), jnp.float32)
    bound(x)
    bound(x)
    assert len(misses) == 1  # the second call is served in C++
    with jax.numpy_rank_promotion("raise"):
        bound(x)
    assert len(misses) == 2  # another trace context comes back to the miss
    with jax.disable_jit():
        assert np.asarray(bound(x)).tolist() == [2.0, 2.0, 2.0]
    assert len(misses) == 2  # the Python function ran, as under jit
