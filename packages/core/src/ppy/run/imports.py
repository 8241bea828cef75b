"""Run something once a module has been imported by the program, not before.

ppy must not import jax ahead of the program: a program may set
``JAX_ENABLE_X64`` or ``XLA_FLAGS`` in its environment before its own
``import jax``, and jax reads them as it loads. What ppy sets up around jax
(the compile cache of a program with nothing staged, the ``jax.jit`` that
finds the jits a function makes) waits for the
program's import instead: a finder stands first on ``sys.meta_path`` for
that one name, lets the usual finders find it, and runs the callback right
after the module has executed. The finder removes itself on first use.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

__all__ = ["after_import"]


def after_import(
    name: str, callback: Callable[[], None], *, before: Callable[[], None] | None = None
) -> None:
    """Call ``callback`` once ``name`` is imported; at once if it already is.
    ``before``, if given, is called as that import begins, before the module's
    code runs (and not at all where the module is imported already)."""
    if name in sys.modules:
        callback()
        return
    sys.meta_path.insert(0, _Finder(name, callback, before))


class _Finder(importlib.abc.MetaPathFinder):
    def __init__(
        self, name: str, callback: Callable[[], None], before: Callable[[], None] | None
    ) -> None:
        self.name = name
        self.callback = callback
        self.before = before

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        if self.before is not None:
            self.before()
        spec: importlib.machinery.ModuleSpec | None = None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec = find(fullname, path, target) if find is not None else None
            if spec is not None:
                break
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _Then(spec.loader, self.callback)
        return spec


class _Then(importlib.abc.Loader):
    """The module's own loader, then the callback."""

    def __init__(self, loader: Any, callback: Callable[[], None]) -> None:
        self.loader = loader
        self.callback = callback

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        # The wrapped loader is whatever object the usual finders returned.
        return self.loader.create_module(spec)  # type: ignore[no-any-return]

    def exec_module(self, module: ModuleType) -> None:
        self.loader.exec_module(module)
        self.callback()

    def __getattr__(self, name: str) -> Any:  # get_source, get_resource_reader, ...
        return getattr(self.loader, name)
