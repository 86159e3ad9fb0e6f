#!/usr/bin/env bash
# Installs every build and test dependency of pkscan from Debian's apt repositories.
#
# Fast and idempotent: when every package is already installed nothing is downloaded and
# apt-get is not run at all. Runs apt-get as root, through sudo when not root. The CUDA
# toolkit is deliberately not installed: the build enables the CUDA backends only when nvcc
# exists (/usr/local/cuda/bin/nvcc on the project machines).
#
# OpenMP: the build uses GCC's libgomp, which comes with g++ (build-essential); libomp-dev
# (LLVM's runtime) is only for the clang build of the fuzz targets (scripts/fuzz.sh).
set -euo pipefail

packages=(
  build-essential    # g++, make, libgomp (OpenMP for g++)
  cmake              # >= 3.21
  libeigen3-dev      # Eigen 3.4
  libyaml-cpp-dev    # run files
  libcli11-dev       # command line
  libgtest-dev       # GoogleTest 1.12
  libgmock-dev
  googletest
  python3            # benchmark baseline, Python module tests
  python3-numpy
  python3-dev        # Python headers for the pybind11 module
  pybind11-dev       # Python bindings
  python3-pytest     # Python module tests
  python3-h5py       # reads HDF5 output back in the tests
  python3-scipy      # differential tests: the independent reference (expm, solve_ivp)
  python3-yaml       # differential tests: the documented YAML examples
  libhdf5-dev        # HDF5 output
  libdeflate-dev     # HDF5 output: chunks compressed on all threads
  pkg-config         # finds libdeflate
  ninja-build        # builds on all cores across targets (setup.sh, test.sh)
  libceres-dev       # maximum-likelihood fitting example (pkscan fit)
  gnuplot-nox        # pkscan plot
  clang              # fuzz targets (scripts/fuzz.sh; clang 14 on Debian 12)
  libfuzzer-14-dev   # libFuzzer for clang 14
  libomp-dev         # OpenMP for clang (the fuzz build); g++ uses libgomp
  libtbb-dev         # Thrust's TBB system: the affine scan regrouped (tests)
  openmpi-bin        # MPI runs: mpirun (docs/scale-out.md)
  libopenmpi-dev     # MPI runs: pkscan::mpi
)

if ! command -v dpkg-query >/dev/null 2>&1; then
  echo "install-deps: not a Debian-based system (no dpkg-query); install the equivalents of" \
       "these packages yourself: ${packages[*]}" >&2
  exit 0
fi

missing=()
for pkg in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null || true)
  if [[ "$status" != "installed" ]]; then
    missing+=("$pkg")
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install-deps: all ${#packages[@]} packages already installed"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"

as_root=()
if [[ "$(id -u)" -ne 0 ]]; then
  if command -v sudo >/dev/null 2>&1; then
    as_root=(sudo)
  else
    echo "install-deps: error: not root and sudo is not available; as root run:" >&2
    echo "  apt-get update && apt-get install -y --no-install-recommends ${missing[*]}" >&2
    exit 1
  fi
fi

apt_install() {
  "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y --no-install-recommends "${missing[@]}"
}

# Try with the package lists already on the machine first (saves a download); refresh them
# and retry when they are absent or stale.
if compgen -G '/var/lib/apt/lists/*_Packages*' >/dev/null && apt_install; then
  :
else
  "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update
  apt_install
fi
echo "install-deps: done"
