# What the MPI test scripts share (sourced): Open MPI 4.1's settings for CI on one machine, as
# root, on loopback only (../shared/reference/scale-out.md has the why of each), a fresh work
# folder, and `fail`.
# Usage (after setting `work`): source common.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_pml=ob1  # not UCX, whose shared memory can fail in containers
# Shared memory (vader; no single-copy CMA, which needs ptrace rights), and TCP over lo: the
# transport between nodes.
shm=(--mca btl self,vader --mca btl_vader_single_copy_mechanism none)
tcp=(--mca btl self,tcp --mca btl_tcp_if_include lo)
# More ranks than cores, and threads not pinned to one core; the runtime's traffic on lo.
common=(--oversubscribe --bind-to none --mca oob_tcp_if_include lo)
mpi=("${common[@]}" "${shm[@]}")
fail() { echo "FAIL: $*" >&2; exit 1; }
rm -rf "$work" && mkdir -p "$work" && cd "$work"
