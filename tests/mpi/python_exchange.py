"""simulate_population split over MPI processes from Python: docs/python.md's MpiExchange (its
code block, run as written) over mpi4py's MPI.COMM_WORLD, started by `mpirun -np R python
python_exchange.py DOCS`. Every rank simulates its share; rank 0's result must equal the same
call in one process (no exchange, made by rank 0 afterwards) array for array, bit for bit, and
the other ranks' must be None. Prints one line per rank and exits 0 when it holds."""

import re
import sys

import numpy as np
from mpi4py import MPI

import pkscan

# 2100 subjects x 2 replicates x 2 ka values, chunks of 1024: 12 units over the ranks; summaries
# past the exact phase (501 times x 3 compartments), so the ranks summarise their own units.
RUN = dict(model="three_compartment",
           typical={"ka": 1.0, "cl": 5.0, "v_central": 20.0, "q": 8.0, "v_peripheral": 70.0},
           doses=[{"compartment": "depot", "time": 0.0, "amount": 100.0, "every": 6.0,
                   "repeat": 1}],
           dt=0.1, steps=500, count=2100, seed=8, iiv={"cl": 0.09, "ka": 0.16}, replicates=2,
           sweep={"ka": [0.5, 2.0]}, threads=1)


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
    print(f"rank 0 of {size}: the result of one process, bit for bit")
    return 0


if __name__ == "__main__":
    sys.exit(main())
