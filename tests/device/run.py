"""The differential tests on an accelerator, in one pytest process, with the result kept.

    python tests/device/run.py                      # on a machine with a TPU (or a GPU)
    python tests/device/run.py --deadline 480       # start no test after 8 minutes
    python tests/device/run.py --resume             # only what an earlier run did not pass
    python tests/device/run.py --probe              # print what jax finds here, and exit

``nox -s device`` runs it; on a machine without a package registry (a TPU VM
with the packages installed from wheels) it runs as it is, with the pytest
that machine has. It

1. asks jax, in a fresh process that ends before any test starts, which
   backend and devices it has (``probe``). Where jax's default backend is
   the CPU there is no accelerator: it says so and exits 0 (``--allow-cpu``
   runs the selection anyway, to rehearse it);
2. runs the selection (``PARTS``: the examples' output test, tests/programs,
   tests/fidelity) in ONE pytest process, with no ``-n``: on a TPU one
   process at a time can hold the chip, and every test's ``python`` and
   ``ppy run`` take it in turn. Left out: the tests marked ``cpu_backend``
   (their programs need the CPU's forced host devices or its collectives),
   and those whose model library this machine does not have (``-k``);
3. writes ``fidelity.json`` (every test's outcome, the runs) and
   ``fidelity.txt`` (the same for people: machine, versions, selection, what
   passed, what failed and why, what was not reached) into the results
   folder, ``benchmarks/results/<accelerator>`` (``tpu-v5e``).

Each test's programs run cold only (``PPY_TESTS_WARM=0``): a warm run forks
the same program from the same server code as on the CPU, where the suite
runs it warm, and on a TPU each forked child pays the chip's open again
(6-11 s). The examples' test still runs every example warm.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from ppybench.machine import results_name, runtime_settings  # noqa: E402

from tests.device import plugin  # noqa: E402

#: The parts of the selection, in the order they run (the most telling first:
#: with a deadline, what runs first is what gets done).
PARTS: dict[str, tuple[str, ...]] = {
    "examples": ("tests/integration/test_examples.py::test_ppy_run_prints_what_python_prints",),
    "programs": ("tests/programs",),
    "fidelity": ("tests/fidelity",),
}
#: Not differential: it counts the suite's cases for the docs (no jax, no device).
DESELECTED = ("tests/fidelity/test_ledger.py",)
#: Tests whose programs need jax's CPU backend (forced host devices, gloo).
MARKERS = "not cpu_backend"
#: Model libraries a selected test may import; the ids of their tests name them
#: (``74_equinox``, ``test_an_equinox_model_...``, ``..._with_beartype_...``),
#: so a library this machine lacks is left out by name.
LIBRARIES = ("optax", "flax", "equinox", "jaxtyping", "beartype")
RESULTS = "fidelity.json"
TEXT = "fidelity.txt"

_PROBE = """\
import json
import time
from importlib import metadata

start = time.perf_counter()
import jax
imported = time.perf_counter()
devices = jax.devices()
opened = time.perf_counter()


def version(name):
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


print(json.dumps({
    "platform": devices[0].platform,
    "device_kind": devices[0].device_kind,
    "device_count": len(devices),
    "import_jax_s": round(imported - start, 3),
    "backend_start_s": round(opened - imported, 3),
    "versions": {n: version(n) for n in ("jax", "jaxlib", "libtpu", "ppy-core", "numpy")},
}))
"""
#: Seconds the probe may take: a TPU's open takes 6-11 s.
PROBE_TIMEOUT = 120.0


def probe(python: str = sys.executable, timeout: float = PROBE_TIMEOUT) -> dict[str, Any]:
    """What jax finds in a fresh process; ``platform`` None (and an ``error``) where it fails."""
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
        said = [line for line in done.stderr.splitlines() if line.strip()]
        return {"platform": None, "error": said[-1] if said else f"exit {done.returncode}"}
    found: dict[str, Any] = json.loads(lines[-1])
    return found


def missing_libraries(names: Sequence[str] = LIBRARIES) -> list[str]:
    """The model libraries not installed here (found without importing them)."""
    return [name for name in names if importlib.util.find_spec(name) is None]


def pytest_command(
    parts: Sequence[str],
    missing: Sequence[str],
    done: Sequence[str] = (),
    extra: Sequence[str] = (),
) -> list[str]:
    """The one pytest process: the parts' paths, less the CPU's tests, the
    missing libraries' and those ``done`` already."""
    paths = [path for part in parts for path in PARTS[part]]
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider"]
    command += ["-p", "tests.device.plugin", "-m", MARKERS]
    if missing:
        command += ["-k", " and ".join(f"not {name}" for name in missing)]
    for path in (*DESELECTED, *done):
        command += ["--deselect", path]
    return [*command, *paths, *extra]


