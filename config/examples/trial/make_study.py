"""Writes study.csv: a two-arm study (30 subjects per arm; low: 100 mg, high: 2.5 mg/kg, each
once a day for two days) whose observations stand in for a real study's. They are simulated by
pkscan itself (study_truth.yaml: the design with its own seed and slightly different typical
values), then written as the DV column of the design. Run from this folder:
python3 make_study.py [path/to/pkscan]."""

import csv
import os
import random
import subprocess
import sys

PKSCAN = sys.argv[1] if len(sys.argv) > 1 else os.path.join("..", "..", "..", "build", "bin",
                                                            "pkscan")
TIMES = [0.5, 1, 2, 4, 8, 12, 24]

random.seed(20261128)
rows = []
for i in range(1, 61):
    arm = "low" if i <= 30 else "high"
    wt = round(random.uniform(45, 110), 1)
    for day in (0, 1):
        t0 = 24 * day
        amt = 100 if arm == "low" else round(2.5 * wt, 2)
        rows.append([i, t0, amt, 1, 1, ".", wt, day + 1, arm])
        rows += [[i, t0 + t, ".", 2, 0, ".", wt, day + 1, arm] for t in TIMES if t0 + t < 48]
with open("design_only.csv", "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["ID", "TIME", "AMT", "CMT", "EVID", "DV", "WT", "OCC", "ARM"])
    w.writerows(rows)
subprocess.run([PKSCAN, "run", "study_truth.yaml", "--quiet"], check=True)
with open("truth.csv") as f:
    dv = [r["dv"] for r in csv.DictReader(f)]
obs = iter(dv)
with open("study.csv", "w", newline="") as f:
    f.write("# A two-arm study: observations simulated by make_study.py (they stand in for a\n"
            "# real study's); ARM low: 100 mg, high: 2.5 mg/kg, daily for two days.\n")
    w = csv.writer(f)
    w.writerow(["ID", "TIME", "AMT", "CMT", "EVID", "DV", "WT", "OCC", "ARM"])
    for r in rows:
        if r[4] == 0:
            r[5] = f"{float(next(obs)):.4g}"
        w.writerow(r)
for name in ("design_only.csv", "truth.csv", "truth.parameters.csv"):
    os.remove(name)
