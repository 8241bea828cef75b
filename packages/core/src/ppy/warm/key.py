"""Which server may serve a run: everything that shaped the server's imports.

A server imported jax (and the preloaded modules) once, under one
interpreter with its options, one set of installed distributions and one
environment. A run whose interpreter, options, installs or import-time
environment differ would get modules another python would not have
imported, so it gets another server: the key names the server's socket, and
any difference is another name.

The variables are those jax, numpy and the interpreter read when they are
imported (``tests/warm/test_environment.py`` records what the installed
versions read and checks that each is here). What a preloaded package reads
beyond them, and the files of modules imported from outside the installed
distributions, the server itself checks on every run (``ppy.warm.server``):
they can only be known once it has imported them.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Final

__all__ = [
    "ENV_EXACT",
    "ENV_PREFIXES",
    "Key",
    "changed_file",
    "import_environment",
    "keyed",
    "make_key",
    "module_files",
]

#: Variables whose prefix says jax (``JAX_``, ``JAX2TF_``), XLA, Python and
#: its ``sysconfig`` (``_PYTHON``), the dynamic loader, CUDA, numpy
#: (``NPY_``, ``NUMPY_``), a BLAS, the locale or ppy may read them when a
#: module is imported.
ENV_PREFIXES: Final = (
    "JAX_",
    "JAX2TF_",
    "XLA_",
    "TF_",
    "PYTHON",
    "_PYTHON",
    "LD_",
    "CUDA",
    "NVIDIA_",
    "TPU_",
    "PPY_",
    "NPY_",
    "NUMPY_",
    "OMP_",
    "MKL_",
    "OPENBLAS_",
    "GOTO_",
    "LC_",
)
#: And these, read at start-up by the interpreter or at import by jax (two of
#: its configuration flags have no ``jax_`` in their name).
ENV_EXACT: Final = frozenset(
    {"LANG", "LANGUAGE", "TZ", "HOME", "TMPDIR", "EAGER_CONSTANT_FOLDING", "CHECK_VMA"}
)
#: Not part of the key: it only picks the mode, and a warm run with
#: ``PPY_WARM=1`` and one with ``--warm`` are the same run.
_NOT_KEYED: Final = frozenset({"PPY_WARM"})
#: ppy's own top-level packages: an editable install changes their code
#: without changing a version, so their files' times are in the key too.
_OWN_PACKAGES: Final = ("ppy", "ppy_plugin_jax", "ppy_plugin_xla", "ppy_runtime_pjrt")


@dataclass(frozen=True)
class Key:
    """The parts (for ``ppy server status``) and their digest (the socket's name)."""

    parts: Mapping[str, Any]
    digest: str

    @property
    def name(self) -> str:
        """The socket's file name stem: 20 hex digits of the digest."""
        return self.digest[:20]


def keyed(name: str) -> bool:
    """Whether the variable ``name`` is in the key."""
    return (name in ENV_EXACT or name.startswith(ENV_PREFIXES)) and name not in _NOT_KEYED


def import_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The variables of ``environ`` that modules may read at import."""
    return {name: value for name, value in sorted(environ.items()) if keyed(name)}


def make_key(root: Path, preload: Sequence[str], environ: Mapping[str, str]) -> Key:
    """The key of a run of a program of project ``root`` in ``environ``."""
    parts: dict[str, Any] = {
        "python": sys.executable,
        "version": sys.version,
        "flags": list(sys.flags),
        "warnoptions": list(sys.warnoptions),
        "xoptions": {name: str(value) for name, value in sorted(sys._xoptions.items())},
        "path": _import_path(),
        "root": str(root.resolve()),
        "preload": list(preload),
        "environment": import_environment(environ),
        "distributions": sorted(_distributions(_import_path())),
        "sources": _own_sources(),
    }
    canonical = json.dumps(parts, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return Key(parts, hashlib.sha256(canonical.encode()).hexdigest())


def _import_path() -> list[str]:
    """``sys.path`` less the entry the interpreter put first for the way it
    was started (the script's folder, the working folder under ``-m``, ``""``
    under ``-c``), which every run sets for itself. Under ``-P``, or ``-m``
    from a working folder that was deleted, there is none."""
    path = list(sys.path)
    if path and not sys.flags.safe_path and path[0] in _start_entries():
        del path[0]
    return path


def _start_entries() -> set[str]:
    entries = {""}
    with contextlib.suppress(OSError):
        entries.add(os.getcwd())
    if sys.argv and sys.argv[0] not in ("", "-c", "-m"):
        with contextlib.suppress(OSError):  # a relative path from a deleted folder
            entries.add(os.path.dirname(os.path.abspath(sys.argv[0])))
            entries.add(os.path.dirname(os.path.realpath(sys.argv[0])))
    return entries


def _distributions(path: Sequence[str]) -> Iterator[str]:
    """The name and version of every distribution installed on ``path``: its
    ``.dist-info`` (or ``.egg-info``) folder names, which a ``pip install``
    of another version renames, with their time, which a reinstall changes."""
    for entry in path:
        try:
            with os.scandir(entry or ".") as found:
                for item in found:
                    if item.name.endswith((".dist-info", ".egg-info", ".pth")):
                        yield f"{entry}/{item.name}@{item.stat().st_mtime_ns}"
        except OSError:
            continue


def _own_sources() -> dict[str, int]:
    """For each of ppy's packages found on the path, the newest time of its files."""
    import importlib.util

    newest: dict[str, int] = {}
    for package in _OWN_PACKAGES:
        try:
            spec = importlib.util.find_spec(package)
        except (ImportError, ValueError):
            continue
        if spec is None or not spec.submodule_search_locations:
            continue
        times = [0]
        for folder in spec.submodule_search_locations:
            for parent, dirs, files in os.walk(folder):
                dirs[:] = [d for d in dirs if d != "__pycache__"]
                times.extend(
                    os.stat(os.path.join(parent, f)).st_mtime_ns for f in files if f.endswith(".py")
                )
        newest[package] = max(times)
    return newest


def module_files(modules: Iterable[ModuleType]) -> dict[str, tuple[int, int]]:
    """The time and size of the file of each module in ``modules`` that the
    rest of the key does not cover: neither the standard library (the
    interpreter's version), nor an installed distribution's folder (its
    ``.dist-info``), nor ppy's own packages (``sources``). A preloaded module
    on ``PYTHONPATH`` and what it imported from there are such files."""
    covered = tuple(os.path.join(folder, "") for folder in _covered_folders())
    files: dict[str, tuple[int, int]] = {}
    for module in modules:
        path = getattr(module, "__file__", None)
        if not isinstance(path, str) or not os.path.isabs(path) or path.startswith(covered):
            continue
        try:
            status = os.stat(path)
        except OSError:
            continue
        files[path] = (status.st_mtime_ns, status.st_size)
    return files


def changed_file(files: Mapping[str, tuple[int, int]]) -> str | None:
    """The first of ``files`` whose time or size is no longer what it was."""
    for path, (mtime, size) in files.items():
        try:
            status = os.stat(path)
        except OSError:
            return path
        if (status.st_mtime_ns, status.st_size) != (mtime, size):
            return path
    return None


def _covered_folders() -> list[str]:
    import importlib.util
    import sysconfig

    folders = {sysconfig.get_path(name) for name in ("stdlib", "platstdlib")}
    for entry in _import_path():
        try:
            with os.scandir(entry or ".") as found:
                # Not ``.egg-info``: a legacy editable install leaves one in
                # the source folder it puts on the path, whose files change.
                if any(item.name.endswith(".dist-info") for item in found):
                    folders.add(entry)
        except OSError:
            continue
    for package in _OWN_PACKAGES:
        with contextlib.suppress(ImportError, ValueError):
            spec = importlib.util.find_spec(package)
            if spec is not None and spec.submodule_search_locations:
                folders.update(spec.submodule_search_locations)
    return sorted({os.path.realpath(f) for f in folders if f} | {f for f in folders if f})
