#!/usr/bin/env bash
# Make .whl-tpu/, the wheels a TPU machine with no package index needs to run
# ppy (benchmarks/device_session.sh installs them there): the four ppy
# distributions, built from this checkout, and what they need that such a
# machine lacks. The machine has jax, jaxlib, libtpu, numpy and scipy on its
# PYTHONPATH, and pytest and hypothesis in its python3; its own index
# (file:///opt/pypi/simple) has optax, flax and jaxtyping, which the session
# installs from there.
#
#   bash benchmarks/device_wheels.sh          # here, in the repository, with network
#
# It also builds the page's example for the CPU and the TPU into
# .whl-tpu/project, with the ppy of this environment (`python3 -m ppy`).
#
# then name .whl-tpu in the device call's carry (benchmarks/README.md).
set -euo pipefail
cd "$(dirname "$0")/.."

# The machine's Python; pip downloads for it whatever Python runs pip here.
PYTHON_VERSION=${PYTHON_VERSION:-3.11}
WHEELS=.whl-tpu

rm -rf "$WHEELS"
mkdir "$WHEELS"
python3 -m pip wheel -q --no-deps -w "$WHEELS" \
    ./packages/core ./packages/plugin-jax ./packages/plugin-xla ./packages/runtime-pjrt
# ppy-core needs structlog and stevedore; ppy-plugin-jax and ppy-runtime-pjrt
# need flatbuffers (all pure Python, with no dependency of their own on Python
# 3.11: stevedore has needed pbr only to build it since 5.5).
python3 -m pip download -q --no-deps --only-binary=:all: \
    --python-version "$PYTHON_VERSION" --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 \
    -d "$WHEELS" "structlog>=24" "stevedore>=5.6" flatbuffers

# The page's example built here, on the CPU, for the CPU and the TPU: what
# `device_session.sh runtime-only` runs there with only ppy-core and
# ppy-runtime-pjrt installed (docs/accelerators.md, a runtime-only install).
project="$WHEELS/project"
cp -r examples/25_jax_export "$project"
rm -rf "$project/.ppy"
printf 'platforms = ["cpu", "tpu"]\n' >>"$project/pyproject.toml"
(cd "$project" && JAX_PLATFORMS=cpu PPY_CACHE_DIR="$(mktemp -d)" python3 -m ppy build)

ls -1 "$WHEELS"
du -sh "$WHEELS"
