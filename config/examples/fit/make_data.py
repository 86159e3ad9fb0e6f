#!/usr/bin/python3
"""Makes the `pkscan fit` example: a NONMEM dataset simulated with known parameters and noise.

Run from anywhere with /usr/bin/python3 (NumPy); it rewrites dataset.csv and true_parameters.csv
next to this file. The simulation is independent of pkscan: the three-compartment oral model
(depot -> central <-> peripheral, elimination from central, clearance parameterization) is solved
with NumPy's eigendecomposition of the rate matrix, doses superposed.

12 subjects; parameters lognormal around ka = 1.5 /h, cl = 5 L/h, v_central = 20 L, q = 2 L/h,
v_peripheral = 50 L (SD 0.25 of log on each); 100 mg into the depot at 0 and 12 h; 20 samples of
the central concentration (mg/L) per subject; proportional error 10%: DV = C (1 + 0.1 eps),
eps ~ N(0, 1); seed 20240607.
"""
import os

import numpy as np

SEED = 20240607
SUBJECTS = 12
TYPICAL = {"ka": 1.5, "cl": 5.0, "v_central": 20.0, "q": 2.0, "v_peripheral": 50.0}
OMEGA = 0.25
DOSES = [(0.0, 100.0), (12.0, 100.0)]
TIMES = [0.25, 0.5, 0.75, 1, 1.5, 2, 3, 4, 6, 8, 10, 12.25, 12.5, 13, 14, 16, 24, 36, 48, 72]
SIGMA_PROP = 0.1


def concentrations(p, times):
    """Central concentration at `times` after DOSES into the depot (exact, superposition)."""
    ke, k12, k21 = p["cl"] / p["v_central"], p["q"] / p["v_central"], p["q"] / p["v_peripheral"]
    ka = p["ka"]
    a = np.array([[-ka, 0.0, 0.0], [ka, -(ke + k12), k21], [0.0, k12, -k21]])
    lam, v = np.linalg.eig(a)
    w = np.linalg.solve(v, np.array([1.0, 0.0, 0.0]))  # depot unit dose in eigen coordinates
    out = np.zeros(len(times))
    for td, amount in DOSES:
        for i, t in enumerate(times):
            if t >= td:
                x = (v @ (np.exp(lam * (t - td)) * w)).real * amount
                out[i] += x[1] / p["v_central"]
    return out


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    rng = np.random.default_rng(SEED)
    names = list(TYPICAL)
    rows = ["ID,TIME,AMT,CMT,EVID,DV"]
    truth = ["id," + ",".join(names)]
    for s in range(SUBJECTS):
        sid = 101 + s
        eta = rng.normal(0.0, OMEGA, len(names))
        p = {n: TYPICAL[n] * np.exp(e) for n, e in zip(names, eta)}
        c = concentrations(p, TIMES)
        dv = c * (1.0 + SIGMA_PROP * rng.normal(0.0, 1.0, len(TIMES)))
        events = [(td, f"{sid},{td:g},{amt:g},1,1,.") for td, amt in DOSES]
        events += [(t, f"{sid},{t:g},.,2,0,{y:.6g}") for t, y in zip(TIMES, dv)]
        events.sort(key=lambda e: e[0])  # stable: a dose before an observation at the same time
        rows += [e[1] for e in events]
        truth.append(f"{sid}," + ",".join(f"{p[n]:.17g}" for n in names))
    header = ("# Made by make_data.py (seed %d): three_compartment, 12 subjects, 100 mg oral at "
              "0 and 12 h,\n# 20 central samples each, 10%% proportional error; the true "
              "parameters are in true_parameters.csv.\n" % SEED)
    with open(os.path.join(here, "dataset.csv"), "w") as f:
        f.write(header + "\n".join(rows) + "\n")
    with open(os.path.join(here, "true_parameters.csv"), "w") as f:
        f.write("\n".join(truth) + "\n")


if __name__ == "__main__":
    main()
