"""Measure ppy against plain JAX side by side, and draw it.

    python benchmarks/run.py                 # the full run (nox -s bench)
    python benchmarks/run.py --quick         # a short pass, same cases, fewer samples
    python benchmarks/run.py --device-quick  # the pass for an accelerator (a TPU)
    python benchmarks/run.py --report DIR    # redraw DIR's table, plots and README from its JSON

Writes latest.json (machine, accelerator, versions, every sample, medians,
ratios, targets) and latest.md (the table) into the results folder, the PNG
plots where matplotlib is installed, and the README's performance section.
The results folder is benchmarks/results where jax's backend is the CPU, and
benchmarks/results/<accelerator> (``tpu-v5e``) elsewhere, unless --results
names one. It prints which of the other issues' targets are met; a missed
target is reported, never an error.

Every process the runner measures runs alone, one after another: on a TPU
one process at a time can hold the chip.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ppybench import (
    build_time,
    empty,
    floor,
    overhead,
    plots,
    programs,
    report,
    startup,
    targets,
    xla_scalar,
)
from ppybench.machine import accelerator, describe, results_name
from ppybench.measure import Comparison
from ppybench.plan import DEVICE_QUICK, FULL, QUICK, Plan

HERE = Path(__file__).resolve().parent
README = HERE.parent / "README.md"
RESULTS = HERE / "results"

CASES: dict[str, Callable[[Path, Plan], list[Comparison]]] = {
    "floor": lambda scratch, plan: floor.floor(scratch, plan.floor_rounds),
    "page": lambda scratch, plan: startup.page_example(
        scratch, plan.startup_rounds, cold=plan.cold
    ),
    "depth": lambda scratch, plan: startup.deep_models(
        scratch, plan.startup_rounds, plan.depths, cold=plan.cold
    ),
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
    "empty": lambda scratch, plan: empty.empty_program(scratch, plan.startup_rounds),
    "main-block": lambda scratch, plan: programs.main_block(scratch, plan.startup_rounds),
}


def _update_readme(results: Path) -> None:
    """Rewrite README.md's section: the CPU run's table and main plot, and the
    table of each run on an accelerator kept under benchmarks/results/."""
    if not results.resolve().is_relative_to(README.parent):
        print(f"results in {results}, outside the repository: README.md left alone")
        return
    cpu_table = RESULTS / "latest.md"
    if not cpu_table.is_file():
        print(f"no {cpu_table}: README.md left alone")
        return
    plot = RESULTS / "startup_vs_depth.png"
    link = plot.relative_to(README.parent).as_posix() if plot.exists() else None
    devices = report.device_tables(RESULTS, README.parent)
    section = report.readme_section(cpu_table.read_text(), link, devices)
    if not report.update_readme(README, section):
        print(f"README.md has no {report.README_START} section; left alone")


def write(record: Mapping[str, Any], results: Path, *, readme: bool) -> list[Path]:
    """Write a run's record, its table, its plots (where matplotlib is) and,
    with ``readme``, the README's section; return the plots drawn."""
    report.write_json(record, results / "latest.json")
    (results / "latest.md").write_text(report.render(record))
    comparisons = [Comparison.from_json(data) for data in record["comparisons"]]
    drawn = plots.draw(comparisons, results)
    if not plots.available():
        print(plots.MISSING.format(results=results))
    if readme:
        _update_readme(results)
    return drawn


def _print_targets(checked: Sequence[Mapping[str, Any]]) -> None:
    for target in checked:
        verdict = "met    " if target["met"] else "NOT MET"
        note = "" if target["enough_rounds"] else f"  ({target['rounds']} rounds: indicative only)"
        value = f"{target['ratio']:8.3f}" if target["over"] else f"{target['ratio'] * 1e6:6.2f}µs"
        bound = ""
        if "floor_s" in target:
            medians = target["medians"]
            bound = (
                f"  ({target['mode']} {medians[target['mode']]:.3f} s, {target['over']} "
                f"{medians[target['over']]:.3f} s, floor {target['floor_s']:.3f} s)"
            )
        print(f"{verdict} {value}  {target['name']}  [{target['source']}]{note}{bound}")


