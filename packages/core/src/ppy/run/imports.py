"""Run something once a module has been imported by the program, not before.

ppy must not import jax ahead of the program: a program may set
``JAX_ENABLE_X64`` or ``XLA_FLAGS`` in its environment before its own
``import jax``, and jax reads them as it loads. What ppy sets up around jax
(the compile cache of a program with nothing staged, the ``jax.jit`` that
finds the jits a function makes) waits for the
program's import instead: a finder stands first on ``sys.meta_path`` for
that one name, lets the usual finders find it, and runs the callback right
after the module has executed. The finder removes itself on first use.

``after_imports_from`` does the same for every module that a given set of
importers imports (an ``import`` statement in the program's own modules),
whatever its name, until its callback says to stop.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import sys
from collections.abc import Callable, Sequence
from types import FrameType, ModuleType
from typing import Any

__all__ = ["after_import", "after_imports_from"]


def after_import(name: str, callback: Callable[[], None]) -> None:
    """Call ``callback`` once ``name`` is imported; at once if it already is."""
    if name in sys.modules:
        callback()
        return
    sys.meta_path.insert(0, _Finder(name, callback))


def after_imports_from(importer: Callable[[str], bool], callback: Callable[[str], bool]) -> None:
    """Call ``callback(name)`` each time a module that ``importer`` accepts (by
    its ``__name__``) has imported module ``name`` by an ``import`` statement,
    once that module has executed; stop once ``callback`` returns False."""
    sys.meta_path.insert(0, _Watch(importer, callback))


def _find(
    fullname: str, path: Sequence[str] | None, target: ModuleType | None, after: Callable[[], None]
) -> importlib.machinery.ModuleSpec | None:
    """What the usual finders find (the caller has stepped out of
    ``sys.meta_path``, or skips itself), its loader followed by ``after``."""
    spec: importlib.machinery.ModuleSpec | None = None
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        spec = find(fullname, path, target) if find is not None else None
        if spec is not None:
            break
    if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
        return spec
    spec.loader = _Then(spec.loader, after)
    return spec


class _Finder(importlib.abc.MetaPathFinder):
    def __init__(self, name: str, callback: Callable[[], None]) -> None:
        self.name = name
        self.callback = callback

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        return _find(fullname, path, target, self.callback)


class _Watch(importlib.abc.MetaPathFinder):
    def __init__(self, importer: Callable[[str], bool], callback: Callable[[str], bool]) -> None:
        self.importer = importer
        self.callback = callback
        self.finding = False

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if self.finding or self not in sys.meta_path:
            return None
        name = _importer()
        if name is None or not self.importer(name):
            return None
        self.finding = True  # the usual finders are asked below, and this one is among them
        try:
            return _find(fullname, path, target, functools.partial(self._imported, fullname))
        finally:
            self.finding = False

    def _imported(self, name: str) -> None:
        if not self.callback(name) and self in sys.meta_path:
            sys.meta_path.remove(self)


def _importer() -> str | None:
    """The ``__name__`` of the module whose code is importing: the first frame
    outside the import system (importlib's and this module's)."""
    frame: FrameType | None = sys._getframe(2)
    while frame is not None and (
        frame.f_code.co_filename.startswith("<frozen importlib")
        or frame.f_code.co_filename == __file__
    ):
        frame = frame.f_back
    if frame is None:
        return None
    name = frame.f_globals.get("__name__")
    return name if isinstance(name, str) else None


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
