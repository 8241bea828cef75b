"""Jits the program makes where no module-level statement names them.

Binding (``ppy.run.binding``) puts a staged function in place of a name as
the module-level statement that binds it executes. A ``@jax.jit`` def inside
a function (``minimize.<locals>.update``), or under ``if __name__ ==
"__main__":``, has no such statement, nor has ``gram_ = jax.jit(partial(gram,
kernel))`` inside ``train``: each is made when the code around it runs, as
often as it runs. Such a jit is found where it is made, in ``jax.jit``
itself: a def by its code, a call by the line of the function that makes it.

While a run wants them (``ppy run`` with such entries, ``ppy record`` with
such candidates), ``jax.jit`` is jax's own, wrapped: every call is jax's, and
when it jits a plain function whose code is one of those wanted (by the file
it was compiled from and its qualname), or is called from a line wanted (by
the file, the calling function's qualname and the line), what jax made is
handed to the wanter, which returns what the program gets in its place: a
staged function, a recording one, or jax's own. Everything else, library code's jits
included, gets jax's result untouched, after one dict lookup.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any

from ppy.run.import_hooks import after_import

__all__ = ["Made", "MadeJits"]

#: What a wanted jit is handed to: jax's jitted function -> what the program
#: gets in its place.
Made = Callable[[Any], Any]

_MISSING: Any = object()


class MadeJits:
    """The functions wanted, by (code filename, qualname), the call sites
    wanted, by (code filename, qualname, line), and the wrapped ``jax.jit``."""

    def __init__(self) -> None:
        self.wanted: dict[tuple[str, str], Made] = {}
        self.sites: dict[tuple[str, str, int], Made] = {}
        self._asked = False
        self._jax: Any = None
        self._original: Any = None

    def want(self, filename: str, qualname: str, made: Made) -> None:
        """Hand jits of this code to ``made``: from now on, ``jax.jit`` is wrapped.

        The module that makes them is about to execute, so its own ``import
        jax`` or ``from jax import jit`` reads the wrapped one.
        """
        self.wanted[(filename, qualname)] = made
        self.install()

    def want_site(self, filename: str, owner: str, lines: tuple[int, ...], made: Made) -> None:
        """Hand what ``jax.jit`` makes when the function ``owner`` calls it on one
        of ``lines`` to ``made``, whatever it jits (a partial, a transform)."""
        for line in lines:
            self.sites[(filename, owner, line)] = made
        self.install()

    def install(self) -> None:
        """Wrap ``jax.jit`` as soon as jax is imported, and not before: at once
        if it is, else right after the program's own ``import jax`` runs,
        before its ``from jax import jit`` reads the name. ppy never imports
        jax ahead of the program, which may set ``JAX_ENABLE_X64`` first."""
        if not self._asked:
            self._asked = True
            after_import("jax", self._wrap)

    def _wrap(self) -> None:
        import jax

        original = jax.jit
        wanted = self.wanted
        sites = self.sites

        @functools.wraps(original)
        def jit(fun: Any = _MISSING, /, *args: Any, **kwargs: Any) -> Any:
            if fun is _MISSING and not args:  # jax.jit(static_argnames=...) as a decorator
                original(**kwargs)  # what jax refuses, it refuses here
                return lambda fun: jit(fun, **kwargs)
            jitted = original(fun, *args, **kwargs)
            if args:
                return jitted
            code = getattr(fun, "__code__", None)
            made = None
            if code is not None:
                made = wanted.get((code.co_filename, getattr(fun, "__qualname__", "")))
            if made is None and sites:
                frame = sys._getframe(1)  # the program's, which calls jax.jit
                where = frame.f_code
                made = sites.get((where.co_filename, where.co_qualname, frame.f_lineno))
            return jitted if made is None else made(jitted)

        self._jax, self._original = jax, original
        jax.jit = jit

    def remove(self) -> None:
        if self._jax is not None:
            self._jax.jit = self._original
            self._jax = self._original = None
