"""Case 5: ``ppy build`` time against the number of staged functions.

A project of N staged functions, one module each. ``cold``: a fresh copy of
the project with no artifact and an empty cache. ``incremental``: the build
after one module was edited, with the previous artifact in place, so the
other modules are reused. ``cold, no verify-sizes``: as cold, with
``verify-sizes = false``, so its ratio to cold is what checking each export
against the jitted function at several sizes costs. The modes alternate,
one fresh process each.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from . import measure, projects
from .machine import ppy_command
from .measure import Comparison

__all__ = ["build_times"]


def build_times(scratch: Path, rounds: int, sizes: tuple[int, ...]) -> list[Comparison]:
    ppy = ppy_command()
    found = []
    for size in sizes:
        template = projects.build_project(scratch / f"build-{size}", size)
        built = scratch / f"build-{size}-built"
        shutil.copytree(template, built)
        measure.run_once([*ppy, "build"], built, {"PPY_CACHE_DIR": str(scratch / "build-cache")})
        if projects.staged_count(built) != size:
            raise SystemExit(
                f"ppy build staged {projects.staged_count(built)} of {size} functions in {built}"
            )
        samples: dict[str, list[float]] = {
            "cold": [],
            "incremental": [],
            "cold, no verify-sizes": [],
        }
        for index in range(rounds):
            for mode, verify in (("cold", True), ("cold, no verify-sizes", False)):
                cold = scratch / f"build-{size}-cold-{index}"
                shutil.copytree(template, cold)
                if not verify:
                    with (cold / "pyproject.toml").open("a") as pyproject:
                        pyproject.write("verify-sizes = false\n")
                run = measure.run_once(
                    [*ppy, "build"], cold, {"PPY_CACHE_DIR": str(cold / ".cache")}
                )
                samples[mode].append(run.wall_s)
                shutil.rmtree(cold)
            (built / "m0.ppy").write_text(projects.build_function(0, version=index + 1))
            run = measure.run_once(
                [*ppy, "build"], built, {"PPY_CACHE_DIR": str(scratch / f"build-inc-{index}")}
            )
            samples["incremental"].append(run.wall_s)
        found.append(
            Comparison(
                f"ppy build, {size} functions", "build", "s", "cold", samples, {"functions": size}
            )
        )
    return found
