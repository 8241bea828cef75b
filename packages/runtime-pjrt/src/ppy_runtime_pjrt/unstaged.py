"""A warm compile cache for what stays unstaged: eager ops, fallbacks, unstaged jits.

jax's persistent cache would keep these compiles, but only if the program
set jax's config flags, and ppy changes none of them. So jax's compile step
(``jax._src.compiler.compile_or_get_cached``) is wrapped for the run, and a
computation is looked up in ppy's executable cache under jax's own key:
what runs is the executable XLA would have compiled, so numerics do not
change. Installing this also installs its front layer, ``eager``.

docs/runtime.md ("The unstaged compile cache") says when the wrapper steps
aside (jax's own persistent cache in use or disabled, host callbacks, PGLE,
several processes, the runtime's own compiles, ``PPY_UNSTAGED_CACHE=0``);
the checks below are that list in code, and change with the page.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import inspect
import os
import threading
from collections.abc import Callable, Iterator
from typing import Any

from ppy.runtime import ExecutableCache

from ppy_runtime_pjrt import behind, eager

__all__ = ["ENV", "install", "staging", "uninstall"]

#: Set to 0 (or off, false, no) to compile unstaged computations as jax would.
ENV = "PPY_UNSTAGED_CACHE"

#: The parameters of the compile step this module wraps, in order.
_PARAMETERS = (
    "backend",
    "computation",
    "devices",
    "compile_options",
    "host_callbacks",
    "executable_devices",
    "pgle_profiler",
)
_MARK = "__ppy_unstaged__"
_state = threading.local()
#: Where the wrapper keeps executables; None while it is not installed.
_cache: ExecutableCache | None = None
#: What this run has already said, so that a refusal is logged once.
_said: dict[str, str] = {}


def _log() -> Any:
    from ppy.runtime import get_logger

    return get_logger()


@contextlib.contextmanager
def staging() -> Iterator[None]:
    """Compiles inside are the runtime's own, for staged entries: not cached here."""
    previous = getattr(_state, "staging", False)
    _state.staging = True
    try:
        yield
    finally:
        _state.staging = previous


def install(cache: ExecutableCache) -> bool:
    """Wrap jax's compile step for this run, keeping executables in ``cache``;
    whether it is wrapped."""
    global _cache
    if os.environ.get(ENV, "1").strip().lower() in ("0", "off", "false", "no"):
        return False
    why = cache.untrusted()
    if why is not None:
        if _said.get("untrusted") != why:  # once per run, not at every bind
            _said["untrusted"] = why
            _log().warning(
                "cache.untrusted",
                path=str(cache.directory),
                reason=why,
                remedy="unstaged computations are compiled as jax would; "
                "make the cache directory the user's own, mode 0700",
            )
        return False
    from jax._src import compiler

    original = compiler.compile_or_get_cached
    if not getattr(original, _MARK, False):
        reason = _unknown_step(original)
        if reason is not None:
            _log().info("run.unstaged_off", reason=reason)
            return False
        compiler.compile_or_get_cached = _wrapped(original)
    _cache = cache
    reason = eager.install(cache, _steps_aside)
    if reason is not None:
        _log().info("run.unstaged_off", reason=f"eager ops are lowered at each start: {reason}")
    return True


def uninstall() -> None:
    """Give jax its own compile step back (when the program has ended), once
    every executable queued for the cache is written."""
    global _cache
    behind.drain()
    _cache = None
    eager.uninstall()
    import sys

    compiler = sys.modules.get("jax._src.compiler")
    step = getattr(compiler, "compile_or_get_cached", None)
    if step is not None and getattr(step, _MARK, False):
        compiler.compile_or_get_cached = step.__wrapped__  # type: ignore[union-attr]  # step implies compiler


def _steps_aside() -> bool:
    """Whether jax's own handling applies to this compile: a staged entry is
    compiling, or jax's persistent cache is on (or all caching off)."""
    from jax._src import compilation_cache, config

    return (
        getattr(_state, "staging", False)
        or compilation_cache.is_persistent_cache_enabled()
        or not config.enable_compilation_cache.value
    )


def _unknown_step(step: Callable[..., Any]) -> str | None:
    try:
        names = tuple(inspect.signature(step).parameters)
    except (TypeError, ValueError):
        names = ()
    if names != _PARAMETERS:
        return f"this jax's compile step takes ({', '.join(names)}), not the one ppy knows"
    return None


def _wrapped(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def compile_or_get_cached(
        backend: Any,
        computation: Any,
        devices: Any,
        compile_options: Any,
        host_callbacks: Any,
        executable_devices: Any,
        pgle_profiler: Any = None,
    ) -> Any:
        def compile_() -> Any:
            return original(
                backend,
                computation,
                devices,
                compile_options,
                host_callbacks,
                executable_devices,
                pgle_profiler,
            )

        cache = _cache
        if (
            cache is None
            or host_callbacks
            or pgle_profiler is not None
            or _steps_aside()
            or len({d.process_index for d in devices.flat}) > 1
        ):
            return compile_()
        if eager.waiting():  # the layer in front keeps this one under its own key
            executable = compile_()
            eager.produced(executable)
            return executable
        name = _name(computation)
        try:
            key = _key(computation, devices, compile_options, backend)
        except Exception as error:  # a module jax cannot key is compiled as jax would
            eager.skip(name, error)
            return compile_()
        data = cache.get(key)
        if data is not None:
            try:
                executable = backend.deserialize_executable(
                    data, executable_devices, compile_options
                )
            except Exception as error:
                cache.discard(key, error)
            else:
                _log().debug("cache.unstaged", computation=name, source="cache", lowered=True)
                return executable
        executable = compile_()
        behind.later(functools.partial(_store, cache, key, name, executable, backend))
        return executable

    setattr(compile_or_get_cached, _MARK, True)
    return compile_or_get_cached


def _key(computation: Any, devices: Any, compile_options: Any, backend: Any) -> str:
    """jax's own cache key for the computation, made a cache file name."""
    from jax._src import cache_key

    jax_key = cache_key.get(computation, devices, compile_options, backend, "none")
    return hashlib.sha256(f"unstaged\n{jax_key}".encode()).hexdigest()


def _name(computation: Any) -> str:
    """The module's name as jax gives it (``jit_iota``, ``jit_forward``)."""
    try:
        return str(computation.operation.attributes["sym_name"]).strip('"')
    except Exception:  # a name is only for the log
        return "?"


def _store(cache: ExecutableCache, key: str, name: str, executable: Any, backend: Any) -> None:
    """Keep the executable jax compiled (on the writer thread, ``behind``)."""
    try:
        serialize = getattr(executable, "serialize", None)
        data = serialize() if serialize is not None else backend.serialize_executable(executable)
    except Exception as error:  # some executables (host callbacks, ...) do not serialize
        eager.skip(name, error)
        return
    if cache.keep(key, bytes(data)):
        _log().debug("cache.unstaged", computation=name, source="compiled", lowered=True)
