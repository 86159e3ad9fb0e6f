#!/usr/bin/env bash
# `mpirun -np R pkscan run` against `pkscan run` in one process: the same files, byte for byte,
# for R = 1, 2 and 3 (uneven splits), for population runs (CSV and HDF5, replicates, a sweep,
# residual error and BLQ, summaries by replicate and across replicates, parameter tables), a
# trial's arms with their own times and mg/kg doses, stratified summaries, summaries only with
# the passes of exact percentiles, a design run (its replicates split over the ranks; CSV and
# HDF5), and the runs rank 0 runs alone (a grid run to CSV, a dataset run).
# Chunks of 1024 rows (--chunk-rows) give every rank several. Open MPI on loopback only: shared
# memory (vader) and, for one run, TCP over lo (the path between nodes).
# Usage: mpi_runs.sh PKSCAN MPIRUN WORKDIR EXAMPLES (config/examples)
set -euo pipefail
pkscan=$1
mpirun=$2
work=$3
examples=$4
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

python3 - <<'PY'
import random
random.seed(7)
for name, n in (("covariates.csv", 2500), ("trial_covariates.csv", 3200)):
    with open(name, "w") as f:
        f.write("wt,sex\n")
        for i in range(n):
            f.write(f"{random.uniform(45, 110):.1f},{random.randint(0, 1)}\n")
PY

cat > population.yaml <<'YAML'
model: three_compartment
time: {dt: 0.5, steps: 48}
subjects:
  population:
    count: 2500
    seed: 11
    replicates: 2
    typical: {ka: 1.0, cl: 5.0, v_central: 20, q: 8, v_peripheral: 70}
    iiv: {cl: 0.09, v_central: 0.04}
    covariates:
      file: covariates.csv
      effects: [{parameter: cl, covariate: wt, type: power, coefficient: 0.75, reference: 70}]
    residual: {additive: 0.05, proportional: 0.1}
    lloq: 0.5
sweep:
  ka: [0.5, 2.0]
doses:
  - {compartment: depot, time: 0, amount: 100, every: 12, repeat: 1}
output:
  summaries: {percentiles: [5, 50, 95], by: [replicate, ka], replicates: {percentiles: [10, 90]}}
YAML

cat > trial.yaml <<'YAML'
model: three_compartment
time: {dt: 1, steps: 48}
subjects:
  population:
    seed: 4
    typical: {ka: 1.0, cl: 5.0, v_central: 20, q: 8, v_peripheral: 70}
    iiv: {cl: 0.09, v_central: 0.04}
    covariates:
      file: trial_covariates.csv
      effects: [{parameter: cl, covariate: wt, type: power, coefficient: 0.75, reference: 70}]
arms:
  - {name: low, count: 1500, doses: [{compartment: depot, time: 0, amount: 100, every: 24, repeat: 1}]}
  - name: per kg
    count: 1700
    doses: [{compartment: depot, time: 0, amount: 2.5, per: wt, every: 24, repeat: 1}]
    times: [0, 1, 2, 4, 8, 12, 24, 36, 48]
output:
  summaries: {by: [arm, sex]}
YAML

# Summaries only, 3000 x 501 times x 3 compartments > 4e6 values: exact percentiles by passes.
cat > exact.yaml <<'YAML'
model: three_compartment
time: {dt: 0.1, steps: 500}
subjects:
  population:
    count: 3000
    seed: 5
    typical: {ka: 1.0, cl: 5.0, v_central: 20, q: 8, v_peripheral: 70}
    iiv: {cl: 0.09, v_central: 0.04, ka: 0.2}
doses:
  - {compartment: depot, time: 0, amount: 100}
output:
  trajectories: false
  summaries: true
YAML

# Summaries only, summarised by the ranks (groups past their exact phase): one group pooling two
# replicates and two sweep points of 2500 subjects (units that start inside a block of the group
# travel with their amounts), and groups by replicate (each replicate's sketches sent at its end)
# with summaries across replicates.
cat > pooled.yaml <<'YAML'
model: three_compartment
time: {dt: 0.25, steps: 200}
subjects:
  population:
    count: 2500
    seed: 9
    replicates: 2
    typical: {ka: 1.0, cl: 5.0, v_central: 20, q: 8, v_peripheral: 70}
    iiv: {cl: 0.09, v_central: 0.04}
sweep:
  ka: [0.5, 2.0]
doses:
  - {compartment: depot, time: 0, amount: 100, every: 12, repeat: 3}
output:
  trajectories: false
  summaries: {by: []}
YAML
sed -e 's/by: \[\]/by: [replicate], replicates: true/' -e 's/steps: 200/steps: 400/' \
  -e '/^sweep:/,/ka: \[0.5, 2.0\]/d' -e 's/count: 2500/count: 3500/' pooled.yaml > byrep.yaml

# The result files of a run at STEM.EXT (the file and its companions).
files_of() {
  local stem=$1 ext=$2
  for f in "$stem.$ext" "$stem.summary.csv" "$stem.metrics.csv" "$stem.parameters.csv" \
           "$stem.replicate_summary.csv"; do
    [ -e "$f" ] && echo "$f"
  done
  return 0
}

check() {  # run file, extension
  local run=$1 ext=$2 name=${1%.yaml}_$2
  "$pkscan" run "$run" -o "one_$name.$ext" -q --chunk-rows 1024 -j 2 ||
    fail "$run: the run in one process failed"
  local want
  want=$(files_of "one_$name" "$ext")
  [ -n "$want" ] || fail "$run: no files"
  for np in 1 2 3; do
    local transport=("${shm[@]}")
    [ "$np" = 3 ] && [ "$name" = population_csv ] && transport=("${tcp[@]}")
    timeout -k 5 240 "$mpirun" -np "$np" "${common[@]}" "${transport[@]}" \
      "$pkscan" run "$run" -o "np${np}_$name.$ext" -q --chunk-rows 1024 -j 1 ||
      fail "$run: mpirun -np $np failed"
    for f in $want; do
      local g="np${np}_${f#one_}"
      [ -e "$g" ] || fail "$run: mpirun -np $np did not write $g"
      cmp -s "$f" "$g" || fail "$run: mpirun -np $np: $g differs from $f"
    done
    [ "$(files_of "np${np}_$name" "$ext" | wc -l)" = "$(echo "$want" | wc -l)" ] ||
      fail "$run: mpirun -np $np wrote other files than one process"
    echo "ok: $run ($ext): mpirun -np $np gives the files of one process ($(echo $want))"
  done
}

check population.yaml csv
check population.yaml h5
check trial.yaml csv
check exact.yaml csv
check pooled.yaml csv
check byrep.yaml csv
check byrep.yaml h5
# A grid run (CSV: rank 0 runs it; HDF5: streamed, one chunk) and a dataset run: rank 0 runs
# them. A design run (3 replicates of the study's design): replicate r on rank r mod R.
cp "$examples/three_compartment.yaml" grid.yaml
check grid.yaml csv
check grid.yaml h5
cp "$examples/datasets/population.csv" dataset.csv
sed 's/dataset: population.csv/dataset: dataset.csv/' "$examples/datasets/population.yaml" \
  > dataset.yaml
cp "$examples/trial/study.csv" study.csv
sed 's/replicates: 500/replicates: 3/' "$examples/trial/vpc.yaml" > design.yaml
check dataset.yaml csv
check design.yaml csv
check design.yaml h5
echo "all mpirun runs gave the files of one process"
