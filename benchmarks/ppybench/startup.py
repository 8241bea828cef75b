"""Cases 1 and 2: start-up of the page's example and of a deep model.

Four modes, one fresh process each per round, interleaved:

- ``python``: ``python model.ppy``, nothing cached;
- ``python + jax cache``: the same with jax's persistent compilation cache
  warm (``JAX_COMPILATION_CACHE_DIR``, minimum compile time 0, any entry size);
- ``ppy run cold``: ``ppy run model.ppy`` on the built artifact with an empty
  executable cache (``PPY_CACHE_DIR``), so the staged StableHLO is compiled;
- ``ppy run warm``: the same with the executable cache filled by an earlier run.

Every process starts with the caches of its mode as they were filled, so
none sees what another wrote. The deep model also reports its first call of
``forward`` as the program times it.
"""

from __future__ import annotations

import sys
from pathlib import Path

from . import measure, projects
from .machine import ppy_command
from .measure import Comparison, Mode

__all__ = ["MODES", "deep_models", "first_calls", "modes", "page_example"]

MODES = ("python", "python + jax cache", "ppy run cold", "ppy run warm")


def _jax_cache(directory: Path) -> dict[str, str]:
    return {
        "JAX_COMPILATION_CACHE_DIR": str(directory),
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
        "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "-1",
    }


def modes(project: Path, scratch: Path, *, staged: bool = True) -> list[Mode]:
    """Build the artifact, fill both caches once, and describe the four modes.

    ``staged``: whether the build must stage something (or, off, nothing).
    """
    ppy = ppy_command()
    built = measure.run_once(
        [*ppy, "build"], project, {"PPY_CACHE_DIR": str(scratch / "build-cache")}
    )
    count = projects.staged_count(project)
    if staged and count == 0:
        raise SystemExit(
            f"ppy build staged nothing in {project}; is ppy-plugin-jax installed?\n{built.stderr}"
        )
    if not staged and count:
        raise SystemExit(f"ppy build staged {count} functions in {project}, meant to stage none")
    ppy_filled = scratch / "ppy-filled"
    jax_filled = scratch / "jax-filled"
    run = [*ppy, "run", "model.ppy"]
    python = [sys.executable, "model.ppy"]
    measure.run_once(run, project, {"PPY_CACHE_DIR": str(ppy_filled)})
    measure.run_once(
        python, project, {"PPY_CACHE_DIR": str(scratch / "unused"), **_jax_cache(jax_filled)}
    )
    copy_ppy = measure.warm_copy(ppy_filled)
    copy_jax = measure.warm_copy(jax_filled)
    return [
        Mode("python", python, project, lambda p: {"PPY_CACHE_DIR": str(p / "ppy-cache")}),
        Mode(
            "python + jax cache",
            python,
            project,
            lambda p: {"PPY_CACHE_DIR": str(p / "ppy-cache"), **_jax_cache(copy_jax(p))},
        ),
        Mode("ppy run cold", run, project, lambda p: {"PPY_CACHE_DIR": str(p / "ppy-cache")}),
        Mode("ppy run warm", run, project, lambda p: {"PPY_CACHE_DIR": str(copy_ppy(p))}),
    ]


def first_calls(runs: dict[str, list[measure.Run]], case: str) -> dict[str, list[float]]:
    """The first call each process timed (``first_call_s=`` on its stderr), by mode."""
    first: dict[str, list[float]] = {}
    for name, mode_runs in runs.items():
        values = [run.first_call_s for run in mode_runs]
        if any(value is None for value in values):
            raise SystemExit(f"{case}, {name}: no first_call_s= on its stderr")
        first[name] = [float(value) for value in values if value is not None]
    return first


def page_example(scratch: Path, rounds: int) -> list[Comparison]:
    """Case 1: the whole process of the page's example, per mode."""
    project = projects.page_example(scratch / "page")
    runs = measure.interleave(modes(project, scratch / "page-caches"), rounds, scratch)
    samples = {name: [run.wall_s for run in mode_runs] for name, mode_runs in runs.items()}
    return [Comparison("page example", "whole process", "s", "python", samples)]


def deep_models(scratch: Path, rounds: int, depths: tuple[int, ...]) -> list[Comparison]:
    """Case 2: first call and whole process of the deep model at each depth."""
    found: list[Comparison] = []
    for layers in depths:
        project = projects.deep_model(scratch / f"deep-{layers}", layers)
        depth_modes = modes(project, scratch / f"deep-{layers}-caches")
        runs = measure.interleave(depth_modes, rounds, scratch)
        first = first_calls(runs, f"deep model ({layers} layers)")
        wall = {name: [run.wall_s for run in mode_runs] for name, mode_runs in runs.items()}
        params = {"layers": layers, "width": projects.WIDTH}
        case = f"deep model, {layers} layers"
        found.append(Comparison(case, "first call", "s", "python", first, params))
        found.append(Comparison(case, "whole process", "s", "python", wall, params))
    return found
