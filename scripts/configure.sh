#!/usr/bin/env bash
# Configures the build folder `build/` as setup.sh and test.sh both use it (tests on, warnings as
# errors), so that test.sh reuses every object setup.sh built.
#
# - A new build folder uses Ninja (scripts/install-deps.sh installs it): it compiles the objects
#   of the config and program libraries while the engine's last files still compile, which a
#   2-core build needs. An existing folder keeps the generator it was made with.
# - The CUDA backends are built when this machine has a GPU (nvidia-smi lists one) and nvcc is
#   found (PKSCAN_WITH_CUDA=AUTO); without a GPU they could not run, and their device code is a
#   third of the program's compile time, so they are left out (PKSCAN_WITH_CUDA=OFF). The
#   environment variable PKSCAN_WITH_CUDA (AUTO, ON or OFF) overrides the choice: .ci/run sets
#   AUTO, so that CI compiles the CUDA code wherever nvcc is installed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

generator=()
if [[ ! -f build/CMakeCache.txt ]] && command -v ninja >/dev/null 2>&1; then
  generator=(-G Ninja)
fi
cuda=${PKSCAN_WITH_CUDA:-}
if [[ -z $cuda ]]; then
  # nvidia-smi's whole list first: piped into grep -q, a list of several GPUs can end in SIGPIPE,
  # which pipefail would read as no GPU.
  if grep -q '^GPU' <<<"$(nvidia-smi -L 2>/dev/null || true)"; then cuda=AUTO; else cuda=OFF; fi
fi
case $cuda in
  AUTO | ON | OFF) ;;
  *) echo "scripts/configure.sh: PKSCAN_WITH_CUDA is \"$cuda\", but must be AUTO, ON or OFF" >&2
     exit 2 ;;
esac
cmake -S . -B build "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DPKSCAN_BUILD_TESTS=ON \
  -DPKSCAN_WERROR=ON -DPKSCAN_WITH_CUDA="$cuda"
