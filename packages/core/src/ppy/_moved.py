"""Old import paths of modules that moved into ppy's subpackages, kept for one release.

Before 0.2 core was one flat package (``ppy.artifact``, ``ppy.entry``,
``ppy.kinds``, ...). A plugin written against those paths keeps working
until the next release: a module that became a package answers its old
names lazily through ``reexport``, and a module that moved keeps a stub at
its old path. Nothing here is imported by ``import ppy``, and a package's
``__init__`` stays free of imports, so the new rooms cost nothing until a
name in them is used. docs/plugins.md lists the moves.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence

__all__ = ["reexport"]


def reexport(package: str, names: Sequence[str], modules: Sequence[str]) -> Callable[[str], object]:
    """A module ``__getattr__`` for ``package`` that finds each old name in ``modules``.

    ``names`` is the old module's ``__all__``: only those are answered, so the
    old path offers what it offered, no more. ``modules`` are searched in
    order and imported on the first lookup only.
    """
    wanted = frozenset(names)

    def __getattr__(name: str) -> object:
        if name in wanted:
            for module in modules:
                found = importlib.import_module(f"{package}.{module}")
                if name in getattr(found, "__all__", ()):
                    return getattr(found, name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
