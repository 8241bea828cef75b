"""Compile a scalar StableHLO module once per process and call it with Python scalars.

This talks to the PJRT CPU client directly instead of through ``jax.jit``:
jax would canonicalize an f64 argument to f32 unless ``jax_enable_x64`` is
on, and the user's configuration must stay as it is. ``batched_device_put``
with ``enable_x64=True`` puts one float64/int64/bool host scalar on the device
as it is; results are read back as numpy scalars and turned into Python ones.

Executables are kept in core's per-user cache (``ppy.cache``), keyed by the
module text, the platform and the jaxlib version, so a later process loads
native code instead of compiling.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from typing import Any

from ppy.cache import ExecutableCache, executable_key
from ppy.kinds import SCALAR_DTYPES, XlaScalar

__all__ = ["ScalarExecutable", "compile_options"]

#: XLA flags that keep the CPU backend to IEEE semantics: no approximate
#: functions, and no algebraic simplifier, which rewrites ``x / 3.0`` as a
#: multiplication by the reciprocal, reassociates sums, folds ``x * 2.0 / 2.0``
#: and expands ``x ** 3`` into products (plugin-xla's module already does what
#: may be done exactly).
XLA_FLAGS: tuple[tuple[str, bool | str], ...] = (
    ("xla_cpu_enable_fast_math", False),
    ("xla_disable_hlo_passes", "algsimp"),
)


def compile_options() -> Any:
    from jaxlib import xla_client

    options = xla_client.CompileOptions()
    options.env_option_overrides = list(XLA_FLAGS)
    return options


def _log() -> Any:
    from ppy.log import get_logger

    return get_logger()


class ScalarExecutable:
    """One compiled module: ``call(args) -> (result, fallback_flag)``."""

    def __init__(self, text: str, param_types: Sequence[str], *, name: str = "") -> None:
        import numpy as np
        from jax._src import core, sharding_impls, xla_bridge
        from jax._src.lib import _jax  # type: ignore[attr-defined]

        self._np = np
        self._put = _jax.batched_device_put
        backend = xla_bridge.get_backend("cpu")
        self.device = backend.devices()[0]
        self._sharding = sharding_impls.SingleDeviceSharding(self.device)
        self._avals = [core.ShapedArray((), np.dtype(SCALAR_DTYPES[t])) for t in param_types]
        self._dtypes = [np.dtype(SCALAR_DTYPES[t]) for t in param_types]
        self.executable = self._load(backend, text, param_types, name)

    def _load(self, backend: Any, text: str, param_types: Sequence[str], name: str) -> Any:
        log = _log()
        devices = backend.devices()[:1]
        key, cache = self._cache_key(text, param_types)
        data = cache.get(key)
        if data is not None:
            try:
                exe = backend.deserialize_executable(data, devices, compile_options())
                log.debug("run.scalar_loaded", function=name, key=key)
                return exe
            except Exception as error:  # a cache file from another build: compile again
                cache.discard(key, error, function=name)
        start = time.perf_counter()
        exe = backend.compile_and_load(text, devices, compile_options())
        log.debug(
            "run.scalar_compiled", function=name, ms=round((time.perf_counter() - start) * 1e3, 1)
        )
        cache.keep(key, backend.serialize_executable(exe))
        return exe

    def _cache_key(self, text: str, param_types: Sequence[str]) -> tuple[str, ExecutableCache]:
        import jaxlib

        digest = hashlib.sha256(text.encode()).hexdigest()
        key = executable_key(
            digest,
            [((), SCALAR_DTYPES[t]) for t in param_types],
            platform=self.device.platform,
            device_kind=str(self.device.device_kind),
            versions=[
                ("jaxlib", jaxlib.version.__version__),
                ("kind", XlaScalar.KIND),
                ("xla_flags", repr(XLA_FLAGS)),
            ],
        )
        return key, ExecutableCache()

    def call(self, args: Sequence[float | int | bool]) -> tuple[Any, bool]:
        np, put, device, sharding = self._np, self._put, self.device, self._sharding
        buffers = [
            put(aval, sharding, [np.asarray(value, dtype)], [device], True, enable_x64=True)
            for aval, dtype, value in zip(self._avals, self._dtypes, args, strict=True)
        ]
        outputs = self.executable.execute_sharded(buffers).disassemble_into_single_device_arrays()
        result = np.asarray(outputs[0][0]).item()
        flag = bool(np.asarray(outputs[1][0]).item())
        return result, flag
