"""Where a project's ``.ppy`` modules are, and the names they import under.

The build and ``ppy run`` must agree on both: the build records each module
by these names, and at run time an entry is bound only in the module of the
same name. They live apart from ``ppy.discovery`` because ``ppy run`` needs
them at every start and discovery's AST reader is a cost it should not pay.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Final

from ppy.errors import ConfigError

__all__ = ["SKIPPED_DIRS", "find_sources", "module_name", "not_a_folder", "shown"]

#: Directories ``find_sources`` never enters (nor any whose name starts with ".").
SKIPPED_DIRS: Final[frozenset[str]] = frozenset(
    {
        ".git",
        ".hg",
        ".venv",
        "venv",
        ".nox",
        ".tox",
        "__pycache__",
        "node_modules",
        "build",
        "dist",
        ".ppy",
    }
)


def _skipped(name: str) -> bool:
    return name in SKIPPED_DIRS or name.startswith(".")


def find_sources(root: Path, unnamed: list[Path] | None = None) -> list[Path]:
    """Every ``*.ppy`` file under ``root``, sorted by relative path.

    A file whose path under the root is not UTF-8 (a folder named with the
    byte 0xff) is left out, and added to ``unnamed`` where given: the artifact
    names each module in UTF-8 (the manifest, its zip members), so the build
    cannot record it and ``ppy run`` binds nothing in it; it runs as an
    ordinary module.
    """
    root = Path(root)
    found: list[Path] = []
    for directory, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not _skipped(d))
        for name in filenames:
            path = Path(directory, name)
            if name.endswith(".ppy") and not name.startswith(".") and path.is_file():
                if _nameable(path.relative_to(root)):
                    found.append(path)
                elif unnamed is not None:
                    unnamed.append(path)
    return sorted(found, key=lambda p: p.relative_to(root).as_posix())


def _nameable(relative: Path) -> bool:
    try:
        relative.as_posix().encode("utf-8")
    except UnicodeEncodeError:  # a byte that is not UTF-8, decoded as a lone surrogate
        return False
    return True


def shown(path: str | Path) -> str:
    """A path as text that prints anywhere: a byte that is not UTF-8 as
    ``\\xff``, as python's stderr would escape it."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def module_name(root: Path, path: Path) -> str | None:
    """The import name of a source: ``pkg/helpers.ppy`` is ``pkg.helpers``.

    The build records each module by this name and ``ppy run`` binds by it;
    the program itself is named the same way (``model``), although it runs
    as ``__main__``. None when ``path`` is not under ``root`` (a program run
    from outside its project): nothing of the artifact is its own.
    """
    try:
        relative = Path(path).relative_to(root)
    except ValueError:
        return None
    parts = [*relative.parent.parts, relative.name.removesuffix(".ppy")]
    if parts[-1] == "__init__" and len(parts) > 1:
        parts.pop()
    return ".".join(parts)


def not_a_folder(path: Path) -> ConfigError | None:
    """Where one of ``path``'s folders is there and is something else (a
    file, a FIFO): the error naming it; None where none is.

    Such a thing makes every path under it fail with "Not a directory"
    (``ENOTDIR``), whatever that path is: ``.ppy`` made a file makes the
    recording and the artifact in it unreachable, and the error names
    ``.ppy``, not the file that was asked for.
    """
    path = Path(os.path.abspath(path))
    current = Path(path.anchor)
    for part in path.parent.parts[1:]:
        current = current / part
        try:
            mode = os.stat(current).st_mode
        except OSError:  # not there (or not reachable): nothing above it was in the way
            return None
        if not stat.S_ISDIR(mode):
            kind = "a FIFO" if stat.S_ISFIFO(mode) else "a file"
            return ConfigError(
                f"is {kind}, not a folder, so ppy cannot reach {path.name} in it",
                path=str(current),
                remedy=f"move {current.name} away; ppy makes the folder when it records or builds",
            )
    return None
