#!/usr/bin/env bash
# Second command of the README (and the CI entry point, .ci/run): installs the dependencies,
# builds everything with warnings as errors and runs every test. Exits non-zero on any failure.
# Safe to run again; later runs only rebuild what changed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

bash scripts/install-deps.sh
bash scripts/setup-venv.sh   # .venv/: pinned jax, jaxlib, numpyro for pkscan.jax and its tests

bash scripts/configure.sh   # build/: tests on, warnings as errors, CUDA where a GPU is
cmake --build build -j"$(nproc)"
ctest --test-dir build --output-on-failure --no-tests=error -j"$(nproc)"
