"""Exact percentiles at any size through `pkscan run`: runs whose summary groups hold more values
than the exact budget (4e6 values shared by the groups kept at once) have the percentiles that
NumPy computes from the trajectories the same run writes (numpy.percentile's default, type 7),
to 1e-12: the run simulates the rows of such a group again once the group is complete and
collects the values around each percentile. `output.summaries.exact: false` keeps the sketch's
estimates and says so in the CSV's `exact` column."""

import os
import subprocess

import numpy as np
import pytest

h5py = pytest.importorskip("h5py")

# 5000 subjects x 2 replicates x 3 sweep points, 97 output times, 2 compartments: 5.8e6 values.
# Grouped by sweep point (replicates pooled, 3 groups kept at once): 1.94e6 values per group,
# above its share of the budget (4e6 / 3), so the first pass gives the sketch's estimates.
RUN = """model: two_compartment
time: {{dt: 0.5, steps: 96}}
subjects:
  population:
    count: 5000
    seed: 11
    replicates: 2
    typical: {{ka: 1.0, cl: 5.0, v_central: 20}}
    iiv: {{ka: 0.3, cl: 0.09, v_central: 0.04}}
sweep:
  {sweep}
doses:
  - {{compartment: depot, time: 0, amount: 100, every: 12, repeat: 3}}
output:
  path: {path}
  trajectories: {trajectories}
  summaries: {summaries}
"""
PERCENTILES = [5, 50, 95]


def run(tmp_path, path, summaries="true", trajectories="true", sweep="ka: [0.5, 1.0, 2.0]"):
    (tmp_path / "run.yaml").write_text(RUN.format(path=path, summaries=summaries,
                                                  trajectories=trajectories, sweep=sweep))
    p = subprocess.run([os.environ["PKSCAN_CLI"], "run", "run.yaml", "--quiet"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=600, check=False)
    assert p.returncode == 0, p.stderr


def numpy_summary(f):
    """{group values: percentiles [T, C, Q]} of the HDF5 result's concentrations."""
    conc = f["concentration"][...]
    extra = f["extra"][...]
    cols = [c if isinstance(c, str) else c.decode() for c in f["extra"].attrs["columns"]]
    keys = [c if isinstance(c, str) else c.decode()
            for c in f["summary"]["groups"].attrs["columns"]]
    at = [cols.index(k) for k in keys]
    out = {}
    for g in f["summary"]["groups"][...]:
        sel = np.all(extra[:, at] == g, axis=1)
        out[tuple(g)] = (int(sel.sum()),
                         np.percentile(conc[sel], PERCENTILES, axis=0).transpose(1, 2, 0))
    return out


def check_exact(f, groups):
    s = f["summary"]
    assert s.attrs["exact"] == 1
    want = numpy_summary(f)
    assert len(want) == groups
    worst = 0.0
    for g, q in zip(s["groups"][...], s["quantiles"][...]):
        count, expected = want[tuple(g)]
        assert count == 10000 if groups == 3 else count == 5000
        np.testing.assert_allclose(q, expected, rtol=1e-12, atol=1e-300)
        worst = max(worst, float(np.max(np.abs(q - expected) / np.maximum(np.abs(expected),
                                                                       1e-300))))
    return worst


def test_percentiles_beyond_the_budget_are_numpys(tmp_path):
    run(tmp_path, "out.h5")
    with h5py.File(tmp_path / "out.h5", "r") as f:
        check_exact(f, groups=3)
        exact = f["summary"]["quantiles"][...]
    # The summaries-only run (the fused path on its first pass) writes the same values, and the
    # CSV has no `exact` column: every percentile is exact.
    run(tmp_path, "out.csv", trajectories="false")
    lines = (tmp_path / "out.summary.csv").read_text().splitlines()
    header = lines[0].split(",")
    assert header[-1] != "exact"
    table = np.array([[float(x) for x in ln.split(",")] for ln in lines[1:]])
    assert table.shape == (3 * 97, len(header))
    q = table[:, [header.index(f"p{p}_conc_{c}") for p in PERCENTILES
                  for c in ("depot", "central")]]
    np.testing.assert_allclose(q.reshape(3, 97, 3, 2).transpose(0, 1, 3, 2), exact,
                               rtol=1e-15, atol=0)


def test_without_exact_the_estimates_stay_and_the_csv_says_so(tmp_path):
    run(tmp_path, "out.h5", summaries="{exact: false}")
    with h5py.File(tmp_path / "out.h5", "r") as f:
        assert f["summary"].attrs["exact"] == 0
        want = numpy_summary(f)
        rel = max(float(np.max(np.abs(q - want[tuple(g)][1]) /
                               np.maximum(np.abs(want[tuple(g)][1]), 1e-300)))
                  for g, q in zip(f["summary"]["groups"][...], f["summary"]["quantiles"][...]))
    # The estimates are not the exact percentiles (the sketch's bound is tested in
    # tests/summary/summary_test.cpp).
    assert rel > 1e-9, rel
    run(tmp_path, "out.csv", summaries="{exact: false}", trajectories="false")
    lines = (tmp_path / "out.summary.csv").read_text().splitlines()
    assert lines[0].split(",")[-1] == "exact"
    assert {ln.split(",")[-1] for ln in lines[1:]} == {"0"}


def test_groups_by_replicate_and_dose_sweep_points(tmp_path):
    # A replicate's groups are made exact when the replicate is complete; the rows of a dose
    # sweep point are simulated again with that point's doses. 6 groups of 8000 subjects, a
    # replicate's 3 kept at once: 97 x 2 x 8000 = 1.55e6 values each, above 4e6 / 3.
    text = RUN.replace("count: 5000", "count: 8000")
    (tmp_path / "run.yaml").write_text(text.format(
        path="out.h5", summaries="{by: [replicate, dose1_amount]}", trajectories="true",
        sweep="doses[1].amount: [50, 100, 200]"))
    p = subprocess.run([os.environ["PKSCAN_CLI"], "run", "run.yaml", "--quiet"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=600, check=False)
    assert p.returncode == 0, p.stderr
    with h5py.File(tmp_path / "out.h5", "r") as f:
        s = f["summary"]
        assert s.attrs["exact"] == 1
        assert s["groups"].shape == (6, 2)
        want = numpy_summary(f)
        assert [count for count, _ in want.values()] == [8000] * 6
        for g, q in zip(s["groups"][...], s["quantiles"][...]):
            np.testing.assert_allclose(q, want[tuple(g)][1], rtol=1e-12, atol=1e-300)


@pytest.mark.parametrize("value", ["maybe", "1", "[true]"])
def test_a_bad_exact_value_is_one_line(tmp_path, value):
    (tmp_path / "run.yaml").write_text(RUN.format(path="out.csv", summaries="{exact: %s}" % value,
                                                  trajectories="false",
                                                  sweep="ka: [0.5, 1.0, 2.0]"))
    p = subprocess.run([os.environ["PKSCAN_CLI"], "run", "run.yaml", "--quiet"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=60, check=False)
    assert p.returncode == 2, p.stderr
    assert "output.summaries.exact must be true or false" in p.stderr
    assert "run.yaml:17:" in p.stderr and p.stderr.count("\n") == 1, p.stderr
    assert sorted(f.name for f in tmp_path.iterdir()) == ["run.yaml"]
