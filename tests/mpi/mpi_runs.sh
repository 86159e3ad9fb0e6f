#!/usr/bin/env bash
# `mpirun -np R pkscan run` against `pkscan run` in one process: the same files, byte for byte,
# for R = 1, 2 and 3 (uneven splits), for population runs (CSV and HDF5, replicates, a sweep,
# residual error and BLQ, summaries by replicate and across replicates, parameter tables), a
# trial's arms with their own times and mg/kg doses, stratified summaries, summaries only with
# the passes of exact percentiles, a design run (its replicates split over the ranks; CSV and
# HDF5), grid runs to CSV and dataset runs (their subjects split over the ranks).
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
# Grid runs (the bundled 3 subjects, one unit; 3000 subjects with their own ka and ke, in float32
# at 4 output times: units of 1024 subjects on every rank), dataset runs (the bundled one; 3100
# subjects, a covariate with commas, missing DV: blocks of 1024 subjects on every rank, rows
# formatted where simulated). A design run (3 replicates of the study's design): replicate r on
# rank r mod R.
cp "$examples/three_compartment.yaml" grid.yaml
check grid.yaml csv
check grid.yaml h5
python3 - <<'PY'
import random
random.seed(3)
n = 3000
ka = ", ".join(f"{random.uniform(0.5, 2):.4f}" for _ in range(n))
ke = ", ".join(f"{random.uniform(0.1, 0.4):.4f}" for _ in range(n))
with open("grid_large.yaml", "w") as f:
    f.write(f"""model: three_compartment
precision: float32
time: {{dt: 0.25, steps: 40}}
subjects:
  count: {n}
  parameters: {{ka: [{ka}], ke: [{ke}], k12: 0.4, k21: 0.11, v_central: 20, v_peripheral: 70,
               v_depot: 1}}
doses:
  - {{compartment: depot, time: 0, amount: 100}}
  - {{compartment: central, time: 2, amount: 50, rate: 25}}
output:
  times: [0, 1.25, 4.25, 10]
""")
n = 3100
with open("dataset_large.csv", "w") as f:
    f.write("ID,TIME,AMT,RATE,CMT,EVID,II,ADDL,DV,WT,KA,NOTE\n")
    for i in range(n):
        wt, ka = random.uniform(50, 100), random.uniform(0.5, 2)
        note = '"a,b"' if i % 7 == 0 else "x"
        f.write(f"{1000 + i},0,100,.,1,1,12,2,.,{wt:.1f},{ka:.3f},{note}\n")
        for t in (0.5, 1, 2, 4, 8, 12.5, 24):
            dv = "." if random.random() < 0.2 else f"{random.uniform(0.1, 5):.3f}"
            f.write(f"{1000 + i},{t},.,.,2,0,.,.,{dv},{wt:.1f},{ka:.3f},{note}\n")
ke = ", ".join(f"{random.uniform(0.1, 0.4):.4f}" for _ in range(n))
# Three subjects (one per block on 3 ranks) whose concentrations overflow: a subnormal volume.
vc = ", ".join("1e-310" if i in (5, 1500, 2900) else "20" for i in range(n))
with open("dataset_large.yaml", "w") as f:
    f.write(f"""model: three_compartment
subjects:
  dataset: dataset_large.csv
  parameters: {{ka: 0.9, ke: [{ke}], k12: 0.4, k21: 0.11, v_central: [{vc}],
               v_peripheral: 70}}
""")
PY
check grid_large.yaml csv
check dataset_large.yaml csv
# The warning about them counts each subject once, whichever rank simulated it.
for np in 1 2 3; do
  timeout -k 5 240 "$mpirun" -np "$np" "${mpi[@]}" "$pkscan" run dataset_large.yaml \
    -o warn.csv -j 1 2> warn.txt > /dev/null || fail "dataset_large.yaml: mpirun -np $np failed"
  grep -q "^pkscan: warning: 3 subjects have non-finite values" warn.txt ||
    fail "dataset_large.yaml: mpirun -np $np: not 3 non-finite subjects: $(cat warn.txt)"
done
cp "$examples/datasets/population.csv" dataset.csv
sed 's/dataset: population.csv/dataset: dataset.csv/' "$examples/datasets/population.yaml" \
  > dataset.yaml
cp "$examples/trial/study.csv" study.csv
sed 's/replicates: 500/replicates: 3/' "$examples/trial/vpc.yaml" > design.yaml
check dataset.yaml csv
check design.yaml csv
check design.yaml h5
echo "all mpirun runs gave the files of one process"
