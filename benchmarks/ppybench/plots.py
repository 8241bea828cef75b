"""The PNG plots of a run (matplotlib, needed only by the benchmarks).

matplotlib is optional: where it is not installed (a TPU machine's index may
lack it, a runtime-only deployment never has it), ``draw`` draws nothing and
says so, and the run's JSON and table are written all the same. The plots can
be drawn later from the JSON, where matplotlib is (``run.py --report DIR``).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .measure import Comparison

__all__ = ["MISSING", "available", "draw"]

#: What the runner prints where matplotlib is not installed.
MISSING = (
    "matplotlib is not installed: no plots drawn (latest.json and latest.md are written); "
    "draw them later with `python benchmarks/run.py --report {results}` where it is"
)


def available() -> bool:
    """Whether matplotlib can be imported here (checked without importing it)."""
    try:
        return importlib.util.find_spec("matplotlib") is not None
    except (ImportError, ValueError):
        return False


def _figure(columns: int) -> tuple[Any, list[Any]]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, columns, figsize=(5.5 * columns, 4), squeeze=False)
    return figure, list(axes[0])


def _save(figure: Any, path: Path) -> Path:
    import matplotlib.pyplot as plt

    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path


def _startup(comparisons: Sequence[Comparison], path: Path) -> Path | None:
    deep = [c for c in comparisons if "layers" in c.params]
    if not deep:
        return None
    figure, axes = _figure(2)
    for axis, label in zip(axes, ("first call", "whole process"), strict=True):
        chosen = sorted(
            (c for c in deep if c.label == label), key=lambda c: int(str(c.params["layers"]))
        )
        depths = [int(str(c.params["layers"])) for c in chosen]
        for mode in chosen[0].samples:
            axis.plot(depths, [c.medians[mode] for c in chosen], marker="o", label=mode)
        axis.set_title(f"{label} (median)")
        axis.set_xlabel("dense layers")
        axis.set_ylabel("seconds")
        axis.set_ylim(bottom=0)
        axis.grid(alpha=0.3)
        axis.legend()
    return _save(figure, path)


def _bars(comparisons: Sequence[Comparison], path: Path, title: str, *, log: bool) -> Path | None:
    if not comparisons:
        return None
    figure, axes = _figure(len(comparisons))
    for axis, comparison in zip(axes, comparisons, strict=True):
        medians = comparison.medians
        axis.bar(list(medians), list(medians.values()), color="tab:blue")
        if log:
            axis.set_yscale("log")
        axis.set_title(f"{comparison.case}\n{comparison.label}", fontsize=9)
        axis.set_ylabel("seconds (median)")
    figure.suptitle(title)
    return _save(figure, path)


def _builds(comparisons: Sequence[Comparison], path: Path) -> Path | None:
    builds = sorted(
        (c for c in comparisons if "functions" in c.params),
        key=lambda c: int(str(c.params["functions"])),
    )
    if not builds:
        return None
    figure, axes = _figure(1)
    counts = [int(str(c.params["functions"])) for c in builds]
    for mode in builds[0].samples:
        axes[0].plot(
            counts, [c.medians[mode] for c in builds], marker="o", label=f"ppy build, {mode}"
        )
    axes[0].set_xlabel("staged functions")
    axes[0].set_ylabel("seconds (median)")
    axes[0].set_ylim(bottom=0)
    axes[0].grid(alpha=0.3)
    axes[0].legend()
    return _save(figure, path)


def draw(comparisons: Sequence[Comparison], directory: Path) -> list[Path]:
    """Every plot this run has the figures for, written into ``directory``;
    none where matplotlib is not installed (``available``)."""
    if not available():
        return []
    made = [
        _startup(comparisons, directory / "startup_vs_depth.png"),
        _bars(
            [c for c in comparisons if c.case == "page example" and c.label == "whole process"],
            directory / "page_example.png",
            "The page's example, whole process",
            log=False,
        ),
        _bars(
            [c for c in comparisons if c.case == "per-call overhead"],
            directory / "call_overhead.png",
            "Per call: staged against jitted",
            log=False,
        ),
        _bars(
            [c for c in comparisons if c.case == "xla scalar"],
            directory / "xla_scalar.png",
            "Scalar loops: CPython, staged, numba",
            log=True,
        ),
        _builds(comparisons, directory / "build_time.png"),
    ]
    return [path for path in made if path is not None]