def merge(
    previous: Mapping[str, Any] | None, outcomes: Mapping[str, Any], run: Mapping[str, Any]
) -> dict[str, Any]:
    """The results document after one more run: its outcomes over the earlier ones."""
    document: dict[str, Any] = {
        "selected": [],
        "tests": {},
        "runs": [],
        **(dict(previous) if previous else {}),
    }
    selected = list(document["selected"])
    selected += [nodeid for nodeid in outcomes["selected"] if nodeid not in selected]
    tests = {**document["tests"]}
    run_index = len(document["runs"])
    for nodeid, test in outcomes["tests"].items():
        tests[nodeid] = {**test, "run": run_index}
    return {
        "selected": selected,
        "tests": tests,
        "runs": [*document["runs"], dict(run)],
    }


def passed(document: Mapping[str, Any]) -> list[str]:
    """The tests a results document holds as passed: what ``--resume`` leaves
    out. A failure runs again, since the code it failed on may have moved."""
    return sorted(
        nodeid for nodeid, test in document["tests"].items() if test["outcome"] == "passed"
    )


def _seconds(value: float) -> str:
    return f"{value:7.1f} s"


def _device(found: Mapping[str, Any]) -> str:
    count = found.get("device_count")
    devices = f", {count} device{'s' if count != 1 else ''}" if count else ""
    return f"{found.get('device_kind')} ({found.get('platform')}{devices})"


def render(document: Mapping[str, Any]) -> str:
    """``fidelity.txt``: the document for people."""
    runs = document["runs"]
    last = runs[-1]
    found = last["probe"]
    versions = found.get("versions", {})
    shown = ", ".join(f"{name} {value}" for name, value in versions.items() if value)
    lines = [
        "Fidelity on an accelerator: each test runs its programs under python and under",
        "ppy run on the device, one process at a time, and compares what they print.",
        f"Written by tests/device/run.py from {RESULTS} beside this file; rerun, or",
        "continue a run that its deadline stopped, as benchmarks/README.md says.",
        "",
        f"device    {_device(found)}",
        f"host      {last['host']}",
        f"python    {last['python']}",
        f"versions  {shown}",
        f"probe     import jax {found.get('import_jax_s')} s, backend start (jax.devices()) "
        f"{found.get('backend_start_s')} s, in a fresh process",
        "",
        "runs",
    ]
    for index, run in enumerate(runs):
        stopped = f"; stopped: {run['stopped']}" if run.get("stopped") else ""
        lines.append(
            f"  {index}  {run['date']}  {run['summary']} in {run['seconds']:.0f} s, "
            f"pytest exit {run['exit_status']}{stopped}"
        )
        lines.append(f"     {run['command']}")
        if run.get("settings"):
            shown = " ".join(f"{name}={value}" for name, value in run["settings"].items())
            lines.append(f"     with {shown}")
    tests = document["tests"]
    selected = document["selected"]
    counts: dict[str, int] = {}
    for test in tests.values():
        counts[test["outcome"]] = counts.get(test["outcome"], 0) + 1
    unreached = [nodeid for nodeid in selected if nodeid not in tests]
    tally = ", ".join(f"{count} {outcome}" for outcome, count in sorted(counts.items()))
    lines += [
        "",
        f"outcome   {len(selected)} selected: {tally or 'none run'}"
        + (f", {len(unreached)} not run yet" if unreached else ""),
        "",
    ]
    for nodeid in selected:
        test = tests.get(nodeid)
        if test is None:
            lines.append(f"  not run           {nodeid}")
            continue
        took = _seconds(test["seconds"])
        lines.append(f"  {test['outcome']:<8}{took}  {nodeid}  [run {test['run']}]")
        if test["outcome"] in ("failed", "error") and test.get("message"):
            lines.append(f"      {test['message']}")
    return "\n".join(lines) + "\n"


