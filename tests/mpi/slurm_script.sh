#!/usr/bin/env bash
# docs/scale-out.md's SLURM batch script, run as written (extracted from the page) with the
# variables SLURM sets for a job of 2 tasks of 1 CPU, and a stand-in `srun` on the PATH that
# starts the tasks with this machine's mpirun (no SLURM here: `--mpi=pmix` is SLURM's and is
# dropped). The script's result must be the file of one process, byte for byte. `/scratch` in
# the script's output path is read as the work folder. The page's GPU wrapper for mpirun
# (gpu_rank.sh) shows each rank of a node its own CUDA_VISIBLE_DEVICES (0 and 1 here) and runs
# pkscan as given: the same file as one process (the run is on the CPU; no GPU here).
# Usage: slurm_script.sh PKSCAN MPIRUN WORKDIR DOCS (docs/scale-out.md)
set -euo pipefail
pkscan=$1
mpirun=$2
work=$3
docs=$4
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

# The page's one ```bash block that holds MARKER, on stdout.
page_block() {  # MARKER
  python3 - "$docs" "$1" <<'PY'
import re, sys
text = open(sys.argv[1], encoding="utf-8").read()
blocks = [b for b in re.findall(r"```bash\n(.*?)```", text, re.S) if sys.argv[2] in b]
if len(blocks) != 1:
    sys.exit(f"{sys.argv[1]}: {len(blocks)} bash blocks with {sys.argv[2]}, expected 1")
print(blocks[0], end="")
PY
}

page_block "#SBATCH" > job.sh
grep -q '^srun ' job.sh || fail "the script has no srun line"
sed -i "s|/scratch/|$work/scratch/|g" job.sh

mkdir -p bin "scratch/tester"
ln -s "$pkscan" bin/pkscan
cat > bin/srun <<SH
#!/usr/bin/env bash
# SLURM's srun for this test: its own options dropped, the tasks started by mpirun.
while [ "\${1#--}" != "\$1" ]; do shift; done
exec timeout -k 5 240 "$mpirun" -np "\$SLURM_NTASKS" ${mpi[*]} "\$@"
SH
chmod +x bin/srun

cat > study.yaml <<'YAML'
model: three_compartment
time: {dt: 0.5, steps: 48}
subjects:
  population:
    count: 3000
    seed: 5
    replicates: 2
    typical: {ka: 1.0, cl: 5.0, v_central: 20, q: 8, v_peripheral: 70}
    iiv: {cl: 0.09, ka: 0.1}
doses:
  - {compartment: depot, time: 0, amount: 100, every: 12, repeat: 3}
output:
  summaries: true
YAML

"$pkscan" run study.yaml --output one.h5 -q
PATH="$work/bin:$PATH" USER=tester SLURM_NTASKS=2 SLURM_CPUS_PER_TASK=1 SLURM_JOB_ID=1 \
  bash job.sh > job.out 2>&1 || fail "the batch script failed: $(cat job.out)"
[ -e scratch/tester/study.h5 ] || fail "the batch script wrote no scratch/tester/study.h5"
cmp -s one.h5 scratch/tester/study.h5 || fail "the batch script's file differs from one process's"
echo "ok: the SLURM batch script of docs/scale-out.md (2 tasks) wrote the file of one process"

page_block "gpu_rank.sh" > gpu_rank.sh
chmod +x gpu_rank.sh
seen=$(timeout -k 5 120 "$mpirun" -np 2 "${mpi[@]}" ./gpu_rank.sh \
  bash -c 'echo "$OMPI_COMM_WORLD_RANK:$CUDA_VISIBLE_DEVICES"' | sort | tr '\n' ' ')
[ "$seen" = "0:0 1:1 " ] || fail "gpu_rank.sh: ranks saw CUDA_VISIBLE_DEVICES $seen, not 0:0 1:1"
timeout -k 5 240 "$mpirun" -np 2 "${mpi[@]}" ./gpu_rank.sh "$pkscan" run study.yaml \
  --output gpu.h5 -q || fail "pkscan through gpu_rank.sh failed"
cmp -s one.h5 gpu.h5 || fail "pkscan through gpu_rank.sh wrote another file than one process"
echo "ok: docs/scale-out.md's gpu_rank.sh gives each rank its own CUDA_VISIBLE_DEVICES"
