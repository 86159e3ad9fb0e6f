"""simulate_population split over MPI processes from Python: docs/python.md's MpiExchange (its
code block, run as written) over mpi4py's MPI.COMM_WORLD, started by `mpirun -np R python -m
mpi4py python_exchange.py DOCS` (mpi4py's runner: an exception on any rank aborts every rank). Every rank simulates its share; rank 0's result must equal the same
call in one process (no exchange, made by rank 0 afterwards) array for array, bit for bit, and
the other ranks' must be None. Prints one line per rank and exits 0 when it holds."""

import pathlib
import re
import sys

import numpy as np
from mpi4py import MPI

import pkscan

# The run of python/tests/test_exchange.py (the same split over processes joined by pipes): 12
# units over the ranks, summaries past the exact phase, so the ranks summarise their own units.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "python" / "tests"))
from test_exchange import RUN  # noqa: E402


def documented_exchange(docs):
    """The MpiExchange class of docs/python.md, defined by running its code block."""
    with open(docs, encoding="utf-8") as f:
        text = f.read()
    for block in re.findall(r"```python\n(.*?)```", text, re.S):
        if "class MpiExchange" in block:
            scope = {}
            exec(block, scope)  # noqa: S102 - the documentation's own example
            return scope["MpiExchange"]
    raise SystemExit(f"{docs} has no MpiExchange example")


def main():
    exchange = documented_exchange(sys.argv[1])
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    split = pkscan.simulate_population(**RUN, exchange=exchange(comm))
    if rank != 0:
        ok = split is None
        print(f"rank {rank} of {size}: {'returned None' if ok else 'returned a result'}")
        return 0 if ok else 1
    one = pkscan.simulate_population(**RUN)
    for key in ("mean", "quantiles", "metrics", "parameters", "etas", "ids", "extra", "count"):
        np.testing.assert_array_equal(split[key], one[key], err_msg=key)
    assert split["exact"] == one["exact"]
    np.testing.assert_array_equal(split["groups"], one["groups"], err_msg="groups")
    print(f"rank 0 of {size}: the result of one process, bit for bit")
    return 0


if __name__ == "__main__":
    sys.exit(main())
