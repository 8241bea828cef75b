"""Run something once a module has been imported by the program, not before.

ppy must not import jax ahead of the program: a program may set
``JAX_ENABLE_X64`` or ``XLA_FLAGS`` in its environment before its own
``import jax``, and jax reads them as it loads. What ppy sets up around jax
(the compile cache of a program with nothing staged, the ``jax.jit`` that
finds the jits a function makes) waits for the
program's import instead: a finder stands first on ``sys.meta_path`` for
that one name, lets the usual finders find it, and runs the callback right
after the module has executed (``_Announcing``). The finder removes itself
once it has.

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
    fullname: str,
    path: Sequence[str] | None,
    target: ModuleType | None,
    asking: importlib.abc.MetaPathFinder,
    after: Callable[[], None],
) -> importlib.machinery.ModuleSpec | None:
    """What the usual finders find (all but ``asking``, which is finding it),
    marked to call ``after`` once its module has executed (``_Announcing``)."""
    spec: importlib.machinery.ModuleSpec | None = None
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None) if finder is not asking else None
        spec = find(fullname, path, target) if find is not None else None
        if spec is not None:
            break
    if spec is None or not hasattr(spec.loader, "exec_module"):
        return spec  # None, or a loader importlib calls otherwise
    if type(spec) is importlib.machinery.ModuleSpec:
        spec.__class__ = _Announcing
    elif type(spec) is not _Announcing:
        return spec  # a spec of a class of someone else's: left as it is
    _AFTER.setdefault(id(spec), []).append(after)  # a finder further in marked it first
    return spec


#: What to call once the module of each marked spec (by ``id``) has executed.
_AFTER: dict[int, list[Callable[[], None]]] = {}


class _Announcing(importlib.machinery.ModuleSpec):
    """A spec whose module, once executed, calls back.

    importlib's ``_load_unlocked`` sets ``spec._initializing`` to True before
    the loader executes the module and back to False once it has, or has
    failed (python 3.11 to 3.13 alike): the callback runs in that assignment,
    after the module's code and outside the frames an error in it passes
    through. A loader of ppy's around the module's own loader would be one
    frame more in every import, between importlib's frames, which python
    could then no longer take out of a traceback (``_call_with_frames_removed``).
    The spec is a plain ``ModuleSpec`` again once it has called back.
    """

    def __setattr__(self, name: str, value: Any) -> None:
        super().__setattr__(name, value)
        if name == "_initializing" and value is False:
            self.__class__ = importlib.machinery.ModuleSpec  # type: ignore[assignment]
            callbacks = _AFTER.pop(id(self), [])
            if self.name in sys.modules:  # it executed
                for after in callbacks:
                    after()


class _Finder(importlib.abc.MetaPathFinder):
    """Marks the spec of one module; leaves ``sys.meta_path`` once it executed."""

    def __init__(self, name: str, callback: Callable[[], None]) -> None:
        self.name = name
        self.callback = callback
        self.finding = False

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.name or self.finding:
            return None
        self.finding = True  # the finders asked below may ask the others, this one among them
        try:
            return _find(fullname, path, target, self, self._imported)
        finally:
            self.finding = False

    def _imported(self) -> None:
        if self in sys.meta_path:
            sys.meta_path.remove(self)
            self.callback()


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
            after = functools.partial(self._imported, fullname)
            return _find(fullname, path, target, self, after)
        finally:
            self.finding = False

    def _imported(self, name: str) -> None:
        if self in sys.meta_path and not self.callback(name):
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
