"""jax's own C++ dispatch for a function of ppy's, dressed as jit dresses its own.

What ``ppy run`` binds in a staged function's place, and what ``ppy record``
wraps a jitted function in, is a ``PjitFunction``: the object ``jax.jit``
returns, made by jaxlib with a miss of ppy's. A program that asks what it
holds (``type(f)``, ``isinstance(f, type(jax.jit(g)))``, ``f.__doc__``,
``f.lower``) gets jit's answers. jax is imported only when one is made.

It lives among the kinds' contracts because two sides use it, as they use
``fingerprint`` and ``pytrees``: core's recording and the ``jax.export``
runtime, which reaches core only through ``ppy.runtime`` and ``ppy.kinds``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

from ppy.runtime import ORIGINAL

__all__ = ["dispatcher", "dress", "hide_own_frames"]

#: What a jitted function answers itself, and a function made here forwards to
#: it where its type does not answer them (``dress``).
_FORWARDED = ("lower", "trace", "eval_shape")


def dispatcher(
    name: str,
    function: Callable[..., Any],
    miss: Callable[..., Any],
    static_argnums: Sequence[int] = (),
    static_argnames: Sequence[str] = (),
) -> Callable[..., Any] | None:
    """jax's C++ dispatch for a function of ppy's, or None where this jax has none.

    It is what ``jax.jit`` and ``Compiled`` calls go through: a cache of
    executables keyed by each argument's pytree structure, type, shape,
    dtype, weak type, sharding and commitment, by the static arguments'
    values and by jax's trace context, filled by what
    ``miss(*args, **kwargs)`` answers on a miss (outputs, the fast-path data
    of the executable that computed them or None to cache nothing, False).
    Static arguments are left out of what the executable is given, as jit
    leaves them out. Under ``jax.disable_jit`` it calls ``function``, as
    jit does.
    """
    try:
        from jax._src import tree_util
        from jax._src.interpreters import pxla
        from jax._src.lib import _jax  # type: ignore[attr-defined]  # private: jit's C++ dispatcher

        return _jax.pjit(  # type: ignore[no-any-return]
            name,
            function,
            miss,
            list(static_argnums),
            list(static_argnames),
            pxla.JitGlobalCppCacheKeys(),
            tree_util.dispatch_registry,
            pxla.cc_shard_arg,
        )
    except (ImportError, AttributeError, TypeError):
        return None


def dress(bound: Any, original: Any, function: Callable[..., Any], *extra: str) -> None:
    """Give ``bound`` what the jitted ``original`` shows of itself: its name,
    doc, module and the rest of its ``__dict__`` (jit's own ``_fun`` and
    ``_jit_info`` among them), ``__wrapped__`` (``function``, the Python
    function jit wraps), and the ``extra`` attributes named; and keep
    ``original`` as ``ppy.runtime.ORIGINAL``.

    ``lower``, ``trace`` and ``eval_shape`` are the class's, as on a jitted
    function (jax puts them on its type; they trace ``_fun`` under
    ``_jit_info``): forwarded to the original's only where this jax has
    none. An attribute of the instance would be copied by ``jax.jit(bound)``
    (``functools.wraps`` copies ``__dict__``), and that jit's ``lower`` and
    ``trace``, and ``jax.make_jaxpr(bound)``, would then be the original's,
    inlining its body where python shows the nested jit.
    """
    functools.update_wrapper(bound, original)
    bound.__wrapped__ = function
    for name in _FORWARDED:
        if name in vars(bound) or getattr(type(bound), name, None) is not None:
            continue
        value = getattr(original, name, None)
        if value is not None:
            setattr(bound, name, value)
    for name in extra:
        value = getattr(original, name, None)
        if value is not None:
            setattr(bound, name, value)
    setattr(bound, ORIGINAL, original)


def hide_own_frames(error: BaseException) -> None:
    """Take ppy's frames off the front of the traceback of what a call through
    ppy raised, as jax takes its own out of what a jitted call raises: the
    program's traceback then goes from its own frame to the function it
    called. Called where the call is caught, which re-raises with a bare
    ``raise`` (that adds no frame of its own)."""
    tb = error.__traceback__
    while tb is not None and _owned(tb.tb_frame.f_globals.get("__name__")):
        tb = tb.tb_next
    error.__traceback__ = tb


def _owned(module: object) -> bool:
    """Whether a frame of module ``module`` is ppy's: core, a runtime or a plugin."""
    return isinstance(module, str) and (
        module == "ppy" or module.startswith(("ppy.", "ppy_runtime_", "ppy_plugin_"))
    )