def _summary(outcomes: Mapping[str, Any]) -> str:
    counts: dict[str, int] = {}
    for test in outcomes["tests"].values():
        counts[test["outcome"]] = counts.get(test["outcome"], 0) + 1
    return ", ".join(f"{count} {outcome}" for outcome, count in sorted(counts.items())) or "none"


def _results_folder(args: argparse.Namespace, found: Mapping[str, Any]) -> Path | None:
    if args.results is not None:
        return Path(args.results)
    name = results_name(dict(found))
    return None if name is None else ROOT / "benchmarks" / "results" / name


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--probe", action="store_true", help="print what jax finds, and exit")
    parser.add_argument(
        "--parts",
        default=",".join(PARTS),
        help=f"comma-separated, in order: {', '.join(PARTS)} (default: all)",
    )
    parser.add_argument(
        "--deadline",
        type=float,
        default=None,
        metavar="SECONDS",
        help="start no test once this many seconds have passed since the runner started",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="leave out the tests the results hold as passed (a failure runs again)",
    )
    parser.add_argument("--results", default=None, help="the results folder (default: per device)")
    parser.add_argument(
        "--allow-cpu",
        action="store_true",
        help="run the selection even where jax's backend is the CPU (a rehearsal; needs --results)",
    )
    parser.add_argument(
        "--warm", action="store_true", help="run every differential test warm too (slower)"
    )
    parser.add_argument("pytest_args", nargs="*", help="more pytest arguments, after --")
    args = parser.parse_args(argv)
    started = time.time()
    parts = [part.strip() for part in args.parts.split(",") if part.strip()]
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        parser.error(f"unknown part(s) {', '.join(unknown)}; choose from {', '.join(PARTS)}")

    found = probe()
    if args.probe:
        print(json.dumps(found))
        return 0
    platform_name = found.get("platform")
    if platform_name in (None, "cpu") and not args.allow_cpu:
        why = found.get("error") or "jax's default backend here is the CPU"
        print(f"no accelerator: {why}; the device session runs only where jax finds one")
        return 0
    results = _results_folder(args, found)
    if results is None:
        parser.error("on the CPU, --allow-cpu needs --results DIR")
    results.mkdir(parents=True, exist_ok=True)
    source = results / RESULTS
    previous = json.loads(source.read_text()) if source.is_file() else None
    done = passed(previous) if previous and args.resume else []
    missing = missing_libraries()
    command = pytest_command(parts, missing, done, args.pytest_args)
    outcomes_file = results / ".outcomes.json"
    env = {**os.environ, plugin.OUTCOMES: str(outcomes_file)}
    if not args.warm:
        env["PPY_TESTS_WARM"] = "0"
    if args.deadline is not None:
        env[plugin.DEADLINE] = str(started + args.deadline)
    print(f"device: {_device(found)}; results go to {results}", flush=True)
    if missing:
        print(f"left out, not installed here: {', '.join(missing)}", flush=True)
    print(" ".join(command), flush=True)
    ran_from = time.time()
    status = subprocess.run(command, cwd=ROOT, env=env, check=False).returncode
    if not outcomes_file.is_file():
        print(f"pytest wrote no outcomes (exit {status}); {source} left as it was")
        return status or 1
    outcomes = json.loads(outcomes_file.read_text())
    outcomes_file.unlink()
    host = f"{platform.platform()}, {os.cpu_count()} CPUs"
    run = {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "probe": found,
        "host": host,
        "python": platform.python_version(),
        "command": shlex.join("python" if part == sys.executable else part for part in command),
        "summary": _summary(outcomes),
        "seconds": round(time.time() - ran_from, 1),
        "exit_status": outcomes["exit_status"],
        "stopped": outcomes["stopped"],
        "left_out": {"libraries": missing, "markers": MARKERS},
        "settings": runtime_settings(),
    }
    document = merge(previous, outcomes, run)
    source.write_text(json.dumps(document, indent=2) + "\n")
    (results / TEXT).write_text(render(document))
    print(f"wrote {results / TEXT} and {RESULTS}")
    failed = any(t["outcome"] in ("failed", "error") for t in outcomes["tests"].values())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
