#!/usr/bin/env bash
# A rank that fails stops the whole MPI run: an error thrown on a rank (0 and not 0) and a rank
# killed with SIGKILL (0 and not 0), injected deterministically (PKSCAN_MPI_FAULT). Each run
# must end within seconds with a non-zero exit status, an error thrown must be reported in one
# line naming its rank, and the results of an earlier run at the same path must stay whole
# with no temporary file left beside them (rank 0 killed: once the next run has removed them).
# SIGTERM as a scheduler sends it (to every process of the job) ends each rank as one process
# (exit status 143, rank 0's line, no file left); SIGTERM to mpirun alone leaves at most
# temporary files that the next run to the path removes.
# Usage: mpi_faults.sh PKSCAN MPIRUN WORKDIR
set -euo pipefail
pkscan=$1
mpirun=$2
work=$3
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

cat > run.yaml <<'YAML'
model: three_compartment
time: {dt: 0.5, steps: 96}
subjects:
  population:
    count: 8192
    seed: 3
    typical: {ka: 1.0, cl: 5.0, v_central: 20, q: 8, v_peripheral: 70}
    iiv: {cl: 0.09, v_central: 0.04}
doses:
  - {compartment: depot, time: 0, amount: 100, every: 12, repeat: 3}
output:
  summaries: true
YAML

# An earlier run's results, which a failed run must leave as they are.
"$pkscan" run run.yaml -o out.csv -q --chunk-rows 1024
sums=$(md5sum out.csv out.summary.csv out.metrics.csv out.parameters.csv)
listing=$(ls -A)

# FAULT: RANK:UNIT:KIND; NP ranks; WANT: the exit status (or "nonzero").
fault() {
  local spec=$1 np=$2 want=$3
  local start=$SECONDS rc=0
  PKSCAN_MPI_FAULT=$spec timeout -k 5 120 "$mpirun" -np "$np" "${mpi[@]}" \
    "$pkscan" run run.yaml -o out.csv -q --chunk-rows 1024 -j 1 > stdout.txt 2> stderr.txt ||
    rc=$?
  local took=$((SECONDS - start))
  [ "$rc" != 0 ] || fail "$spec: the run succeeded"
  [ "$rc" != 124 ] || fail "$spec: the run hung (timeout)"
  [ "$want" = nonzero ] || [ "$rc" = "$want" ] || fail "$spec: exit status $rc, not $want"
  [ "$took" -le 30 ] || fail "$spec: took ${took}s to stop"
  [ "$(md5sum out.csv out.summary.csv out.metrics.csv out.parameters.csv)" = "$sums" ] ||
    fail "$spec: the earlier results changed"
  rm -f stdout.txt
  # Rank 0 killed cannot remove its temporary files (nor can one process killed so): the next
  # run at the path removes them (the orphans of a process that is gone), with the same results.
  if [ "${spec%%:*}" = 0 ] && [ "${spec##*:}" = kill ]; then
    "$pkscan" run run.yaml -o out.csv -q --chunk-rows 1024
    [ "$(md5sum out.csv out.summary.csv out.metrics.csv out.parameters.csv)" = "$sums" ] ||
      fail "$spec: the next run's results differ"
  fi
  local now
  now=$(ls -A | grep -v '^stderr.txt$' || true)
  [ "$now" = "$listing" ] || fail "$spec: files left: $(echo "$now" | tr '\n' ' ')"
  echo "ok: PKSCAN_MPI_FAULT=$spec with $np ranks: exit status $rc after ${took}s, earlier results whole"
}

# An error on rank 1 (its first chunk is chunk 1): rank 0 reports it, naming the rank.
fault 1:1:throw 2 1
grep -q "^pkscan: error: run.yaml: rank 1: fault injected before chunk 1" stderr.txt ||
  fail "1:1:throw: no error line naming rank 1: $(cat stderr.txt)"
[ "$(grep -c '^pkscan: error:' stderr.txt)" = 1 ] || fail "1:1:throw: more than one error line"
# An error on rank 2 of 3, late in the run (chunk 5).
fault 2:5:throw 3 1
grep -q "^pkscan: error: run.yaml: rank 2: fault injected before chunk 5" stderr.txt ||
  fail "2:5:throw: no error line naming rank 2: $(cat stderr.txt)"
