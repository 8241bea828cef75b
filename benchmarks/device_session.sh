#!/usr/bin/env bash
# One call's work on a TPU machine with no package index, over a copy of this
# repository that carries .whl-tpu/ (made here by benchmarks/device_wheels.sh).
#
#   bash benchmarks/device_session.sh bench      # doctor, then run.py --device-quick (~8 min)
#   bash benchmarks/device_session.sh fidelity   # tests/device/run.py until its deadline (~9.5 min, ~25 tests)
#   bash benchmarks/device_session.sh smoke      # build and run the page's example (~1 min)
#   bash benchmarks/device_session.sh recorded   # examples/80_recorded: build, explain, run (~2 min)
#   bash benchmarks/device_session.sh where      # the deep model's time above the floor, by doctor (~2 min)
#   bash benchmarks/device_session.sh runtime-only  # a CPU build run with only core and the runtime (~1 min)
#
# Each part fits one call of at most 10 minutes; benchmarks/README.md says how
# the calls go together. Every process that computes with jax runs alone, one
# after another: one process at a time can hold the chip. What a part writes
# goes to benchmarks/results/<accelerator>/ (tpu-v5e), which is packed with
# the log into $OUT (results.tar.gz, session.log): unpack it into
# benchmarks/results/ here and commit it.
#
# Environment: OUT (where to pack; default /tmp/ppy-device-out), PPY_DEVICE_BUDGET
# (the call's seconds, default 570: the fidelity part stops starting tests in
# time to pack), PPY_DEVICE_RESUME=1 (the fidelity part runs only what the
# results it finds did not reach), INDEX (the machine's own package index).
set -u -o pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

PART=${1:-bench}
OUT=${OUT:-/tmp/ppy-device-out}
BUDGET=${PPY_DEVICE_BUDGET:-570}
INDEX=${INDEX:-file:///opt/pypi/simple}
VENV=${PPY_DEVICE_VENV:-/tmp/ppy-venv}
STARTED=$(date +%s)
mkdir -p "$OUT"
exec > >(tee -a "$OUT/session.log") 2>&1

say() { echo "[$(($(date +%s) - STARTED)) s] $*"; }
elapsed() { echo $(($(date +%s) - STARTED)); }

# The results folder of this machine's accelerator (tpu-v5e), or nothing on a CPU.
results_folder() {
    python tests/device/run.py --probe | python -c 'import json, sys
sys.path.insert(0, "benchmarks")
from ppybench.machine import results_name
print(results_name(json.load(sys.stdin)) or "")'
}

# Each function's calls by path, and each comparison, fallback and unbound
# entry, from a run's JSON log.
paths_taken() {
    python3 - "$1" <<'PY'
import collections, json, sys
paths = collections.Counter()
for line in open(sys.argv[1]):
    try:
        event = json.loads(line)
    except ValueError:
        continue
    kind = event.get("event")
    if kind == "run.call":
        paths[(event["function"], event["path"])] += 1
    elif kind == "run.compared":
        print(f"  compared  {event.get('function')} on {event.get('platform')}: "
              f"{event.get('source')}, same as jit's: {event.get('same')}")
    elif kind in ("run.fallback", "run.unbound"):
        print(f"  {kind}  {event.get('function')}: {event.get('category')}: {event.get('reason')}")
for (function, path), count in sorted(paths.items()):
    print(f"  {function}  {path}: {count} calls")
PY
}

# Whether ppy.out is python.out, with the difference where it is not.
same_as_python() {
    if cmp -s python.out ppy.out; then echo "stdout: the same as python's"; else
        echo "stdout DIFFERS from python's:"
        diff python.out ppy.out
    fi
}

pack() {
    # The results folders this call wrote in (a file newer than its start;
    # rewriting a file leaves its folder's time as it was), with the log.
    local folders
    folders=$(cd "$ROOT/benchmarks/results" && find . -mindepth 2 -type f -newer "$MARK" \
        -printf '%P\n' | cut -d/ -f1 | sort -u)
    if [ -n "$folders" ]; then
        # shellcheck disable=SC2086
        tar -czf "$OUT/results.tar.gz" -C "$ROOT/benchmarks/results" $folders
        say "packed $folders into $OUT/results.tar.gz"
    else
        say "no results folder was written"
    fi
}

MARK=$(mktemp)
touch "$MARK"
trap pack EXIT

# 1. A venv that sees the machine's own packages (jax, libtpu, numpy, pytest),
#    with ppy and what it needs from the carried wheels. PYTHONPATH and the
#    TPU_ variables stay as the machine sets them.
say "python3 $(python3 -c 'import platform; print(platform.python_version(), platform.libc_ver())')"
say "PYTHONPATH=${PYTHONPATH:-}"
python3 -m venv --system-site-packages "$VENV" >/dev/null || exit 1
"$VENV/bin/pip" install -q --no-index --no-deps --no-compile .whl-tpu/*.whl || exit 1
export PATH="$VENV/bin:$PATH" PYTHONUNBUFFERED=1
# Checks that import jax and start no backend take the CPU all the same: a
# helper never holds the chip.
JAX_PLATFORMS=cpu python - <<'PY' || exit 1
import jax, jaxlib, ppy, ppy_plugin_jax, ppy_runtime_pjrt, stevedore, structlog
print("jax", jax.__version__, "jaxlib", jaxlib.__version__, "ppy", ppy.__version__)
PY

# No workaround for jax on PYTHONPATH only: ppy build's export worker gets
# PYTHONPATH as python does (docs/environment.md), and the log shows it.
say "jax outside PYTHONPATH: $(env -u PYTHONPATH python -c 'import jax' 2>/dev/null && echo yes || echo no)"

case "$PART" in
bench)
    # doctor on the page's example, built: import jax, the backend's start
    # (the chip's open), the artifact, the cache; then the device pass.
    work=$(mktemp -d)
    cp -r examples/25_jax_export "$work/page"
    rm -rf "$work/page/.ppy"
    say "ppy build (examples/25_jax_export)"
    (cd "$work/page" && PPY_CACHE_DIR="$work/cache" ppy build) || say "the build failed"
    mkdir -p "$OUT/doctor"
    say "ppy doctor"
    (cd "$work/page" && PPY_CACHE_DIR="$work/cache" ppy doctor) | tee "$OUT/doctor/doctor.txt"
    (cd "$work/page" && PPY_CACHE_DIR="$work/cache" ppy doctor --json) >"$OUT/doctor/doctor.json"
    say "benchmarks: run.py --device-quick"
    python benchmarks/run.py --device-quick --no-readme
    status=$?
    # doctor's report lives beside the run's results.
    for folder in benchmarks/results/*/; do
        if [ "$folder/latest.json" -nt "$MARK" ]; then cp "$OUT"/doctor/doctor.* "$folder"; fi
    done
    say "bench part done (exit $status)"
    ;;
fidelity)
    # The model libraries the selected tests import, from the machine's own
    # index, into the venv (the export worker imports them too), with the
    # machine's jax, jaxlib and numpy held where they are.
    constraints=$(mktemp)
    python - >"$constraints" <<'PY'
