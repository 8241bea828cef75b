"""Measure ppy against plain JAX side by side, and draw it.

    python benchmarks/run.py            # the full run (nox -s bench)
    python benchmarks/run.py --quick    # a short pass, same cases, fewer samples

Writes benchmarks/results/latest.json (machine, versions, every sample,
medians, ratios, targets), latest.md (the table), the PNG plots, and the
README's performance section. It prints which of the other issues' targets
are met; a missed target is reported, never an error.
"""

from __future__ import annotations

import argparse
import datetime
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from ppybench import build_time, overhead, plots, programs, report, startup, targets, xla_scalar
from ppybench.machine import describe
from ppybench.measure import Comparison
from ppybench.plan import FULL, QUICK, Plan

HERE = Path(__file__).resolve().parent
README = HERE.parent / "README.md"

CASES: dict[str, Callable[[Path, Plan], list[Comparison]]] = {
    "page": lambda scratch, plan: startup.page_example(scratch, plan.startup_rounds),
    "depth": lambda scratch, plan: startup.deep_models(scratch, plan.startup_rounds, plan.depths),
    "overhead": lambda scratch, plan: overhead.call_overhead(
        scratch, plan.overhead_processes, plan.overhead_calls
    ),
    "xla": lambda scratch, plan: xla_scalar.scalar_loops(
        scratch, plan.xla_rounds, limit=plan.xla_limit, terms=plan.xla_terms, calls=plan.xla_calls
    ),
    "build": lambda scratch, plan: build_time.build_times(
        scratch, plan.build_rounds, plan.build_sizes
    ),
    "optax": lambda scratch, plan: programs.optax_training(scratch, plan.startup_rounds),
    "unstaged": lambda scratch, plan: programs.nothing_staged(scratch, plan.startup_rounds),
    "sharded": lambda scratch, plan: programs.sharded(scratch, plan.startup_rounds),
    "record": lambda scratch, plan: programs.recording(scratch, plan.startup_rounds),
    "unannotated": lambda scratch, plan: programs.optax_unannotated(scratch, plan.startup_rounds),
}


def _update_readme(table: str, results: Path) -> None:
    """Copy the table (and the main plot, where drawn) into README.md's section."""
    plot = (results / "startup_vs_depth.png").resolve()
    if not plot.is_relative_to(README.parent):
        print(f"results in {results}, outside the repository: README.md left alone")
        return
    link = plot.relative_to(README.parent).as_posix() if plot.exists() else None
    if not report.update_readme(README, report.readme_section(table, link)):
        print(f"README.md has no {report.README_START} section; left alone")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="fewer samples per case (a few minutes)"
    )
    parser.add_argument(
        "--cases", default=",".join(CASES), help=f"comma-separated subset of: {', '.join(CASES)}"
    )
    parser.add_argument(
        "--results", type=Path, default=HERE / "results", help="where to write the outputs"
    )
    parser.add_argument(
        "--no-readme", action="store_true", help="leave README.md's performance section alone"
    )
    args = parser.parse_args(argv)
    chosen = [name.strip() for name in args.cases.split(",") if name.strip()]
    unknown = sorted(set(chosen) - set(CASES))
    if unknown:
        parser.error(f"unknown case(s) {', '.join(unknown)}; choose from {', '.join(CASES)}")
    plan = QUICK if args.quick else FULL

    started = time.perf_counter()
    comparisons: list[Comparison] = []
    durations: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="ppy-bench-") as tmp:
        for name in chosen:
            print(f"[{time.perf_counter() - started:6.1f} s] case {name} ...", flush=True)
            case_start = time.perf_counter()
            found = CASES[name](Path(tmp) / name, plan)
            durations[name] = time.perf_counter() - case_start
            comparisons += found
            for comparison in found:
                medians = ", ".join(
                    f"{mode} {value:.4g}" for mode, value in comparison.medians.items()
                )
                print(f"    {comparison.case} / {comparison.label}: {medians}")
    checked = targets.check(comparisons)
    record = {
        "mode": plan.mode,
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        **describe(),
        "rounds": {
            "startup": plan.startup_rounds,
            "overhead_processes": plan.overhead_processes,
            "xla": plan.xla_rounds,
            "build": plan.build_rounds,
        },
        "duration_s": {"total": time.perf_counter() - started, **durations},
        "comparisons": [comparison.to_json() for comparison in comparisons],
        "targets": checked,
    }
    results = args.results
    report.write_json(record, results / "latest.json")
    table = report.render(record)
    (results / "latest.md").write_text(table)
    drawn = plots.draw(comparisons, results)
    if not args.no_readme:
        _update_readme(table, results)
    print()
    for target in checked:
        verdict = "met    " if target["met"] else "NOT MET"
        note = "" if target["enough_rounds"] else f"  ({target['rounds']} rounds: indicative only)"
        value = f"{target['ratio']:8.3f}" if target["over"] else f"{target['ratio'] * 1e6:6.2f}µs"
        print(f"{verdict} {value}  {target['name']}  [{target['source']}]{note}")
    print(f"\nwrote {results / 'latest.json'}, latest.md, {', '.join(p.name for p in drawn)}")
    print(f"{plan.mode} run took {time.perf_counter() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
