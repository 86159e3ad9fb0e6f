#!/usr/bin/env bash
# A pkscan built without MPI, started by an MPI launcher with more than one process, refuses
# to run (every copy would write the whole study to the same files): exit status 2, one error
# line from rank 0, no result. With one process it runs as usual.
# Usage: launch_refusal.sh PKSCAN_WITHOUT_MPI MPIRUN WORKDIR
set -euo pipefail
pkscan=$1
mpirun=$2
work=$3
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cat > run.yaml <<'YAML'
model: three_compartment
time: {dt: 1, steps: 4}
subjects:
  count: 1
  parameters: {ka: 1.0, cl: 5.0, v_central: 20, q: 8, v_peripheral: 70}
doses: [{compartment: depot, time: 0, amount: 100}]
YAML
rc=0
timeout -k 5 60 "$mpirun" -np 2 "${mpi[@]}" "$pkscan" run run.yaml -o out.csv \
  > stdout.txt 2> stderr.txt || rc=$?
[ "$rc" = 2 ] || fail "mpirun -np 2: exit status $rc, not 2: $(cat stderr.txt)"
[ ! -e out.csv ] || fail "mpirun -np 2 wrote out.csv"
[ "$(grep -c '^pkscan: error: started by an MPI launcher with 2 processes' stderr.txt)" = 1 ] ||
  fail "mpirun -np 2: not one refusal line: $(cat stderr.txt)"
echo "ok: mpirun -np 2 refused with exit status 2 and one line"
# The launcher's variables alone (as srun --mpi=pmi2 sets them): rank 0 says it, rank 1 not.
rc=0
PMI_SIZE=4 PMI_RANK=0 "$pkscan" run run.yaml -o out.csv 2> stderr.txt || rc=$?
[ "$rc" = 2 ] && grep -q "with 4 processes" stderr.txt || fail "PMI_SIZE=4: $rc $(cat stderr.txt)"
rc=0
PMI_SIZE=4 PMI_RANK=3 "$pkscan" run run.yaml -o out.csv 2> stderr.txt || rc=$?
[ "$rc" = 2 ] && [ ! -s stderr.txt ] || fail "PMI_RANK=3: $rc $(cat stderr.txt)"
[ ! -e out.csv ] || fail "a refused run wrote out.csv"
# One process under mpirun runs as usual.
timeout -k 5 60 "$mpirun" -np 1 "${mpi[@]}" "$pkscan" run run.yaml -o out.csv -q ||
  fail "mpirun -np 1 failed"
[ -s out.csv ] || fail "mpirun -np 1 wrote nothing"
echo "ok: without MPI, one process under mpirun runs; the launcher's variables with 4 refuse"
