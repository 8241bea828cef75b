"""Which server may serve a run: everything that shaped the server's imports.

A server imported jax (and the preloaded modules) once, under one
interpreter, one set of installed distributions and one environment. A run
whose interpreter, installs or import-time environment differ would get
modules another python would not have imported, so it gets another server:
the key names the server's socket, and any difference is another name.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

__all__ = ["ENV_EXACT", "ENV_PREFIXES", "Key", "import_environment", "make_key"]

#: Variables whose prefix says jax, XLA, Python, the dynamic loader, CUDA,
#: a BLAS or ppy may read them when a module is imported.
ENV_PREFIXES: Final = (
    "JAX_",
    "XLA_",
    "TF_",
    "PYTHON",
    "LD_",
    "CUDA",
    "NVIDIA_",
    "TPU_",
    "PPY_",
    "OMP_",
    "MKL_",
    "OPENBLAS_",
    "LC_",
)
#: And these, read at start-up by the interpreter or at import by jax.
ENV_EXACT: Final = frozenset({"LANG", "LANGUAGE", "TZ", "HOME", "TMPDIR"})
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


def import_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The variables of ``environ`` that modules may read at import."""
    return {
        name: value
        for name, value in sorted(environ.items())
        if (name in ENV_EXACT or name.startswith(ENV_PREFIXES)) and name not in _NOT_KEYED
    }


def make_key(root: Path, preload: Sequence[str], environ: Mapping[str, str]) -> Key:
    """The key of a run of a program of project ``root`` in ``environ``."""
    parts: dict[str, Any] = {
        "python": sys.executable,
        "version": sys.version,
        "flags": list(sys.flags),
        "path": sys.path[1:],
        "root": str(root.resolve()),
        "preload": list(preload),
        "environment": import_environment(environ),
        "distributions": sorted(_distributions(sys.path[1:])),
        "sources": _own_sources(),
    }
    canonical = json.dumps(parts, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return Key(parts, hashlib.sha256(canonical.encode()).hexdigest())


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
