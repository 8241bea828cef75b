"""Compile a scalar StableHLO module once per process and call it with Python scalars.

This talks to the PJRT CPU client directly instead of through ``jax.jit``:
jax would canonicalize an f64 argument to f32 unless ``jax_enable_x64`` is
on, and the user's configuration must stay as it is.

A call is kept to what PJRT itself needs (``XlaScalar``'s convention 2):
the arguments are packed by ``struct`` into one int64 vector and put on the
device in one ``batched_device_put`` (``enable_x64=True``, so nothing is
narrowed); the one ``int64[2]`` output is wrapped by jax's C++ result handler
and read through the buffer protocol by ``struct`` again, as the result's
Python type and the flag. No numpy scalar, no jax sharding code and no
Python-level array wrapper is made per call. Each step was measured against
the path it replaced (docs/plugin-xla.md, "Speed").

Executables are kept in core's per-user cache (``ppy.cache``), keyed by the
module text, the platform and the jaxlib version, so a later process loads
native code instead of compiling.
"""

from __future__ import annotations

import functools
import hashlib
import struct
import time
from collections.abc import Sequence
from typing import Any

from ppy.kinds.xla_scalar import SCALAR_DTYPES, XlaScalar
from ppy.runtime import ExecutableCache, executable_key

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
    from ppy.runtime import get_logger

    return get_logger()


#: ``struct`` codes of one 64-bit word, by the contract's scalar type.
_WORD = {"float": "d", "int": "q", "bool": "q"}


def _result_handler(aval: Any, sharding: Any) -> Any:
    """jax's C++ handler that wraps an output buffer as an array, without
    jax's Python sharding code (jaxlib 0.10 takes ``_skip_checks``, later
    ones do not)."""
    from jaxlib import xla_client

    try:
        return xla_client.array_result_handler(aval, sharding, committed=True, _skip_checks=True)
    except TypeError:
        return xla_client.array_result_handler(aval, sharding, committed=True)


class ScalarExecutable:
    """One compiled module: ``call(args) -> (result, fallback_flag)``."""

    def __init__(
        self, text: str, param_types: Sequence[str], result_type: str, *, name: str = ""
    ) -> None:
        import numpy as np
        from jax._src import core, sharding_impls, xla_bridge
        from jax._src.lib import _jax  # type: ignore[attr-defined]  # private: jaxlib's C++

        backend = xla_bridge.get_backend("cpu")
        self.device = backend.devices()[0]
        sharding = sharding_impls.SingleDeviceSharding(self.device)
        int64 = np.dtype("int64")
        self.executable = self._load(backend, text, param_types, name)
        self._pack = struct.Struct("<" + "".join(_WORD[t] for t in param_types)).pack
        self._unpack = struct.Struct("<" + _WORD[result_type] + "q").unpack
        self._frombuffer = np.frombuffer
        self._int64 = int64
        self._put = functools.partial(
            _jax.batched_device_put,
            core.ShapedArray((len(param_types),), int64),
            sharding,
            devices=[self.device],
            committed=True,
            # Copied during the put: no host array is kept alive for a worker thread to release.
            host_buffer_semantics=_jax.HostBufferSemantics.IMMUTABLE_ONLY_DURING_CALL,
            enable_x64=True,
        )
        self._execute = self.executable.execute_sharded
        self._handlers = [_result_handler(core.ShapedArray((2,), int64), sharding)]
        self._arity = len(param_types)

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

    def call(self, args: Sequence[float | int | bool]) -> tuple[Any, int]:
        """The result, as the result type's Python type (a bool as 0 or 1),
        and the flag."""
        inputs = (
            [self._put([self._frombuffer(self._pack(*args), self._int64)])] if self._arity else []
        )
        (output,) = self._execute(inputs).consume_with_handlers(self._handlers)
        return self._unpack(output)
