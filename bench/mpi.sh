#!/usr/bin/env bash
# MPI runs against one process, in the same session (docs/performance.md#mpi-runs): a population
# of N subjects (default 1e6; 3 compartments, 97 output times, 4 doses) with summaries only (exact
# percentiles, and the sketch's estimates: `exact: false`), and the same run with trajectories to
# HDF5 (N/10 subjects), each run by `pkscan run -j 1` in one
# process, by `mpirun -np 1 pkscan run -j 1` (one rank: the launcher's and MPI's start
# included), by `mpirun -np 2 pkscan run -j 1` and, for the machine's own scaling, by
# `pkscan run -j 2` in one process; best of REPEAT (default 3) wall times. The files of the
# one-process and 2-rank runs are compared byte for byte. Prints one JSON line per cell:
#   {"cell": ..., "n": ..., "one_s": ..., "mpi1_s": ..., "mpi2_s": ..., "threads2_s": ...,
#    "speedup": one_s / mpi2_s, "speedup_ranks": mpi1_s / mpi2_s,
#    "speedup_threads": one_s / threads2_s, "same_files": ...}
# Usage: bench/mpi.sh [BUILD_DIR] [N] [REPEAT] [CELLS]
#   CELLS: the cells to run, space-separated (default: all three)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
build=${1:-build}
n=${2:-1000000}
repeat=${3:-3}
cells=${4:-summaries_only summaries_only_estimates trajectories_h5}
pkscan=$(realpath "$build/bin/pkscan")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_pml=ob1
mpi=(--oversubscribe --bind-to none --mca oob_tcp_if_include lo --mca btl self,vader
     --mca btl_vader_single_copy_mechanism none)

write_run() {  # NAME COUNT TRAJECTORIES [EXACT]
  cat > "$1.yaml" <<YAML
model: three_compartment
time: {dt: 0.5, steps: 96}
subjects:
  population:
    count: $2
    seed: 1
    typical: {ka: 1.0, cl: 5.0, v_central: 20, q: 8, v_peripheral: 70}
    iiv: {cl: 0.09, v_central: 0.04, ka: 0.1}
doses:
  - {compartment: depot, time: 0, amount: 100, every: 12, repeat: 3}
output:
  trajectories: $3
  summaries: {exact: ${4:-true}}
  parameters: false
YAML
}

best() {  # COMMAND...: the best wall time of $repeat runs, in seconds
  local b=""
  for _ in $(seq "$repeat"); do
    local s e
    s=$(date +%s.%N)
    "$@" > /dev/null
    e=$(date +%s.%N)
    b=$(python3 -c "import sys; t=$e-$s; b='$b'; print(t if not b else min(t, float(b)))")
  done
  echo "$b"
}

cell() {  # NAME COUNT TRAJECTORIES EXT [EXACT]
  write_run "$1" "$2" "$3" "${5:-true}"
  local one np1 two threads same=true
  one=$(best "$pkscan" run "$1.yaml" -o "one.$4" -q -j 1)
  np1=$(best mpirun -np 1 "${mpi[@]}" "$pkscan" run "$1.yaml" -o "np1.$4" -q -j 1)
  two=$(best mpirun -np 2 "${mpi[@]}" "$pkscan" run "$1.yaml" -o "two.$4" -q -j 1)
  threads=$(best "$pkscan" run "$1.yaml" -o "thr.$4" -q -j 2)
  for f in one.*; do cmp -s "$f" "two.${f#one.}" || same=false; done
  python3 -c "import json; print(json.dumps({'cell': '$1', 'n': $2, 'one_s': round($one, 3), \
'mpi1_s': round($np1, 3), 'mpi2_s': round($two, 3), 'threads2_s': round($threads, 3), \
'speedup': round($one / $two, 3), 'speedup_ranks': round($np1 / $two, 3), \
'speedup_threads': round($one / $threads, 3), 'same_files': $( $same && echo True || echo False)}))"
  rm -f one.* np1.* two.* thr.*
}

for c in $cells; do
  case $c in
    summaries_only) cell summaries_only "$n" false csv ;;
    summaries_only_estimates) cell summaries_only_estimates "$n" false csv false ;;
    trajectories_h5) cell trajectories_h5 $((n / 10)) true h5 ;;
    *) echo "bench/mpi.sh: unknown cell $c" >&2; exit 2 ;;
  esac
done
