"""Cases 1 and 2: start-up of the page's example and of a deep model.

Four modes, one fresh process each per round, interleaved:

- ``python``: ``python model.ppy``, nothing cached;
- ``python + jax cache``: the same with jax's persistent compilation cache
  warm (``JAX_COMPILATION_CACHE_DIR``, minimum compile time 0, any entry size);
- ``ppy run cold``: ``ppy run model.ppy`` on the built artifact with an empty
  executable cache (``PPY_CACHE_DIR``), so the staged StableHLO is compiled;
- ``ppy run warm``: the same with the executable cache filled by an earlier run;
- ``ppy run --warm``: the same, each run forked from a warm-start server
  (docs/warm-start.md) that one untimed run started before the rounds; its
  executable cache is filled too, and in one fixed folder, since the cache
  folder is part of the server's key.

Every process starts with the caches of its mode as they were filled, so
none sees what another wrote. The deep model also reports its first call of
``forward`` as the program times it.
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from . import measure, projects
from .machine import ppy_command
from .measure import Comparison, Mode

__all__ = [
    "MODES",
    "deep_models",
    "first_calls",
    "interleaved",
    "modes",
    "page_example",
    "served_cache",
    "server_start",
    "warm_server",
]

MODES = ("python", "python + jax cache", "ppy run cold", "ppy run warm", "ppy run --warm")


def _jax_cache(directory: Path) -> dict[str, str]:
    return {
        "JAX_COMPILATION_CACHE_DIR": str(directory),
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
        "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "-1",
    }


def modes(project: Path, scratch: Path, *, staged: bool = True, cold: bool = True) -> list[Mode]:
    """Build the artifact, fill both caches once, and describe the modes.

    ``staged``: whether the build must stage something (or, off, nothing).
    ``cold``: whether ``ppy run cold`` is one of them (the device pass leaves
    it out: each process there costs the device's open).
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
    served = served_cache(scratch)
    shutil.copytree(ppy_filled, served)
    cold_mode = Mode(
        "ppy run cold", run, project, lambda p: {"PPY_CACHE_DIR": str(p / "ppy-cache")}
    )
    return [
        Mode("python", python, project, lambda p: {"PPY_CACHE_DIR": str(p / "ppy-cache")}),
        Mode(
            "python + jax cache",
            python,
            project,
            lambda p: {"PPY_CACHE_DIR": str(p / "ppy-cache"), **_jax_cache(copy_jax(p))},
        ),
        *([cold_mode] if cold else []),
        Mode("ppy run warm", run, project, lambda p: {"PPY_CACHE_DIR": str(copy_ppy(p))}),
        Mode(
            "ppy run --warm",
            [*ppy, "run", "--warm", "model.ppy"],
            project,
            lambda _p: {"PPY_CACHE_DIR": str(served)},
        ),
    ]


def served_cache(scratch: Path) -> Path:
    """The one executable cache of ``ppy run --warm``: the cache folder is part
    of the server's key, so every warm run of a case uses the same."""
    return scratch / "ppy-served"


@contextmanager
def warm_server(project: Path, scratch: Path) -> Iterator[dict[str, float]]:
    """The warm-start server of ``modes``'s ``ppy run --warm``, started by an
    untimed first run and stopped at the end. Yields what it cost: the first
    run's wall time (server start included) and, once the block has run, the
    server's resident memory while idle."""
    served = served_cache(scratch)
    served.mkdir(parents=True, exist_ok=True)
    env = {"PPY_CACHE_DIR": str(served)}
    first = measure.run_once([*ppy_command(), "run", "--warm", "model.ppy"], project, env)
    cost = {"first_run_s": first.wall_s}
    try:
        yield cost
        status = measure.run_once([*ppy_command(), "server", "status", "--json"], project, env)
        servers = json.loads(status.stdout)
        if len(servers) != 1:
            raise SystemExit(f"wanted one warm server for {project}, found {len(servers)}")
        cost["idle_rss_mib"] = servers[0]["rss"] / 2**20
        cost["runs_served"] = servers[0]["served"]
    finally:
        measure.run_once([*ppy_command(), "server", "stop"], project, env)


def server_start(
    case: str, against: list[float], cost: dict[str, float], baseline: str = "ppy run cold"
) -> Comparison:
    """The first ``ppy run --warm`` (which starts the server) against a cold
    run (or, where none was measured, ``baseline``)."""
    return Comparison(
        case,
        "first --warm run (starts the server)",
        "s",
        baseline,
        {baseline: against, "first ppy run --warm": [cost["first_run_s"]]},
        {"server_idle_rss_mib": round(cost["idle_rss_mib"], 1)},
    )


def interleaved(
    project: Path, scratch: Path, rounds: int, case: str, *, staged: bool = True, cold: bool = True
) -> tuple[dict[str, list[measure.Run]], Comparison]:
    """The modes' runs, interleaved, and what the warm server cost."""
    all_modes = modes(project, scratch, staged=staged, cold=cold)
    with warm_server(project, scratch) as cost:
        runs = measure.interleave(all_modes, rounds, scratch)
    baseline = "ppy run cold" if cold else "ppy run warm"
    against = [run.wall_s for run in runs[baseline]]
    return runs, server_start(case, against, cost, baseline)


def first_calls(runs: dict[str, list[measure.Run]], case: str) -> dict[str, list[float]]:
    """The first call each process timed (``first_call_s=`` on its stderr), by mode."""
    first: dict[str, list[float]] = {}
    for name, mode_runs in runs.items():
        values = [run.first_call_s for run in mode_runs]
        if any(value is None for value in values):
            raise SystemExit(f"{case}, {name}: no first_call_s= on its stderr")
        first[name] = [float(value) for value in values if value is not None]
    return first


def page_example(scratch: Path, rounds: int, *, cold: bool = True) -> list[Comparison]:
    """Case 1: the whole process of the page's example, per mode."""
    project = projects.page_example(scratch / "page")
    case = "page example"
    runs, start = interleaved(project, scratch / "page-caches", rounds, case, cold=cold)
    samples = {name: [run.wall_s for run in mode_runs] for name, mode_runs in runs.items()}
    return [Comparison(case, "whole process", "s", "python", samples), start]


def deep_models(
    scratch: Path, rounds: int, depths: tuple[int, ...], *, cold: bool = True
) -> list[Comparison]:
    """Case 2: first call and whole process of the deep model at each depth."""
    found: list[Comparison] = []
    for layers in depths:
        project = projects.deep_model(scratch / f"deep-{layers}", layers)
        case = f"deep model, {layers} layers"
        caches = scratch / f"deep-{layers}-caches"
        runs, start = interleaved(project, caches, rounds, case, cold=cold)
        first = first_calls(runs, f"deep model ({layers} layers)")
        wall = {name: [run.wall_s for run in mode_runs] for name, mode_runs in runs.items()}
        params = {"layers": layers, "width": projects.WIDTH}
        found.append(Comparison(case, "first call", "s", "python", first, params))
        found.append(Comparison(case, "whole process", "s", "python", wall, params))
        found.append(start)
    return found
