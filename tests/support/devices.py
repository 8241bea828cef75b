"""Running code on several host (CPU) devices, in a process of its own."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap


def on_host_devices(code: str, devices: int = 4) -> list[str]:
    """The lines ``code`` prints, run in a fresh python whose jax has
    ``devices`` CPU devices (XLA fixes the count when the backend starts, so
    a test process that has started it cannot have more); an error shows
    the process's stderr."""
    environment = {
        **os.environ,
        "JAX_PLATFORMS": "cpu",
        "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}",
    }
    ran = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=environment,
        timeout=120,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    return ran.stdout.splitlines()
