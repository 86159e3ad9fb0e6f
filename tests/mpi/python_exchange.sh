#!/usr/bin/env bash
# simulate_population split over 2 and 3 MPI processes from Python (python_exchange.py, with
# docs/python.md's MpiExchange over mpi4py): rank 0 gets the result of one process, bit for bit.
# Usage: python_exchange.sh PYTHON MPIRUN WORKDIR DOCS (PYTHONPATH: the built pkscan package)
set -euo pipefail
python=$1
mpirun=$2
work=$3
docs=$4
script="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/python_exchange.py"
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
for np in 2 3; do
  timeout -k 5 300 "$mpirun" -np "$np" "${mpi[@]}" "$python" -m mpi4py "$script" "$docs" ||
    fail "mpirun -np $np python python_exchange.py: exit status $?"
done
echo "the exchange over MPI gives rank 0 the result of one process"