# An error on rank 0 itself.
fault 0:2:throw 2 1
grep -q "^pkscan: error: run.yaml: fault injected before chunk 2" stderr.txt ||
  fail "0:2:throw: no error line: $(cat stderr.txt)"
# A rank killed (SIGKILL), not 0 and 0: the launcher names the rank that died.
fault 1:3:kill 2 nonzero
grep -q "rank 1" stderr.txt || fail "1:3:kill: the rank is not named: $(cat stderr.txt)"
fault 0:3:kill 3 nonzero
grep -q "rank 0" stderr.txt || fail "0:3:kill: the rank is not named: $(cat stderr.txt)"

# SIGTERM while the run is under way (its temporary files exist).
cat > long.yaml <<'YAML'
model: three_compartment
time: {dt: 0.05, steps: 4000}
subjects:
  population:
    count: 200000
    seed: 3
    typical: {ka: 1.0, cl: 5.0, v_central: 20, q: 8, v_peripheral: 70}
    iiv: {cl: 0.09, v_central: 0.04}
doses:
  - {compartment: depot, time: 0, amount: 100, every: 12, repeat: 3}
output:
  summaries: true
YAML
listing=$(ls -A)
# The processes whose parent is $1 (from /proc: procps may not be installed).
children() {
  local f
  for f in /proc/[0-9]*/stat; do
    awk -v p="$1" '$4 == p { print $1 }' "$f" 2>/dev/null || true
  done
}
# Starts the long run under `timeout` (pid: $job) and waits until rank 0 has created its
# temporary files; mpirun's pid: $launcher, the ranks': $ranks. A failure of the script stops
# them (the trap).
job="" launcher="" ranks=""
trap 'kill -KILL $job $launcher $ranks 2>/dev/null || true' EXIT
start_long() {
  timeout -k 5 120 "$mpirun" -np 2 "${mpi[@]}" "$pkscan" run long.yaml -o long.csv -q -j 1 \
    2> stderr.txt &
  job=$!
  local waited=0
  until [ -n "$(ls -A | grep '^\.long\.csv\.pkscan-tmp\.' || true)" ]; do
    kill -0 "$job" 2>/dev/null || fail "SIGTERM: the run ended before it started: $(cat stderr.txt)"
    sleep 0.2
    waited=$((waited + 1))
    [ "$waited" -le 300 ] || fail "SIGTERM: the run did not start within 60 s"
  done
  launcher=$(children "$job")
  ranks=$(children "$launcher")
  [ "$(echo "$ranks" | wc -w)" = 2 ] || fail "SIGTERM: ranks not found: $ranks"
}
# Waits (at most 10 s) until none of the processes $@ exists.
gone() {
  local p waited=0
  for p in "$@"; do
    while kill -0 "$p" 2>/dev/null; do
      sleep 0.1
      waited=$((waited + 1))
      [ "$waited" -le 100 ] || fail "process $p still runs 10 s after the run ended"
    done
  done
}
no_files_left() {
  local now
  now=$(ls -A | grep -v '^stderr.txt$' || true)
  [ "$now" = "$(echo "$listing" | grep -v '^stderr.txt$' || true)" ] ||
    fail "$1: files left: $(echo "$now" | tr '\n' ' ')"
}

# As a scheduler sends it (SLURM signals every process of the job): mpirun and the ranks at
# once. Each rank ends as one process does; rank 0 says so.
start_long
rc=0
kill -TERM "$launcher" $ranks
wait "$job" || rc=$?
gone $ranks
job="" launcher="" ranks=""  # ended: the trap must not signal their pids, which may be reused
[ "$rc" != 0 ] || fail "SIGTERM: the run succeeded"
[ "$rc" != 124 ] || fail "SIGTERM: the run hung"
grep -q "^pkscan: stopped by SIGTERM (exit status 143); no partial output left" stderr.txt ||
  fail "SIGTERM: no line from rank 0: $(cat stderr.txt)"
no_files_left SIGTERM
echo "ok: SIGTERM to mpirun and the ranks: exit status $rc, no file left"

