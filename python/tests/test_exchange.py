"""simulate_population split over processes by an exchange of the caller's own: two and three
processes (multiprocessing, spawned, joined by pipes) give rank 0 the result of one process, bit
for bit, and the other ranks None; a bad exchange is a ValueError."""

import multiprocessing as mp

import numpy as np
import pytest

import pkscan

# 2100 subjects x 2 replicates x 2 ka values, chunks of 1024: 12 units; summaries only past the
# exact phase (501 times x 3 compartments), so the ranks summarise their own units.
RUN = dict(model="three_compartment",
           typical={"ka": 1.0, "cl": 5.0, "v_central": 20.0, "q": 8.0, "v_peripheral": 70.0},
           doses=[{"compartment": "depot", "time": 0.0, "amount": 100.0, "every": 6.0,
                   "repeat": 1}],
           dt=0.1, steps=500, count=2100, seed=8, iiv={"cl": 0.09, "ka": 0.16}, replicates=2,
           sweep={"ka": [0.5, 2.0]}, threads=1)


class PipeExchange:
    """Rank `rank` of `size`: pipes[r] joins rank r (> 0) to rank 0."""

    def __init__(self, rank, size, pipes):
        self._rank, self._size, self._pipes = rank, size, pipes

    def rank(self):
        return self._rank

    def size(self):
        return self._size

    def send(self, message):
        self._pipes[self._rank].send_bytes(message)

    def receive(self, source):
        return self._pipes[source].recv_bytes()


class BroadcastPipeExchange(PipeExchange):
    """PipeExchange that broadcasts too (rank 0 to every rank, on the same pipes): the passes
    of exact percentiles are split over the ranks."""

    def broadcast(self, message):
        if self._rank == 0:
            for r in range(1, self._size):
                self._pipes[r].send_bytes(message)
            return None
        return self._pipes[self._rank].recv_bytes()


def other_rank(rank, size, conn, done, kind):
    pipes = {rank: conn}
    result = pkscan.simulate_population(**RUN, exchange=kind(rank, size, pipes))
    done.put((rank, result is None))


@pytest.mark.parametrize("size", [2, 3])
@pytest.mark.parametrize("kind", [PipeExchange, BroadcastPipeExchange])
def test_rank_zero_gets_the_bits_of_one_process(size, kind):
    one = pkscan.simulate_population(**RUN)
    ctx = mp.get_context("spawn")
    done = ctx.Queue()
    pipes, procs = {}, []
    for r in range(1, size):
        here, there = ctx.Pipe()
        pipes[r] = here
        p = ctx.Process(target=other_rank, args=(r, size, there, done, kind))
        p.start()
        procs.append(p)
    split = pkscan.simulate_population(**RUN, exchange=kind(0, size, pipes))
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    assert sorted(done.get(timeout=10) for _ in procs) == [(r, True) for r in range(1, size)]
    for key in ("mean", "quantiles", "metrics", "parameters", "etas", "ids", "extra", "count"):
        np.testing.assert_array_equal(split[key], one[key], err_msg=key)
    assert split["exact"] == one["exact"] == [True, True]  # after passes of exact percentiles
    assert split["groups"].shape == (2, 1)


def test_a_bad_exchange_is_refused():
    class Bad(PipeExchange):
        def rank(self):
            return 2

    with pytest.raises(ValueError, match="0 <= rank < size"):
        pkscan.simulate_population(**RUN, exchange=Bad(0, 2, {}))