from importlib import metadata
for name in ("jax", "jaxlib", "numpy", "ml_dtypes", "scipy"):
    try:
        print(f"{name}=={metadata.version(name)}")
    except metadata.PackageNotFoundError:
        pass
PY
    say "model libraries from $INDEX (constraints: $(tr '\n' ' ' <"$constraints"))"
    PIP_CONFIG_FILE=/dev/null "$VENV/bin/pip" install -q --isolated --only-binary=:all: \
        --index-url "$INDEX" -c "$constraints" optax flax jaxtyping ||
        say "the model libraries did not install: their tests are left out"
    # libtpu pins a host buffer for transfers when a process opens the chip:
    # 4 GiB by default, which took 5.5-7.7 s of each open here, against
    # 1.6-1.8 s at 256 MiB. The tests move kilobytes, and where the buffer
    # lies changes a transfer's cost, never its result: every process of a
    # test (python's and ppy's alike) gets the smaller one, a third of the
    # time per test. tests/device/run.py writes the setting beside each run.
    export TPU_PREMAPPED_BUFFER_SIZE=${TPU_PREMAPPED_BUFFER_SIZE:-268435456}
    export TPU_PREMAPPED_BUFFER_TRANSFER_THRESHOLD_BYTES=${TPU_PREMAPPED_BUFFER_TRANSFER_THRESHOLD_BYTES:-$TPU_PREMAPPED_BUFFER_SIZE}
    resume=()
    if [ "${PPY_DEVICE_RESUME:-0}" = 1 ]; then resume=(--resume); fi
    # Start no test after this: the longest (an example: python, build,
    # ppy run, ppy run --warm, each opening the chip) takes about 90 s, and
    # packing a few.
    deadline=$((BUDGET - $(elapsed) - 100))
    say "tests/device/run.py --deadline $deadline ${resume[*]}"
    python tests/device/run.py --deadline "$deadline" "${resume[@]}"
    say "fidelity part done (exit $?)"
    ;;
smoke)
    work=$(mktemp -d)
    cp -r examples/25_jax_export "$work/page"
    rm -rf "$work/page/.ppy"
    cd "$work/page" || exit 1
    python model.ppy >python.out
    PPY_CACHE_DIR="$work/cache" ppy build
    PPY_CACHE_DIR="$work/cache" ppy -v run model.ppy >ppy.out
    if cmp -s python.out ppy.out; then say "same output: $(tr '\n' ' ' <ppy.out)"; else
        say "OUTPUTS DIFFER"
        diff python.out ppy.out
    fi
    ;;
