"""Executables for one export, one per concrete input signature.

An export with a symbolic dim ("B") is a single program for every B, but XLA
compiles for concrete shapes, so each new signature needs an executable.
Where one comes from, cheapest first:

1. this process (``StagedFunction`` keeps the ones it has in a dict);
2. the per-user ``ppy.cache.ExecutableCache``, loaded as
   ``jax.experimental.serialize_executable.deserialize_and_load`` would
   (``pickled.load_compiled``);
3. a compile: ``jax.jit(exported.call).lower(*shapes).compile()``, which
   refines the symbolic shapes and compiles, then is serialized into the cache.

What is handed back for calls is the ``jax.stages.Compiled``'s C++ dispatch
function (``fast_call``): a ``Compiled`` called through its Python
``__call__`` pays for one more Python frame with ``*args, **kwargs`` on every
call, which on a small function is most of the difference between a loaded
executable and a plain jitted call. A loaded executable gets the same C++
fast path as a freshly compiled one; only that wrapper differs.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

import jax
from jax.experimental import serialize_executable
from ppy.cache import ExecutableCache, executable_key

from ppy_runtime_pjrt import pickled, unstaged
from ppy_runtime_pjrt.guard import Signature

__all__ = ["CompileRefused", "Executables", "dispatcher", "fast_call"]


class CompileRefused(Exception):
    """The export could not be compiled for this signature.

    Mostly a constraint on its symbolic dims that these sizes break
    (``B >= 3``, ``B % 2 == 0``): a fresh export checks them while lowering,
    one read back from bytes only when shape refinement runs in ``compile``.
    Either way the call goes to the original, which says what it says.
    """


def fast_call(compiled: Any) -> Callable[..., Any]:
    """The C++ dispatch function behind ``compiled``, or ``compiled`` itself.

    ``Compiled.__call__`` builds this function lazily (``create_cpp_call``)
    and then forwards every call to it from Python; building it here lets the
    caller skip that forwarding frame. Where this jax has no such function the
    ``Compiled`` is returned and works, a little slower.
    """
    executable = getattr(compiled, "_executable", None)
    params = getattr(compiled, "_params", None)
    make = getattr(executable, "create_cpp_call", None)
    if make is None or params is None:
        return compiled  # type: ignore[no-any-return]
    call = make(params)
    return compiled if call is None else call  # type: ignore[no-any-return]


def dispatcher(
    name: str, function: Callable[..., Any], miss: Callable[..., Any]
) -> Callable[..., Any] | None:
    """jax's C++ dispatch for a function of ppy's, or None where this jax has none.

    It is what ``jax.jit`` and ``Compiled`` calls go through: a cache of
    executables keyed by each argument's type, shape, dtype, weak type,
    sharding and commitment and by jax's trace context, filled by what
    ``miss(*args, **kwargs)`` answers on a miss (outputs, the fast-path data
    of the executable that computed them or None to cache nothing, False).
    Under ``jax.disable_jit`` it calls ``function``, as jit does.
    """
    try:
        from jax._src import tree_util
        from jax._src.interpreters import pxla
        from jax._src.lib import _jax

        return _jax.pjit(  # type: ignore[no-any-return]
            name,
            function,
            miss,
            [],
            [],
            pxla.JitGlobalCppCacheKeys(),
            tree_util.dispatch_registry,
            pxla.cc_shard_arg,
        )
    except (ImportError, AttributeError, TypeError):
        return None


def _versions() -> tuple[tuple[str, str], ...]:
    import jaxlib

    jaxlib_version = getattr(jaxlib, "__version__", None) or jax.lib.__version__
    return (("jax", jax.__version__), ("jaxlib", str(jaxlib_version)))


class Executables:
    """Loads or compiles the executable of ``exported`` for a signature."""

    def __init__(
        self,
        exported: Any,
        *,
        payload: bytes,
        cache: ExecutableCache | None,
        module: str,
        qualname: str,
    ) -> None:
        self.exported = exported
        self.cache = cache
        self.module = module
        self.qualname = qualname
        self.digest = hashlib.sha256(payload).hexdigest()
        self.device = jax.devices()[0]
        self.platform = self.device.platform
        self.device_kind = f"{self.device.device_kind} ({self.device.client.platform_version})"
        self.versions = _versions()
        arity = len(exported.in_avals)
        self.in_tree = jax.tree_util.tree_structure((tuple(range(arity)), {}))

    def key(self, signature: Signature) -> str:
        return executable_key(
            self.digest,
            [(shape, str(dtype)) for shape, dtype in signature],
            platform=self.platform,
            device_kind=self.device_kind,
            versions=self.versions,
        )

    def load(self, signature: Signature) -> tuple[Callable[..., Any], str]:
        """(the call, where it came from: "cache" or "compiled").

        Either way the executable is one read back from its bytes, with
        outputs left uncommitted: compiled from ``exported.call``, whose
        shardings are explicit, it would commit them to the device, where jit
        commits an output only when an input was (and the guard sends
        committed inputs to the original).
        """
        key = self.key(signature)
        if self.cache is not None:
            data = self.cache.get(key)
            if data is not None:
                compiled = self._deserialize(key, data)
                if compiled is not None:
                    return fast_call(compiled), "cache"
        compiled = self._compile(signature)
        data = self._serialize(compiled)
        if data is not None:
            if self.cache is not None:
                self.cache.keep(key, data)
            compiled = self._deserialize(key, data) or compiled
        return fast_call(compiled), "compiled"

    def _deserialize(self, key: str, data: bytes) -> Any:
        try:
            return pickled.load_compiled(
                data,
                self.in_tree,
                self.exported.out_tree,
                self.device.client,
                [self.device],
                committed=False,
            )
        except Exception as error:
            if self.cache is not None:
                self.cache.discard(key, error, module=self.module, function=self.qualname)
            return None

    def _compile(self, signature: Signature) -> Any:
        shapes = [jax.ShapeDtypeStruct(shape, dtype) for shape, dtype in signature]
        try:
            with unstaged.staging():
                return jax.jit(self.exported.call).lower(*shapes).compile()
        except Exception as error:
            lines = str(error).splitlines() or [""]
            raise CompileRefused(f"{type(error).__name__}: {lines[0]}") from error

    def _serialize(self, compiled: Any) -> bytes | None:
        try:
            data, _, _ = serialize_executable.serialize(compiled)
        except (ValueError, NotImplementedError) as error:
            from ppy.log import get_logger

            get_logger().info(
                "cache.skip",
                module=self.module,
                function=self.qualname,
                reason=f"this executable cannot be serialized: {error}",
            )
            return None
        return bytes(data)
