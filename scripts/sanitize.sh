#!/usr/bin/env bash
# The whole test suite built with AddressSanitizer + UndefinedBehaviorSanitizer (gcc), in its
# own build folder (build-asan/). Any ASan or UBSan report, or a leak, fails the test that
# triggered it (-fno-sanitize-recover=all: UBSan aborts at the first report). Exits non-zero on
# any failure. Safe to run again; later runs only rebuild what changed.
#
# - CUDA is off (PKSCAN_WITH_CUDA=OFF): nvcc does not take the sanitizer flags, and the `gpu`
#   tests skip without a device anyway.
# - The flags go in CXXFLAGS/LDFLAGS, which also reach the consumer project that the
#   `package_consumer` test configures (it links the sanitized static libraries).
# - The Python module tests (label `python`) run the sanitized extension inside the
#   uninstrumented python3: the ASan and UBSan runtimes must then be loaded first (LD_PRELOAD;
#   with ASan's alone, the first C++ exception out of the module aborts python), and leak
#   checking is off for them only (CPython keeps interned objects and its allocator's arenas until
#   exit by design, which LeakSanitizer reports as leaks that are not pkscan's).
#
# - Warnings are not errors here (the normal build checks them; the sanitizers change what gcc
#   warns about).
#
# Environment: SANITIZE_JOBS (build and test parallelism, default nproc).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

jobs=${SANITIZE_JOBS:-$(nproc)}
build_dir=build-asan
flags="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all"
export CXXFLAGS="$flags" CFLAGS="$flags" LDFLAGS="-fsanitize=address,undefined"
# Abort on the first report of either sanitizer, with a stack trace.
export ASAN_OPTIONS="${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"

start=$(date +%s)
# -O1 -g1 (line tables): with -O2 -g, gcc needs several minutes and 5-7 GB per Eigen-heavy file
# under the sanitizers. NDEBUG as in the normal (Release) build.
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
  -DPKSCAN_BUILD_TESTS=ON -DPKSCAN_WERROR=OFF -DPKSCAN_WITH_CUDA=OFF
cmake --build "$build_dir" -j"$jobs"
built=$(date +%s)

status=0
ctest --test-dir "$build_dir" --output-on-failure --no-tests=error -j"$jobs" -LE python || status=1
if ctest --test-dir "$build_dir" -N -L python | grep -q "Total Tests: [1-9]"; then
  LD_PRELOAD="$(${CXX:-g++} -print-file-name=libasan.so) $(${CXX:-g++} -print-file-name=libubsan.so)" \
    ASAN_OPTIONS="$ASAN_OPTIONS:detect_leaks=0" \
    ctest --test-dir "$build_dir" --output-on-failure -j"$jobs" -L python || status=1
fi
end=$(date +%s)
echo "sanitize.sh: build $((built - start)) s, tests $((end - built)) s, total $((end - start)) s;" \
  "$([[ $status -eq 0 ]] && echo passed || echo FAILED)"
exit "$status"
