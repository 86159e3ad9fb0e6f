#!/usr/bin/env bash
# First command of the README: installs the dependencies, builds the pkscan program and runs
# the example run file. Safe to run again; later runs only rebuild what changed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

bash scripts/install-deps.sh

bash scripts/configure.sh   # build/: tests on, warnings as errors, CUDA where a GPU is
cmake --build build --target pkscan_cli -j"$(nproc)"

mkdir -p results
build/bin/pkscan run config/examples/three_compartment.yaml --output results/three_compartment.csv
build/bin/pkscan run config/examples/population/population.yaml --output results/population.csv
build/bin/pkscan plot results/population.csv -o results/population.png

cat <<MSG

pkscan is built: $(pwd)/build/bin/pkscan
Example results: $(pwd)/results/three_compartment.csv ($(($(wc -l <results/three_compartment.csv) - 1)) rows)
A population: $(pwd)/results/population.csv, its summaries population.summary.csv and
  population.metrics.csv, and the picture $(pwd)/results/population.png

Run your own file (see docs/run-files.md; copy config/examples/three_compartment.yaml to start):
  build/bin/pkscan validate my_run.yaml
  build/bin/pkscan run my_run.yaml --output results/my_run.csv
Run the tests:
  bash test.sh
MSG