def _plan(args: argparse.Namespace) -> Plan:
    if args.device_quick:
        return DEVICE_QUICK
    return QUICK if args.quick else FULL


def _redraw(results: Path, readme: bool) -> int:
    """``--report``: the table, plots and README from a results folder's JSON."""
    source = results / "latest.json"
    if not source.is_file():
        print(f"run.py: error: no {source} to report", file=sys.stderr)
        return 2
    record = json.loads(source.read_text())
    drawn = write(record, results, readme=readme)
    print(f"wrote {results / 'latest.md'}{''.join(f', {p.name}' for p in drawn)}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    passes = parser.add_mutually_exclusive_group()
    passes.add_argument(
        "--quick", action="store_true", help="fewer samples per case (a few minutes)"
    )
    passes.add_argument(
        "--device-quick",
        action="store_true",
        help="the pass for an accelerator: floor, 40 layers and per-call overhead, "
        "3 processes each (about 7 minutes on a TPU v5e)",
    )
    passes.add_argument(
        "--report",
        type=Path,
        metavar="DIR",
        help="measure nothing: write DIR's table, plots and the README from DIR/latest.json",
    )
    parser.add_argument(
        "--cases",
        default=None,
        help=f"comma-separated subset of: {', '.join(CASES)} (default: the pass's cases)",
    )
    parser.add_argument(
        "--results",
        type=Path,
        default=None,
        help="where to write the outputs (default: benchmarks/results on the CPU, "
        "benchmarks/results/<accelerator> elsewhere)",
    )
    parser.add_argument(
        "--no-readme", action="store_true", help="leave README.md's performance section alone"
    )
    args = parser.parse_args(argv)
    if args.report is not None:
        return _redraw(args.report, not args.no_readme)
    plan = _plan(args)
    chosen = (
        [name.strip() for name in args.cases.split(",") if name.strip()]
        if args.cases is not None
        else list(plan.cases or CASES)
    )
    unknown = sorted(set(chosen) - set(CASES))
    if unknown:
        parser.error(f"unknown case(s) {', '.join(unknown)}; choose from {', '.join(CASES)}")

    started = time.perf_counter()
    # One process asks jax for its backend and ends before any measured one starts.
    device = accelerator()
    platform = device.get("platform")
    name = results_name(device)
    if name is None and plan is DEVICE_QUICK:
        # A rehearsal of the device pass on the CPU never replaces the CPU's run.
        name = "device-quick-cpu"
    results = args.results or (RESULTS if name is None else RESULTS / name)
    where = f"{device.get('device_kind')} ({platform})" if platform else "unknown"
    print(f"jax's backend: {where}; results go to {results}", flush=True)
    if platform is None:
        print(f"    the probe failed: {device.get('error')}", flush=True)

    comparisons: list[Comparison] = []
    durations: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="ppy-bench-") as tmp:
        for case in chosen:
            print(f"[{time.perf_counter() - started:6.1f} s] case {case} ...", flush=True)
            case_start = time.perf_counter()
            found = CASES[case](Path(tmp) / case, plan)
            durations[case] = time.perf_counter() - case_start
            comparisons += found
            for comparison in found:
                medians = ", ".join(
                    f"{mode} {value:.4g}" for mode, value in comparison.medians.items()
                )
                print(f"    {comparison.case} / {comparison.label}: {medians}", flush=True)
    checked = targets.check(comparisons, targets.for_platform(platform))
    record = {
        "mode": plan.mode,
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        **describe(device),
        "rounds": {
            "startup": plan.startup_rounds,
            "overhead_processes": plan.overhead_processes,
            "xla": plan.xla_rounds,
            "build": plan.build_rounds,
            "floor": plan.floor_rounds,
        },
        "duration_s": {"total": time.perf_counter() - started, **durations},
        "comparisons": [comparison.to_json() for comparison in comparisons],
        "targets": checked,
    }
    drawn = write(record, results, readme=not args.no_readme)
    print()
    _print_targets(checked)
    plotted = "".join(f", {p.name}" for p in drawn)
    print(f"\nwrote {results / 'latest.json'}, latest.md{plotted}")
    print(f"{plan.mode} run took {time.perf_counter() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
