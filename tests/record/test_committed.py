"""A recorded function called with inputs committed to a device
(``jax.device_put(params, jax.devices()[1])``): jit runs it on that device
and commits its outputs there, and so does the staged export. Inputs
committed to different devices, which jit refuses, go to jit."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import cpu_backend
from tests.record.test_record import _recorded
from tests.support.differential import differential

#: Four CPU devices, forced.
pytestmark = [cpu_backend, pytest.mark.slow]

COMMITTED = """
import jax
import jax.numpy as jnp


@jax.jit
def update(params, x):
    w, b = params
    y = x @ w + b
    return [w - 0.1 * x.T @ y, b * 0.9], y.sum()


def placed(value):
    return value.committed, sorted(d.id for d in value.devices()), type(value.sharding).__name__


def main():
    devices = jax.devices()
    start = [jnp.full((4, 3), 0.5, jnp.float32), jnp.zeros(3, jnp.float32)]
    x = jnp.linspace(0, 1, 32, dtype=jnp.float32).reshape(8, 4)
    for where in (None, devices[0], devices[1]):
        params = start if where is None else jax.device_put(start, where)
        for _ in range(2):
            params, loss = update(params, x)
        print(where and where.id, float(loss), placed(params[0]), placed(loss))
        mixed, _ = update(params, x)
        print((mixed[0] + params[0]).devices())
    try:
        update(jax.device_put(start, devices[1]), jax.device_put(x, devices[2]))
    except ValueError as error:
        print("ValueError:", str(error).splitlines()[0])


if __name__ == "__main__":
    main()
"""


def test_inputs_committed_to_one_device_are_served_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=4")
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    root, cache, recorded = _recorded(tmp_path, COMMITTED)
    assert recorded["model.update"]["description"] == {
        "params": "[float32[4,3], float32[3]]",
        "x": "float32[8,4]",
    }
    compared = differential(root, cache=cache)
    assert "(True, [1], 'SingleDeviceSharding')" in compared.python.stdout
    assert "ValueError: Received incompatible devices" in compared.python.stdout
    assert compared.staged_calls("update") == 9
    # Only the call jit refuses goes to jit, which raises its own error.
    (fallback,) = compared.fallbacks()
    assert fallback["category"] == "device"
    assert "different devices" in str(fallback["reason"])
