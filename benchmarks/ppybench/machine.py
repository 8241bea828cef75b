"""What a result depends on besides the code: the machine, its accelerator, the versions.

The accelerator is asked of jax in a fresh process (``accelerator``), never in
the runner's own: on a TPU one process at a time can hold the chip, and the
runner must leave it to the processes it measures. The probe ends before the
first of them starts.
"""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

__all__ = [
    "SETTINGS",
    "Accelerator",
    "accelerator",
    "describe",
    "ppy_command",
    "results_name",
    "runtime_settings",
]

_DISTRIBUTIONS = (
    "jax",
    "jaxlib",
    "ppy-core",
    "ppy-plugin-jax",
    "ppy-plugin-xla",
    "ppy-runtime-pjrt",
    "numba",
    "libtpu",
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


#: What the probe prints: the default backend's platform and its first device.
_PROBE = """\
import json
import jax

devices = jax.devices()
print(json.dumps({
    "platform": devices[0].platform,
    "device_kind": devices[0].device_kind,
    "device_count": len(devices),
}))
"""

#: Seconds the probe may take: a TPU's open takes 6-11 s; a minute is a machine in trouble.
PROBE_TIMEOUT = 120.0

#: A device kind as jax names it -> the results folder's name, where the
#: maker's usual name differs from jax's (jax calls a v5e "TPU v5 lite").
_KNOWN_KINDS = {
    "TPU v5 lite": "tpu-v5e",
    "TPU v5e": "tpu-v5e",
    "TPU v6 lite": "tpu-v6e",
    "TPU v5p": "tpu-v5p",
    "TPU v5": "tpu-v5p",
}

Accelerator = dict[str, object]


def accelerator(python: str = sys.executable, timeout: float = PROBE_TIMEOUT) -> Accelerator:
    """jax's default backend in a fresh process: platform, device kind and count.

    A probe that fails or times out is reported as such (``platform`` None
    and an ``error``): the run goes on and its record says so.
    """
    try:
        done = subprocess.run(
            [python, "-c", _PROBE],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        return {"platform": None, "error": f"jax.devices() took over {timeout:g} s"}
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        said = [line for line in done.stderr.strip().splitlines() if line.strip()]
        return {"platform": None, "error": said[-1] if said else f"exit {done.returncode}"}
    found: Accelerator = json.loads(lines[-1])
    return found


def results_name(found: Accelerator) -> str | None:
    """The results folder of a run on ``found`` (``tpu-v5e``); None on the CPU,
    whose results are ``benchmarks/results`` itself."""
    platform_name = found.get("platform")
    if platform_name in (None, "cpu"):
        return None
    kind = str(found.get("device_kind") or "")
    if kind in _KNOWN_KINDS:
        return _KNOWN_KINDS[kind]
    slug = re.sub(r"[^a-z0-9]+", "-", kind.lower()).strip("-")
    prefix = f"{platform_name}-"
    if not slug:
        return str(platform_name)
    return slug if slug.startswith(prefix) else prefix + slug


#: Settings of the accelerator's runtime that change its cost, never its
#: results (libtpu's pinned host buffer for transfers), shown with each run.
SETTINGS = ("TPU_PREMAPPED_BUFFER_SIZE", "TPU_PREMAPPED_BUFFER_TRANSFER_THRESHOLD_BYTES")


def runtime_settings() -> dict[str, str]:
    """The ``SETTINGS`` this run's environment sets: every process it
    measures inherits them, the floor's included."""
    return {name: os.environ[name] for name in SETTINGS if name in os.environ}


def describe(found: Accelerator | None = None) -> dict[str, object]:
    """The machine (CPU model, cores), its accelerator and the versions a
    result was taken with."""
    record: dict[str, object] = {
        "machine": {
            "cpu": _cpu_model(),
            "cores": os.cpu_count(),
            "platform": platform.platform(),
        },
        "python": platform.python_version(),
        "versions": {name: _version(name) for name in _DISTRIBUTIONS},
    }
    if found is not None:
        record["accelerator"] = dict(found)
    if settings := runtime_settings():
        record["settings"] = settings
    return record


def ppy_command() -> list[str]:
    """The ``ppy`` console script beside this Python, as a user runs it."""
    script = Path(sys.executable).with_name("ppy")
    if not script.exists():
        raise SystemExit(
            f"no ppy console script beside {sys.executable}: install ppy-core into this "
            "environment (nox -s bench does)"
        )
    return [str(script)]
