"""Fresh-process and in-process sampling, shared by every case.

Whole-process figures come from ``interleave``: each round starts one fresh
process per mode, in the same order (A B C A B C ...), so that drift on a
shared machine hits every mode alike. Every process gets a directory of its
own, which the mode's ``env`` callable fills (an empty cache directory is a
cold cache; a filled one restored from its snapshot is a warm cache), so that
no process sees what another wrote.
"""

from __future__ import annotations

import os
import re
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Comparison", "Mode", "Run", "interleave", "run_once", "warm_copy"]

#: What a program prints on stderr to report its first call, in seconds.
FIRST_CALL = re.compile(r"first_call_s=([0-9.eE+-]+)")

#: Variables a benchmark sets itself: inherited values would leak caches in.
_PRIVATE = (
    "PPY_CACHE_DIR",
    "JAX_COMPILATION_CACHE_DIR",
    "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS",
)


@dataclass(frozen=True)
class Run:
    """One fresh process: its wall time and what it printed."""

    wall_s: float
    stdout: str
    stderr: str

    @property
    def first_call_s(self) -> float | None:
        found = FIRST_CALL.search(self.stderr)
        return float(found.group(1)) if found else None


@dataclass(frozen=True)
class Mode:
    """One side of a comparison: a command, and the environment of each process.

    ``env`` receives a directory private to the process and returns the
    variables to add (cache directories inside it, filled or not).
    """

    name: str
    command: Sequence[str]
    cwd: Path
    env: Callable[[Path], Mapping[str, str]] = field(default=lambda _private: {})


def base_env() -> dict[str, str]:
    """This process's environment without any cache setting of its own."""
    env = dict(os.environ)
    for name in _PRIVATE:
        env.pop(name, None)
    return env


def run_once(command: Sequence[str], cwd: Path, extra: Mapping[str, str]) -> Run:
    """Run ``command`` to the end and time it; a failure stops the benchmark."""
    env = {**base_env(), **extra}
    start = time.perf_counter()
    done = subprocess.run(
        list(command), cwd=cwd, env=env, capture_output=True, text=True, check=False
    )
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(
            f"benchmark command failed ({done.returncode}) in {cwd}: {' '.join(command)}\n"
            f"{done.stdout}\n{done.stderr}"
        )
    return Run(wall, done.stdout, done.stderr)


def warm_copy(filled: Path) -> Callable[[Path], Path]:
    """A callable that gives a process the cache ``filled`` as it is now.

    The cache is restored at the path it was filled at, from a snapshot taken
    here, rather than copied into the process's own directory: jax's
    persistent cache keys change with the cache directory's path (jax 0.10.2),
    so a copy elsewhere would be a cold cache. Processes run one at a time,
    so the restored directory is still private to each.
    """
    snapshot = filled.with_name(filled.name + "-snapshot")
    shutil.copytree(filled, snapshot)

    def restore(_private: Path) -> Path:
        shutil.rmtree(filled, ignore_errors=True)
        shutil.copytree(snapshot, filled)
        return filled

    return restore


def interleave(
    modes: Sequence[Mode], rounds: int, scratch: Path, *, same_output: bool = True
) -> dict[str, list[Run]]:
    """``rounds`` fresh processes of each mode, alternated mode by mode.

    With ``same_output`` every process must print the same stdout, so that a
    mode that computes something else cannot pass for a faster one.
    """
    runs: dict[str, list[Run]] = {mode.name: [] for mode in modes}
    for _ in range(rounds):
        for mode in modes:
            private = Path(tempfile.mkdtemp(dir=scratch, prefix="proc-"))
            try:
                runs[mode.name].append(run_once(mode.command, mode.cwd, mode.env(private)))
            finally:
                shutil.rmtree(private, ignore_errors=True)
    outputs = {run.stdout for mode_runs in runs.values() for run in mode_runs}
    if same_output and len(outputs) > 1:
        raise SystemExit(f"the modes printed different things: {sorted(outputs)}")
    return runs


@dataclass(frozen=True)
class Comparison:
    """One measure of one case: samples per mode, and which mode is the alternative.

    ``baseline`` is what ppy is compared with; every other mode's ratio is its
    median over the baseline's median (below 1 means faster than the baseline).
    """

    case: str
    label: str
    unit: str
    baseline: str
    samples: Mapping[str, Sequence[float]]
    params: Mapping[str, object] = field(default_factory=dict)

    @property
    def medians(self) -> dict[str, float]:
        return {mode: statistics.median(values) for mode, values in self.samples.items()}

    def ratio(self, mode: str, over: str | None = None) -> float:
        medians = self.medians
        return medians[mode] / medians[over or self.baseline]

    @property
    def ratios(self) -> dict[str, float]:
        return {mode: self.ratio(mode) for mode in self.samples if mode != self.baseline}

    def to_json(self) -> dict[str, object]:
        return {
            "case": self.case,
            "label": self.label,
            "unit": self.unit,
            "baseline": self.baseline,
            "params": dict(self.params),
            "samples": {mode: list(values) for mode, values in self.samples.items()},
            "medians": self.medians,
            "ratios": self.ratios,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> Comparison:
        samples = data["samples"]
        params = data.get("params", {})
        assert isinstance(samples, dict) and isinstance(params, dict)
        return cls(
            case=str(data["case"]),
            label=str(data["label"]),
            unit=str(data["unit"]),
            baseline=str(data["baseline"]),
            samples={str(k): [float(v) for v in vs] for k, vs in samples.items()},
            params=params,
        )
