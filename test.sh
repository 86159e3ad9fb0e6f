#!/usr/bin/env bash
# Second command of the README (and the CI entry point, .ci/run): installs the dependencies,
# builds everything with warnings as errors and runs every test. Exits non-zero on any failure.
# Safe to run again; later runs only rebuild what changed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

bash scripts/install-deps.sh
bash scripts/setup-venv.sh   # .venv/: pinned jax, jaxlib, numpyro for pkscan.jax and its tests

# A new build folder uses Ninja (scripts/install-deps.sh installs it): it compiles the objects of
# the config and program libraries while the engine's last files still compile, which a 2-core
# build needs. An existing folder keeps the generator it was made with.
generator=()
if [[ ! -f build/CMakeCache.txt ]] && command -v ninja >/dev/null 2>&1; then
  generator=(-G Ninja)
fi
cmake -S . -B build "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DPKSCAN_BUILD_TESTS=ON -DPKSCAN_WERROR=ON
cmake --build build -j"$(nproc)"
ctest --test-dir build --output-on-failure --no-tests=error -j"$(nproc)"
