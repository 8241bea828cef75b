"""Running the export worker: one process per build, restarted only after a crash.

The worker runs the user's code, so it gets a scrubbed environment (no
inherited secrets), a time limit per module (``export-timeout``), and its own
process group so a hang can be killed whole. If it dies, the functions of the
module it was working on fail with what it printed, and a fresh worker takes
the modules that remain.
"""

from __future__ import annotations

import base64
import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ppy.entry import Entry
from ppy.plugin import StageFailure, StageRequest, StageTarget
from ppy.spec import TensorSpec

__all__ = ["ENV_KEEP", "ENV_PREFIXES", "export_in_worker", "worker_environment"]

#: Variables the worker inherits by name; everything else is dropped.
ENV_KEEP = frozenset(
    {"PATH", "HOME", "LANG", "TMPDIR", "TZ", "PYTHONPATH", "LD_LIBRARY_PATH", "SYSTEMROOT"}
)
#: ... and by prefix: jax's, XLA's and the GPU stacks' own settings.
ENV_PREFIXES = ("LC_", "JAX_", "XLA_", "TF_CPP_", "CUDA_", "NVIDIA_", "ROCM_", "HIP_", "TPU_")

_REMEDY = "fix the module so that importing it has no side effects, then rebuild"


def worker_environment(environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    env = {k: v for k, v in environ.items() if k in ENV_KEEP or k.startswith(ENV_PREFIXES)}
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _request(target: StageTarget) -> dict[str, Any]:
    return {
        "name": target.module.name,
        "path": target.module.path,
        "functions": [
            {
                "qualname": f.qualname,
                "params": [
                    {"name": p.name, "dims": list(p.spec.shape or ()), "dtype": p.spec.dtype}
                    for p in f.parameters
                ],
            }
            for f in target.functions
        ],
    }


def _entry(target: StageTarget, qualname: str, message: Mapping[str, Any]) -> Entry:
    function = next(f for f in target.functions if f.qualname == qualname)
    inputs = tuple(
        TensorSpec(tuple(p.spec.shape or ()), p.spec.dtype or "", p.name)
        for p in function.parameters
    )
    outputs = tuple(TensorSpec(tuple(o["dims"]), o["dtype"]) for o in message["outputs"])
    return Entry(
        module=target.module.name,
        qualname=qualname,
        kind="jax.export",
        inputs=inputs,
        outputs=outputs,
        platforms=tuple(message["platforms"]),
        payload={
            "export": base64.b64decode(message["export"]),
            "stablehlo": message["stablehlo"].encode(),
        },
        metadata=message["metadata"],
    )


class _Worker:
    """One worker process and the pipe it answers on."""

    def __init__(self, request: dict[str, Any]) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "ppy_plugin_jax.worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=worker_environment(),
            cwd=request["root"],
            start_new_session=True,
        )
        assert self.process.stdin and self.process.stdout
        self.process.stdin.write(json.dumps(request).encode())
        self.process.stdin.close()
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.process.stdout, selectors.EVENT_READ)
        self.buffer = b""

    def read(self, deadline: float) -> dict[str, Any] | None:
        """The next message, or None when the worker ended or the deadline passed."""
        assert self.process.stdout
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not self.selector.select(left):
                return None
            chunk = os.read(self.process.stdout.fileno(), 1 << 20)
            if not chunk:
                return None
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        message: dict[str, Any] = json.loads(line)
        return message

    def stop(self) -> int | None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        code = self.process.wait()
        self.selector.close()
        assert self.process.stdout
        self.process.stdout.close()
        return code


def export_in_worker(request: StageRequest) -> list[Entry | StageFailure]:
    timeout = float(request.settings.get("export-timeout", 120.0))
    results: dict[tuple[str, str], Entry | StageFailure] = {}
    pending = list(request.targets)
    with tempfile.TemporaryDirectory(prefix="ppy-export-") as tmp:
        capture = Path(tmp) / "output.txt"
        while pending:
            capture.write_bytes(b"")
            worker = _Worker(
                {
                    "root": str(request.root),
                    "platforms": request.settings.get("platforms"),
                    "capture": str(capture),
                    "modules": [_request(t) for t in pending],
                }
            )
            current: StageTarget | None = None
            timed_out = False
            try:
                while True:
                    message = worker.read(time.monotonic() + timeout)
                    if message is None:
                        timed_out = worker.process.poll() is None
                        break
                    if message.get("event") == "module":
                        current = next(t for t in pending if t.module.name == message["module"])
                        continue
                    if message.get("event") == "done":
                        pending = []
                        break
                    assert current is not None
                    key = (message["module"], message["qualname"])
                    results[key] = (
                        _entry(current, message["qualname"], message)
                        if message["ok"]
                        else StageFailure(
                            *key,
                            message["rule"],
                            message["reason"],
                            _REMEDY
                            if message["rule"] == "import-failed"
                            else "see the reason; the function stays jitted",
                            message.get("output", ""),
                        )
                    )
                    if all((current.module.name, f.qualname) in results for f in current.functions):
                        pending.remove(current)
                        current = None
            finally:
                code = worker.stop()
            if not pending:
                break
            # The worker died or hung in ``current`` (or before its first module).
            victim = current or pending[0]
            how = (
                f"timed out after {timeout:g} s (export-timeout)"
                if timed_out
                else f"the export worker exited with code {code}"
            )
            output = capture.read_text(errors="replace")
            for function in victim.functions:
                results.setdefault(
                    (victim.module.name, function.qualname),
                    StageFailure(
                        victim.module.name,
                        function.qualname,
                        "export-failed",
                        f"{how} while importing or exporting {victim.module.path}",
                        _REMEDY,
                        output[-4000:],
                    ),
                )
            pending.remove(victim)
    return [results[t.module.name, f.qualname] for t in request.targets for f in t.functions]
