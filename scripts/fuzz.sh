#!/usr/bin/env bash
# Fuzzing of the run-file loader and the dataset reader (tests/fuzz/README.md).
#
#   scripts/fuzz.sh build                  configure and build the libFuzzer binaries (clang,
#                                          ASan + UBSan, build-fuzz/)
#   scripts/fuzz.sh run TARGET [SECONDS]   fuzz TARGET (run_file or dataset) for SECONDS (default
#                                          1800), one process, starting from the committed
#                                          corpus; new inputs go to build-fuzz/corpus/TARGET,
#                                          crashes to build-fuzz/artifacts/TARGET/
#   scripts/fuzz.sh merge TARGET           minimise committed + new inputs into
#                                          tests/fuzz/corpus/TARGET (libFuzzer -merge=1)
#   scripts/fuzz.sh replay                 build the replay drivers (normal build, build/) and
#                                          replay the committed corpus (ctest -L fuzz), as CI does
#
# Needs clang and libFuzzer (Debian: clang, libfuzzer-14-dev, libomp-dev; scripts/install-deps.sh).
# Environment: FUZZ_JOBS (build parallelism, default nproc), FUZZ_ARGS (extra libFuzzer flags).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

build_dir=build-fuzz
jobs=${FUZZ_JOBS:-$(nproc)}

target_of() {
  case "${1:-}" in
    run_file | dataset) echo "$1" ;;
    *)
      echo "fuzz.sh: TARGET must be run_file or dataset, not '${1:-}'" >&2
      exit 2
      ;;
  esac
}

build() {
  CC=${CC:-clang} CXX=${CXX:-clang++} cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Fuzz \
    -DPKSCAN_FUZZ=ON -DPKSCAN_BUILD_TESTS=OFF -DPKSCAN_BUILD_APPS=OFF -DPKSCAN_BUILD_PYTHON=OFF \
    -DPKSCAN_INSTALL=OFF -DPKSCAN_WITH_CUDA=OFF
  cmake --build "$build_dir" -j"$jobs" --target fuzz_run_file fuzz_dataset
}

case "${1:-}" in
  build)
    build
    ;;
  run)
    target=$(target_of "${2:-}")
    seconds=${3:-1800}
    work="$build_dir/corpus/$target"
    artifacts="$build_dir/artifacts/$target/"
    mkdir -p "$work" "$artifacts"
    # One process (no -jobs/-workers: libFuzzer then runs in the foreground and prints its final
    # stats here). A single input may take at most 10 s and 2 GiB; leaks are reported (ASan's
    # LeakSanitizer, on by default). The committed corpus is read, new inputs go to $work.
    # shellcheck disable=SC2086
    "$build_dir/bin/fuzz_$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
      -malloc_limit_mb=2048 -print_final_stats=1 -dict="tests/fuzz/$target.dict" \
      -artifact_prefix="$artifacts" ${FUZZ_ARGS:-} "$work" "tests/fuzz/corpus/$target"
    ;;
  merge)
    target=$(target_of "${2:-}")
    merged="$build_dir/merged/$target"
    rm -rf "$merged"
    mkdir -p "$merged" "$build_dir/corpus/$target"
    "$build_dir/bin/fuzz_$target" -merge=1 -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=2048 \
      "$merged" "tests/fuzz/corpus/$target" "$build_dir/corpus/$target"
    rm -rf "tests/fuzz/corpus/$target"
    cp -r "$merged" "tests/fuzz/corpus/$target"
    echo "fuzz.sh: tests/fuzz/corpus/$target: $(find "tests/fuzz/corpus/$target" -type f | wc -l)" \
      "files, $(du -sh "tests/fuzz/corpus/$target" | cut -f1)"
    ;;
  replay)
    cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DPKSCAN_BUILD_TESTS=ON -DPKSCAN_WERROR=ON
    cmake --build build -j"$jobs" --target fuzz_run_file_replay fuzz_dataset_replay
    ctest --test-dir build --output-on-failure --no-tests=error -L fuzz
    ;;
  *)
    sed -n '2,17p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
