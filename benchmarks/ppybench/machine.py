"""What a result depends on besides the code: the machine and the versions."""

from __future__ import annotations

import os
import platform
import sys
from importlib import metadata
from pathlib import Path

__all__ = ["describe", "ppy_command"]

_DISTRIBUTIONS = (
    "jax",
    "jaxlib",
    "ppy-core",
    "ppy-plugin-jax",
    "ppy-plugin-xla",
    "ppy-runtime-pjrt",
    "numba",
)


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def describe() -> dict[str, object]:
    """The machine (CPU model, cores) and the versions a result was taken with."""
    return {
        "machine": {
            "cpu": _cpu_model(),
            "cores": os.cpu_count(),
            "platform": platform.platform(),
        },
        "python": platform.python_version(),
        "versions": {name: _version(name) for name in _DISTRIBUTIONS},
    }


def ppy_command() -> list[str]:
    """The ``ppy`` console script beside this Python, as a user runs it."""
    script = Path(sys.executable).with_name("ppy")
    if not script.exists():
        raise SystemExit(
            f"no ppy console script beside {sys.executable}: install ppy-core into this "
            "environment (nox -s bench does)"
        )
    return [str(script)]
