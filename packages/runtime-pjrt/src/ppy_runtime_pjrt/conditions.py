"""What must hold, besides the inputs, for an export to compute what the jitted call would.

An export froze, at build time, the values its trace read from the
program's globals (``JaxExport.captures``) and the jax configuration it ran
under (``JaxExport.trace_config``). In the running program either may
differ: a file loaded at import changed, ``main()`` set a flag, the program
turned on ``jax_enable_x64`` or entered ``jax.disable_jit()``.

Both are checked when jax would read them. The options are compared one by
one, once per trace context (a tuple jax builds in C++ from every option
that changes a trace). The values are fingerprinted again where jit would
trace: once per abstract signature and trace context, which is the key of
jit's own trace cache. A NumPy input after a ``jax.Array`` of the same shape
is a miss for the dispatcher but not a new trace for jit, so a global changed
between the two calls is not read again, by jit or here; and the verdict
stays, as jit's trace does, until ``jax.clear_caches()`` or the function's
``clear_cache()``.
``jax_debug_nans`` and ``jax_debug_infs`` are not in the trace context:
under them a miss goes to the original, and a call the dispatcher serves is
checked as jit checks its own, by jax's output hook.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Hashable, Sequence
from typing import Any

from ppy.kinds.fingerprint import Unreadable, fingerprint, resolve
from ppy.kinds.jax_export import Captured
from ppy.kinds.trace_config import differences

from ppy_runtime_pjrt.guard import Fallback

__all__ = ["Conditions"]


class Conditions:
    """The captured values and configuration of one export, checked against the program."""

    def __init__(
        self,
        original: Callable[..., Any],
        captures: tuple[Captured, ...],
        trace_config: dict[str, str],
        module: str | None = None,
    ) -> None:
        """``module``: the entry's module, the name the program's own module
        had at build time (it runs as ``__main__``)."""
        import jax
        from jax._src import config

        self.original = original
        self.captures = captures
        self.trace_config = trace_config
        self.module = module
        self._config = jax.config
        self._flatten = jax.tree_util.tree_flatten
        #: jax's trace context: what the verdicts are kept by.
        self.context: Callable[[], Any] = config.trace_context
        #: Truthy while jax_debug_nans or jax_debug_infs is on.
        self.debug = _debug_state(config)
        self._verdicts: dict[Any, Fallback | None] = {}
        self.traces = _Traces()

    def configuration(self) -> Fallback | None:
        """Why the configuration now is not the trace's, or None."""
        if self.debug.value:
            return Fallback(
                "config", "jax_debug_nans or jax_debug_infs is on: jit checks every output"
            )
        context = self.context()
        try:
            verdict = self._verdicts.get(context, ...)
        except TypeError:  # a context jax cannot hash: checked every time
            verdict = ...
        if verdict is ...:
            changed = differences(self._config, self.trace_config)
            verdict = Fallback("config", "; ".join(changed)) if changed else None
            with contextlib.suppress(TypeError):
                self._verdicts[context] = verdict
        return verdict

    def captured(
        self, signature: Hashable, statics: Sequence[tuple[Any, Sequence[Captured]]] = ()
    ) -> Fallback | None:
        """Why a value the trace read is not what the build saw, or None,
        decided where jit would trace: once per abstract ``signature`` (the
        call's statics, structure and leaf avals) and trace context.
        ``statics``: each function the call passes as a static argument, with
        what must hold of it, each path followed from that function."""
        if not self.captures and not statics:
            return None
        key = (self.context(), signature)
        try:
            verdict = self.traces.verdicts.get(key, ...)
        except TypeError:  # a key jax cannot hash: compared every time
            return self._compare(statics)
        if verdict is ...:
            verdict = self.traces.verdicts[key] = self._compare(statics)
        return verdict

    def _compare(self, statics: Sequence[tuple[Any, Sequence[Captured]]]) -> Fallback | None:
        roots = [(self.original, self.captures), *statics]
        for root, captures in roots:
            verdict = self._compare_from(root, captures)
            if verdict is not None:
                return verdict
        return None

    def _compare_from(self, root: Any, captures: Sequence[Captured]) -> Fallback | None:
        for capture in captures:
            try:
                value = resolve(root, capture.path)
                now = fingerprint(value, limit=1 << 62, flatten=self._flatten, main=self.module)
            except (LookupError, AttributeError):
                return Fallback("captured", f"{capture.name} is gone from the program")
            except Unreadable as error:
                return Fallback("captured", f"{capture.name} cannot be compared now: {error}")
            except Exception as error:  # the program's own code raised as it was read
                return Fallback(
                    "captured",
                    f"{capture.name} cannot be read now: {type(error).__name__}: {error}",
                )
            if now != capture.fingerprint:
                return Fallback(
                    "captured",
                    f"{capture.name} is not the value the build traced with (it changed "
                    "since the build, or the program set it)",
                )
        return None


class _Traces:
    """The captured verdicts of one function, by trace key, cleared with jit's traces.

    Registered with jax's cache registry, so ``jax.clear_caches()``, after
    which jit traces again, has the globals compared again too.
    """

    __slots__ = ("__weakref__", "verdicts")

    def __init__(self) -> None:
        self.verdicts: dict[Any, Fallback | None] = {}
        from jax._src import util

        util.register_cache(self, "ppy: captured values by trace key")

    def cache_clear(self) -> None:
        self.verdicts.clear()

    def cache_info(self) -> str:
        return f"{len(self.verdicts)} trace keys"


class _EitherDebug:
    def __init__(self, config: Any) -> None:
        self.nans, self.infs = config.debug_nans, config.debug_infs

    @property
    def value(self) -> bool:
        return bool(self.nans.value or self.infs.value)


def _debug_state(config: Any) -> Any:
    """What says, in one read, whether jax_debug_nans or jax_debug_infs is on.

    jax keeps one: the hook jit runs on every output under either option
    (``jax._src.api._post_hook_state``, set by both options' own hooks, for
    this thread and globally); where this jax has none, both options are read.
    """
    from jax._src import api

    state = getattr(api, "_post_hook_state", None)
    return state if hasattr(state, "value") else _EitherDebug(config)