# To mpirun alone (kill, Ctrl-C): Open MPI stops the ranks; rank 0 may be ended before it
# removes its temporary files, and then the next run to the path removes them.
start_long
rc=0
kill -TERM "$launcher"
wait "$job" || rc=$?
[ "$rc" != 0 ] || fail "SIGTERM to mpirun: the run succeeded"
[ "$rc" != 124 ] || fail "SIGTERM to mpirun: the run hung"
gone $ranks  # the orphan clean-up removes the files of processes that no longer run
job="" launcher="" ranks=""
"$pkscan" run run.yaml -o long.csv -q --chunk-rows 1024
rm -f long.csv long.summary.csv long.metrics.csv long.parameters.csv
no_files_left "SIGTERM to mpirun"
echo "ok: SIGTERM to mpirun: exit status $rc, no file left after the next run"
# A design run (its replicates split over the ranks): an error on rank 1 before its replicate 3
# stops the run with one line naming the rank, and no file of the run is left.
cat > design.csv <<'CSV'
ID,TIME,AMT,CMT,EVID,DV
1,0,100,1,1,.
1,1,.,2,0,1
1,6,.,2,0,1
2,0,50,1,1,.
2,2,.,2,0,1
CSV
cat > design.yaml <<'YAML'
model: three_compartment
subjects:
  dataset: design.csv
  population:
    seed: 2
    replicates: 6
    typical: {ka: 1.0, cl: 5.0, v_central: 20, q: 8, v_peripheral: 70}
    iiv: {cl: 0.09}
YAML
rm -f stdout.txt stderr.txt
before=$(ls -A)
rc=0
PKSCAN_MPI_FAULT=1:3:throw timeout -k 5 120 "$mpirun" -np 2 "${mpi[@]}" "$pkscan" run design.yaml \
  -o design_out.csv -q -j 1 > stdout.txt 2> stderr.txt || rc=$?
[ "$rc" = 1 ] || fail "design 1:3:throw: exit status $rc, not 1"
grep -q "^pkscan: error: design.yaml: rank 1: fault injected before chunk 3" stderr.txt ||
  fail "design 1:3:throw: no error line naming rank 1: $(cat stderr.txt)"
rm -f stdout.txt stderr.txt
[ "$(ls -A)" = "$before" ] || fail "design 1:3:throw: files left: $(ls -A | tr '\n' ' ')"
echo "ok: a design run's error on rank 1 stops the run, naming the rank, and leaves no file"
# A dataset run (its blocks of 1024 subjects split over the ranks): an error on rank 1 before its
# block 3, and rank 1 killed before it, stop the run; an earlier result at the path stays whole.
python3 - <<'PY'
with open("data.csv", "w") as f:
    f.write("ID,TIME,AMT,CMT,EVID,DV\n")
    for i in range(5000):
        f.write(f"{i + 1},0,100,1,1,.\n{i + 1},1,.,2,0,1\n{i + 1},6,.,2,0,1\n")
PY
cat > data.yaml <<'YAML'
model: three_compartment
subjects:
  dataset: data.csv
  parameters: {ka: 1.0, ke: 0.25, k12: 0.4, k21: 0.11, v_central: 20, v_peripheral: 70}
YAML
"$pkscan" run data.yaml -o data_out.csv -q
cp data_out.csv data_earlier.csv
before=$(ls -A)
for kind in throw kill; do
  rc=0
  PKSCAN_MPI_FAULT=1:3:$kind timeout -k 5 120 "$mpirun" -np 2 "${mpi[@]}" "$pkscan" run \
    data.yaml -o data_out.csv -q -j 1 > stdout.txt 2> stderr.txt || rc=$?
  [ "$rc" != 0 ] && [ "$rc" != 124 ] || fail "dataset 1:3:$kind: exit status $rc"
  if [ "$kind" = throw ]; then
    grep -q "^pkscan: error: data.yaml: rank 1: fault injected before chunk 3" stderr.txt ||
      fail "dataset 1:3:throw: no error line naming rank 1: $(cat stderr.txt)"
  fi
  rm -f stdout.txt stderr.txt
  cmp -s data_out.csv data_earlier.csv || fail "dataset 1:3:$kind: the earlier result changed"
  [ "$(ls -A)" = "$before" ] || fail "dataset 1:3:$kind: files left: $(ls -A | tr '\n' ' ')"
done
echo "ok: a dataset run's error or killed rank 1 stops the run, the earlier result stays whole"

echo "all fault runs stopped as they should"
