"""Shared helpers of the pkscan Python tests.

Run by CTest (label `python`) with PYTHONPATH set to the folder of the built module, or by hand:

    PYTHONPATH=build/python /usr/bin/python3 -m pytest python/tests
"""

import os
import pathlib

import numpy as np
import pytest

SOURCE_DIR = pathlib.Path(
    os.environ.get("PKSCAN_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2])
)


def with_dv(rows, dv):
    """CSV text of dataset `rows` (a header and records whose 5th field is EVID and 6th DV) with
    the values `dv` written into the observation records (EVID 0), in order."""
    values = iter(dv)
    out = [rows[0]]
    for row in rows[1:]:
        f = row.split(",")
        if f[4] == "0":
            f[5] = repr(float(next(values)))
        out.append(",".join(f))
    return "\n".join(out) + "\n"


def bateman(t, dose, ka, ke):
    """Amount in central after an oral bolus `dose` at t = 0 into a depot (closed form)."""
    t = np.asarray(t, dtype=float)
    return np.where(
        t >= 0, dose * ka / (ka - ke) * (np.exp(-ke * t) - np.exp(-ka * t)), 0.0
    )


def expm_eig(a, t):
    """expm(A t) through NumPy's eigendecomposition (A with real, distinct eigenvalues)."""
    lam, v = np.linalg.eig(a)
    return np.real(v @ np.diag(np.exp(lam * t)) @ np.linalg.inv(v))


@pytest.fixture
def source_dir():
    return SOURCE_DIR


@pytest.fixture
def cli():
    path = os.environ.get("PKSCAN_CLI", str(SOURCE_DIR / "build" / "bin" / "pkscan"))
    if not os.path.exists(path):
        pytest.skip(f"pkscan command-line program not built ({path})")
    return path


def releases_gil(call, tries=10000):
    """True when `call` lets another Python thread run while it executes.

    The switch interval is raised to 1000 s, so the interpreter never hands the GIL to a waiting
    thread on its own: a second thread, parked on an event, can only run while `call` has
    released the GIL (or blocks). The event is set just before the first call; the thread then
    sets a flag. `call` is repeated until the flag is set (or `tries` calls were made).
    """
    import sys
    import threading

    go = threading.Event()
    ran = threading.Event()

    def worker():
        go.wait()
        ran.set()

    thread = threading.Thread(target=worker)
    old = sys.getswitchinterval()
    sys.setswitchinterval(1000.0)
    try:
        thread.start()  # returns once the worker holds no GIL: it waits on `go`
        go.set()
        for _ in range(tries):
            call()
            if ran.is_set():
                break
        return ran.is_set()
    finally:
        sys.setswitchinterval(old)
        go.set()
        thread.join()