recorded)
    # examples/80_recorded as committed (its recording made on the CPU): what
    # the build stages here, why, and which path each call took, written to
    # the results folder as recorded.txt.
    name=$(results_folder)
    if [ -z "$name" ]; then say "no accelerator here"; exit 0; fi
    report="$ROOT/benchmarks/results/$name/recorded.txt"
    work=$(mktemp -d)
    cp -r examples/80_recorded "$work/ex"
    rm -f "$work/ex/.ppy/artifact.ppyz"
    cd "$work/ex" || exit 1
    export PPY_CACHE_DIR="$work/cache"
    python model.ppy >python.out
    {
        echo "examples/80_recorded on $name, recorded on the CPU (.ppy/signatures.json as committed)"
        echo
        echo "$ ppy build"
        ppy build 2>&1
        echo
        echo "$ ppy explain step"
        ppy explain step 2>&1
        echo
        echo "$ ppy --log-format json -v run model.ppy  (the calls' paths, counted)"
        ppy --log-format json -v run model.ppy >ppy.out 2>events.jsonl
        paths_taken events.jsonl
        same_as_python
    } | tee "$report"
    ;;
where)
    # Where a cold ppy run of the 40-layer model spends its time above the
    # floor: ppy doctor --program with a cold executable cache, then a warm
    # one, beside one timed process each of the floor, python, and python
    # with jax's cache. Written to the results folder as where.txt.
    name=$(results_folder)
    if [ -z "$name" ]; then say "no accelerator here"; exit 0; fi
    report="$ROOT/benchmarks/results/$name/where.txt"
    work=$(mktemp -d)
    python -c 'import sys; sys.path.insert(0, "benchmarks"); from pathlib import Path; from ppybench import projects; projects.deep_model(Path(sys.argv[1]), 40)' "$work/deep" || exit 1
    cd "$work/deep" || exit 1
    export PPY_CACHE_DIR="$work/cache"
    timed() { local t0 t1; t0=$(date +%s.%N); "$@" >/dev/null 2>&1; t1=$(date +%s.%N); python -c "print(f'{$t1 - $t0:.2f} s')"; }
    {
        echo "examples: the benchmark's deep model (40 layers) on $name"
        echo
        echo "floor (import jax, jax.devices()):  $(timed python -c 'import jax; jax.devices()')"
        echo "python model.ppy:                   $(timed python model.ppy)"
        jaxcache="JAX_COMPILATION_CACHE_DIR=$work/jaxcache JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0 JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES=-1"
        env $jaxcache python model.ppy >/dev/null 2>&1
        echo "python + jax cache (warm):          $(timed env $jaxcache python model.ppy)"
        echo
        echo "$ ppy build"
        ppy build 2>&1
        echo
        echo "$ ppy doctor --program model.ppy   (cold executable cache)"
        ppy doctor --program model.ppy 2>&1 | sed -n '/^program run/,$p'
        echo
        echo "$ ppy doctor --program model.ppy   (warm executable cache)"
        ppy doctor --program model.ppy 2>&1 | sed -n '/^program run/,$p'
        echo
        echo "ppy run model.ppy (warm cache):     $(timed ppy run --no-warm model.ppy)"
        echo "floor again:                        $(timed python -c 'import jax; jax.devices()')"
    } | tee "$report"
    ;;
runtime-only)
    # The page's example as built on the CPU for ["cpu", "tpu"]
    # (.whl-tpu/project, made by device_wheels.sh), run here from a venv
    # with only ppy-core and ppy-runtime-pjrt: no plugin, so no build.
    # Twice: the first run compares each symbolic export with jit's program
    # on the chip, the second reads that verdict from the cache. Written to
    # the results folder as runtime-only.txt.
    name=$(results_folder)
    if [ -z "$name" ]; then say "no accelerator here"; exit 0; fi
    report="$ROOT/benchmarks/results/$name/runtime-only.txt"
    runtime=$(mktemp -d)/venv
    python3 -m venv --system-site-packages "$runtime" >/dev/null || exit 1
    "$runtime/bin/pip" install -q --no-index --no-deps .whl-tpu/ppy_core-*.whl \
        .whl-tpu/ppy_runtime_pjrt-*.whl .whl-tpu/structlog-*.whl .whl-tpu/stevedore-*.whl \
        .whl-tpu/flatbuffers-*.whl || exit 1
    work=$(mktemp -d)
    cp -r .whl-tpu/project "$work/page"
    cd "$work/page" || exit 1
    export PPY_CACHE_DIR="$work/cache"
    "$runtime/bin/python" model.ppy >python.out
    python_status=$?
    {
        echo "examples/25_jax_export built on the CPU for [\"cpu\", \"tpu\"], run on $name"
        echo "python model.ppy: exit status $python_status"
        echo "installed: $("$runtime/bin/pip" list --format freeze 2>/dev/null | grep -i '^ppy' | tr '\n' ' ')"
        for run in first second; do
            echo
            echo "$ ppy --log-format json -v run --no-build model.ppy   ($run run)"
            "$runtime/bin/ppy" --log-format json -v run --no-build model.ppy >ppy.out 2>events.jsonl
            echo "exit status $?"
            paths_taken events.jsonl
            same_as_python
        done
    } | tee "$report"
    ;;
*)
    echo "usage: $0 bench|fidelity|smoke|recorded|where|runtime-only" >&2
    exit 2
    ;;
esac
