#!/usr/bin/env bash
# Population-run figures of docs/performance.md, measured in one run:
#  1. 1e6 subjects x 1000 steps, summaries only: peak resident memory and time per subject-step
#     (best of three runs), against pkscan-bench (batched CPU, float64, best of 3) in the same
#     run.
#  2. 1e6 subjects x 100 steps, float32 trajectories to HDF5: peak resident memory.
# Usage: bench/population_bench.sh [BUILD_DIR] [N]   (N defaults to 1000000)
# Prints one JSON line per figure; needs /usr/bin/time (GNU time) for peak memory.
set -euo pipefail
build=${1:-build}
n=${2:-1000000}
pkscan="$build/bin/pkscan"
bench="$build/bin/pkscan-bench"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

population() {  # $1 steps, $2 precision, $3 output block
  cat <<YAML
model: three_compartment
time: {dt: 0.1, steps: $1}
subjects:
  population:
    count: $n
    seed: 1
    typical: {ka: 1.0, cl: 5.0, v_central: 20, q: 8, v_peripheral: 70}
    iiv: {block: [cl, v_central, ka], omega: [0.09, 0.03, 0.04, 0, 0, 0.16]}
doses:
  - {compartment: depot, time: 0, amount: 100, every: 2.4, repeat: 40}
precision: $2
engine: {method: batched, device: cpu}
output: $3
YAML
}

peak_run() {  # $1 yaml file, $2 output path -> "seconds peak_kib"
  /usr/bin/time -f "%e %M" -o "$work/time.txt" "$pkscan" run "$1" --output "$2" --quiet
  cat "$work/time.txt"
}

# 1. summaries only: best of three runs (as pkscan-bench reports the best of its repeats), the
#    largest peak memory of the three
population 1000 float64 "{trajectories: false}" > "$work/summaries.yaml"
runs=()
s1=""
kib1=0
for _ in 1 2 3; do
  read -r s kib < <(peak_run "$work/summaries.yaml" "$work/summaries.csv")
  runs+=("$s")
  if [[ -z "$s1" ]] || awk -v a="$s" -v b="$s1" 'BEGIN { exit !(a < b) }'; then s1=$s; fi
  if ((kib > kib1)); then kib1=$kib; fi
done
# pkscan-bench for comparison: dense float64 output of N subjects does not fit in memory here
# (24 GB for 1e6 x 1001 x 3), so dense is timed for N/10 subjects (per subject-step), and the
# final-state-only workload for N subjects.
nd=$((n / 10))
dense_json=$("$bench" --n "$nd" --t 1000 --method batched --device cpu --precision float64 \
             --output dense --repeat 3)
final_json=$("$bench" --n "$n" --t 1000 --method batched --device cpu --precision float64 \
             --output final --repeat 3)
field() { printf '%s' "$1" | sed -E "s/.*\"$2\":([0-9.eE+-]+).*/\\1/"; }
dense_ns=$(field "$dense_json" ns_per_subject_step)
final_ns=$(field "$final_json" ns_per_subject_step)
runs_list=$(IFS=,; echo "${runs[*]}")
awk -v n="$n" -v s="$s1" -v kib="$kib1" -v d="$dense_ns" -v f="$final_ns" -v runs="$runs_list" 'BEGIN {
  ns = s * 1e9 / (n * 1000)
  printf "{\"figure\": \"summaries_only\", \"n\": %d, \"t\": 1000, \"seconds\": %.3f, ", n, s
  printf "\"runs_seconds\": [%s], ", runs
  printf "\"ns_per_subject_step\": %.3f, \"peak_rss_mib\": %.1f, ", ns, kib / 1024
  printf "\"bench_dense_ns_per_subject_step\": %.3f, \"ratio_vs_dense\": %.2f, ", d, ns / d
  printf "\"bench_final_ns_per_subject_step\": %.3f, \"ratio_vs_final\": %.2f}\n", f, ns / f }'

# 2. float32 trajectories to HDF5
population 100 float32 "{trajectories: true}" > "$work/h5.yaml"
read -r s2 kib2 < <(peak_run "$work/h5.yaml" "$work/trajectories.h5")
size=$(stat -c %s "$work/trajectories.h5")
awk -v n="$n" -v s="$s2" -v kib="$kib2" -v sz="$size" 'BEGIN {
  printf "{\"figure\": \"hdf5_float32_trajectories\", \"n\": %d, \"t\": 100, \"seconds\": %.3f, ", n, s
  printf "\"peak_rss_mib\": %.1f, \"file_mib\": %.1f}\n", kib / 1024, sz / 1048576 }'
