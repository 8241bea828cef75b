"""ppy's objects, then jax's and the other libraries', out of the garbage collector's reach.

Importing jax leaves about a hundred thousand objects (modules, functions,
classes, caches) that live as long as the process. python's collector
traverses all of them at every full collection the program triggers, and
takes them apart at exit: on the page's example, 150 to 280 ms measured
here (a seventh to a quarter of the whole process), most of it after the
program's last line. A warm run never pays it: its server imported jax and
froze what it had (``gc.freeze``) before it forked the run. A cold run (and
``ppy record``) does the same: it freezes ppy's own objects before the
program starts, and what is alive after each import statement of the
program's own modules (``import jax``, ``import optax``), so that libraries
imported after jax are set aside too.

A frozen object is still freed when its last reference goes, as every
object is; only a reference cycle among frozen objects is never collected,
so its finalizers (``__del__``, a file's flush on close) never run. A
library's module-level objects are the warm server's to begin with. The
program's are not: an object it made before an import would be frozen
too, and a file it later hangs on it could be left unflushed at exit. So a
freeze is made only while the program has made nothing of its own: its
modules (``__main__``, and any module of the project folder) hold nothing
yet but modules, immutable values, and what libraries made. From the first
import after which they do (the first import after its own classes, or
inside ``main``), the collector is python's, and ``-v`` says why.
"""

from __future__ import annotations

import gc
import os
import sys
import types
from pathlib import Path
from typing import Any

from ppy.run.import_hooks import after_imports_from

__all__ = ["set_aside"]

#: Values that cannot hold a reference to anything made later.
_IMMUTABLE = (int, float, complex, str, bytes, bool, type(None), type(Ellipsis), range)
#: Folders of installed packages, which a project folder may hold.
_INSTALLED = frozenset({"site-packages", "dist-packages"})
#: Values whose own ``__module__`` says who made them.
_DEFINED = (type, types.FunctionType, types.BuiltinFunctionType, types.MethodType)


def set_aside(root: Path) -> None:
    """Freeze what is alive now, and again after each import statement of
    the program's own modules (under ``root``), while they hold nothing the
    program made. Called as the program is about to start."""
    # Everything alive now is ppy's (the parser, the configuration, the
    # artifact, the modules it imported), not the program's: a python run has
    # no such objects for its collections (dozens while jax imports) to
    # traverse.
    gc.freeze()
    folders = tuple({os.path.join(os.path.abspath(root), ""), os.path.join(root.resolve(), "")})
    # The program's modules are among those imported after this point.
    present = set(sys.modules) - {"__main__"}

    seen: dict[str, bool] = {}

    def programs(name: str) -> bool:
        if name not in seen:  # asked at every module jax imports: once per importer
            seen[name] = name not in present and _projects(sys.modules.get(name), folders)
        return seen[name]

    def imported(name: str) -> bool:
        from ppy.log import get_logger

        try:
            made = _programs_own(folders, present)
        except Exception as error:  # a module that will not be read: keep python's way
            made = f"the program's modules could not be read ({type(error).__name__})"
        if made is not None:
            get_logger().info(
                "run.collector",
                frozen=False,
                after=name,
                reason=f"{made} by the program: from here on, its objects are collected as "
                "under python",
            )
            return False
        gc.freeze()
        get_logger().info("run.collector", frozen=True, after=name, objects=gc.get_freeze_count())
        return True

    after_imports_from(programs, imported)


def _programs_own(folders: tuple[str, ...], present: set[str]) -> str | None:
    """The first value of the program's own that its modules hold, named, or None."""
    modules = {
        name: module
        for name, module in list(sys.modules.items())
        if name not in present and _projects(module, folders)
    }
    for name, module in modules.items():
        for key, value in list(getattr(module, "__dict__", {}).items()):
            if key.startswith("__") and key.endswith("__"):
                continue
            if _made_by(value, modules):
                return f"{name}.{key} was made"
    return None


def _projects(module: Any, folders: tuple[str, ...]) -> bool:
    """Whether ``module`` is the program or a module of its project folder (not
    an installed package that happens to sit in it, as in a ``.venv``)."""
    if getattr(module, "__name__", None) == "__main__":
        return True
    location = getattr(module, "__file__", None)
    if not isinstance(location, str):
        return False
    location = os.path.abspath(location)
    for folder in folders:
        if location.startswith(folder):
            inside = location[len(folder) :].split(os.sep)
            return not any(p.startswith(".") or p in _INSTALLED for p in inside)
    return False


def _made_by(value: Any, modules: dict[str, Any]) -> bool:
    """Whether the program made ``value``: its own function, class or instance,
    or a container (which may come to hold anything)."""
    if isinstance(value, (types.ModuleType, *_IMMUTABLE)):
        return False
    if isinstance(value, tuple):
        return any(_made_by(item, modules) for item in value)
    if isinstance(value, _DEFINED):
        return getattr(value, "__module__", None) in modules
    made_in = type(value).__module__
    # A list, a dict, a set of the program's may come to hold anything.
    return made_in == "builtins" or made_in in modules
