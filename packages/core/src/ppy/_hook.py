"""The ``.ppy`` import hook: ``import helpers`` finds ``helpers.ppy``.

A finder on ``sys.meta_path`` looks for ``<name>.ppy`` in each directory of the
search path, after the ordinary finders, so a ``.py`` module of the same name
still wins. ``ppy run`` adds a finder of its own in front of this one that
binds staged functions while the module executes.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Sequence
from types import ModuleType

__all__ = ["PPY_SUFFIX", "PpyFinder", "find_ppy_source", "install"]

PPY_SUFFIX = ".ppy"


def find_ppy_source(fullname: str, path: Sequence[str] | None) -> str | None:
    """The ``.ppy`` file that ``import fullname`` would load, or None."""
    tail = fullname.rpartition(".")[2]
    for entry in path if path is not None else sys.path:
        candidate = os.path.join(entry or os.getcwd(), tail + PPY_SUFFIX)
        if os.path.isfile(candidate):
            return candidate
    return None


class PpyFinder:
    """Finds ``.ppy`` modules and loads them as plain Python source.

    A meta path finder needs only ``find_spec``; it does not derive from
    ``importlib.abc.MetaPathFinder`` because importing ``importlib.abc`` costs
    every ``.ppy`` program about 35 ms.
    """

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        source = find_ppy_source(fullname, path)
        if source is None:
            return None
        loader = importlib.machinery.SourceFileLoader(fullname, source)
        return importlib.util.spec_from_file_location(fullname, source, loader=loader)


def install() -> None:
    """Add the finder once, at the end of ``sys.meta_path``."""
    if not any(isinstance(finder, PpyFinder) for finder in sys.meta_path):
        sys.meta_path.append(PpyFinder())
