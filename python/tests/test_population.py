"""pkscan.simulate_population (the library's population driver, no run file) against closed
forms: an IV bolus into the central compartment of `two_compartment` (one-compartment
disposition) has C(t) = D / V exp(-CL / V t)."""

import os
import subprocess

import numpy as np
import pytest

import pkscan

DOSE = [{"compartment": "central", "time": 0, "amount": 100.0}]
TYPICAL = {"ka": 1.0, "cl": 5.0, "v_central": 20.0}


def conc(t, cl, v=20.0, dose=100.0):
    return dose / v * np.exp(-cl / v * t)


def test_percentiles_follow_the_lognormal_clearance():
    # CL = 5 exp(eta), eta ~ N(0, 0.09): C(t) decreases with CL, so its p-th percentile is
    # C at CL's (100 - p)-th percentile, 5 exp(z_(1-p) 0.3).
    r = pkscan.simulate_population("two_compartment", TYPICAL, DOSE, dt=0.25, steps=96,
                                   count=20000, seed=3, iiv={"cl": 0.09},
                                   percentiles=[5, 50, 95])
    assert r["count"] == 20000 and r["excluded"] == 0
    assert r["compartments"] == ["depot", "central"]
    assert r["quantiles"].shape == (97, 2, 3) and r["mean"].shape == (97, 2)
    z = {5: 1.6448536, 50: 0.0, 95: -1.6448536}
    for i in (8, 20, 40, 96):  # t = 2, 5, 10, 24
        t = r["times"][i]
        for k, p in enumerate((5, 50, 95)):
            want = conc(t, 5.0 * np.exp(z[p] * 0.3))
            np.testing.assert_allclose(r["quantiles"][i, 1, k], want, rtol=0.03,
                                       err_msg=f"p{p} at t={t}")
    # The mean of D/V exp(-ke t) over lognormal ke, by quadrature over eta.
    eta = np.linspace(-8, 8, 4001) * 0.3
    w = np.exp(-0.5 * (eta / 0.3) ** 2)
    w /= w.sum()
    t = r["times"][40]
    np.testing.assert_allclose(r["mean"][40, 1], np.sum(w * conc(t, 5.0 * np.exp(eta))),
                               rtol=0.01)


def test_sweep_without_variability_gives_closed_form_metrics():
    # No iiv: every subject is the typical one at each sweep point (swept CL = the typical CL).
    r = pkscan.simulate_population("two_compartment", TYPICAL, DOSE, dt=0.25, steps=96, count=3,
                                   sweep={"cl": [2.0, 8.0]})
    assert r["extra_columns"] == ["cl"]
    np.testing.assert_array_equal(r["extra"][:, 0], [2, 2, 2, 8, 8, 8])
    np.testing.assert_array_equal(r["ids"], [1, 2, 3, 4, 5, 6])
    assert r["metric_names"] == ["cmax", "tmax", "auc", "cmin"]
    t_end = 24.0
    for row, cl in enumerate([2, 2, 2, 8, 8, 8]):
        cmax, tmax, auc, cmin = r["metrics"][row]
        ke = cl / 20.0
        assert cmax == pytest.approx(5.0, rel=1e-12) and tmax == 0.0
        # The log-down trapezoid is exact for a single exponential.
        assert auc == pytest.approx(5.0 / ke * (1 - np.exp(-ke * t_end)), rel=1e-9)
        assert cmin == pytest.approx(conc(t_end, cl), rel=1e-9)
    assert r["ok"].all()


def test_replicates_redraw_and_sweep_points_pair_the_subjects():
    r = pkscan.simulate_population("two_compartment", TYPICAL, DOSE, dt=0.5, steps=10, count=4,
                                   seed=11, iiv={"cl": 0.09, "v_central": 0.04}, replicates=2,
                                   sweep={"ka": [0.5, 2.0]}, trajectories=True)
    assert r["extra_columns"] == ["replicate", "ka"]
    rows = 2 * 2 * 4
    assert r["parameters"].shape[0] == rows and r["amounts"].shape == (rows, 11, 2)
    names = pkscan.Model("two_compartment").parameters
    cl, v = names.index("cl"), names.index("v_central")
    p = r["parameters"]
    # Rows: replicate, then sweep point, then subject. The same subject at both sweep points has
    # the same draws (paired); another replicate draws anew.
    np.testing.assert_array_equal(p[0:4, cl], p[4:8, cl])
    np.testing.assert_array_equal(p[0:4, v], p[4:8, v])
    assert not np.array_equal(p[0:4, cl], p[8:12, cl])
    np.testing.assert_array_equal(r["extra"][:, 0], [1] * 8 + [2] * 8)
    np.testing.assert_array_equal(r["ids"], list(range(1, 9)) * 2)
    # Amounts against the closed form with each row's own CL and V.
    t = 0.5 * np.arange(11)
    for row in range(rows):
        np.testing.assert_allclose(r["amounts"][row, :, 1] / p[row, v], conc(t, p[row, cl],
                                   p[row, v]), rtol=1e-10)


def test_summaries_by_group_are_numpys_over_each_groups_rows():
    # summary_by=["replicate", "ka"]: 4 groups of 300 rows; numpy.percentile (type 7) and the
    # mean of each group's concentrations, from the amounts the same call returns.
    r = pkscan.simulate_population("two_compartment", TYPICAL, DOSE, dt=0.5, steps=12,
                                   count=300, seed=5, iiv={"cl": 0.09, "v_central": 0.04},
                                   replicates=2, sweep={"ka": [0.5, 2.0], "cl": [4.0, 6.0]},
                                   summary_by=["ka", "replicate"], trajectories=True)
    assert r["summary_columns"] == ["replicate", "ka"]
    np.testing.assert_array_equal(r["groups"], [[1, 0.5], [1, 2], [2, 0.5], [2, 2]])
    assert r["mean"].shape == (4, 13, 2) and r["quantiles"].shape == (4, 13, 2, 3)
    np.testing.assert_array_equal(r["count"], [600] * 4)
    volume = r["parameters"][:, pkscan.Model("two_compartment").parameters.index("v_central")]
    conc = r["amounts"][:, :, 1] / volume[:, None]
    rep, ka = r["extra"][:, 0], r["extra"][:, 1]
    for g, (gr, gk) in enumerate(r["groups"]):
        rows = conc[(rep == gr) & (ka == gk)]
        np.testing.assert_allclose(r["mean"][g, :, 1], rows.mean(axis=0), rtol=1e-12)
        np.testing.assert_allclose(r["quantiles"][g, :, 1, :],
                                   np.percentile(rows, [5, 50, 95], axis=0).T, rtol=1e-12)
    # summary_by=[] pools every row; None (the default) gives one summary per sweep point.
    pooled = pkscan.simulate_population("two_compartment", TYPICAL, DOSE, dt=0.5, steps=12,
                                        count=300, seed=5, iiv={"cl": 0.09, "v_central": 0.04},
                                        replicates=2, sweep={"ka": [0.5, 2.0], "cl": [4.0, 6.0]},
                                        summary_by=[])
    assert "groups" not in pooled and pooled["mean"].shape == (13, 2) and pooled["count"] == 2400
    np.testing.assert_allclose(pooled["mean"][:, 1], conc.mean(axis=0), rtol=1e-12)
    default = pkscan.simulate_population("two_compartment", TYPICAL, DOSE, dt=0.5, steps=12,
                                         count=300, seed=5, replicates=2,
                                         sweep={"ka": [0.5, 2.0], "cl": [4.0, 6.0]})
    assert default["summary_columns"] == ["ka", "cl"] and default["mean"].shape == (4, 13, 2)
    with pytest.raises(ValueError, match="summary_by"):
        pkscan.simulate_population("two_compartment", TYPICAL, DOSE, dt=0.5, steps=12, count=3,
                                   sweep={"ka": [0.5, 2.0]}, summary_by=["cl"])


def test_percentiles_stay_exact_beyond_the_summary_budget():
    # 25000 subjects x 97 times x 2 compartments = 4.85e6 values, above the 4e6 values kept
    # in memory: the rows are simulated again until every percentile is numpy's; exact=False
    # keeps the sketch's estimates and says so.
    args = dict(dt=0.25, steps=96, count=25000, seed=8, iiv={"cl": 0.09, "v_central": 0.04},
                percentiles=[5, 50, 95], trajectories=True)
    r = pkscan.simulate_population("two_compartment", TYPICAL, DOSE, **args)
    assert r["exact"] is True
    volume = r["parameters"][:, pkscan.Model("two_compartment").parameters.index("v_central")]
    want = np.percentile(r["amounts"][:, :, 1] / volume[:, None], [5, 50, 95], axis=0).T
    np.testing.assert_allclose(r["quantiles"][:, 1, :], want, rtol=1e-12)
    e = pkscan.simulate_population("two_compartment", TYPICAL, DOSE, exact=False, **args)
    assert e["exact"] is False
    assert np.max(np.abs(e["quantiles"][1:, 1, :] / want[1:] - 1)) > 1e-9


def test_residual_error_gives_the_run_files_observations(tmp_path):
    # The same run as a run file: the same bits; and DV - IPRED ~ N(0, 0.5^2) within 5 SE
    # (n = 2000 observations: SE of the mean 0.5 / sqrt(n), of the variance 0.25 sqrt(2 / n)).
    r = pkscan.simulate_population("two_compartment", TYPICAL, DOSE, dt=1, steps=4, count=500,
                                   seed=3, iiv={"cl": 0.09}, trajectories=True, times=[1, 2, 3, 4],
                                   residual={"additive": 0.5}, lloq=2.5)
    assert r["dv"].shape == (500, 4) and r["blq"].dtype == np.int8
    e = (r["dv"] - r["ipred"]).ravel()
    assert abs(e.mean()) < 5 * 0.5 / np.sqrt(e.size)
    assert abs(e.var(ddof=1) - 0.25) < 5 * 0.25 * np.sqrt(2 / (e.size - 1))
    np.testing.assert_array_equal(r["blq"], (r["dv"] < 2.5).astype(np.int8))
    cli = os.environ.get("PKSCAN_CLI")
    if cli is None:
        pytest.skip("PKSCAN_CLI is not set")
    (tmp_path / "run.yaml").write_text(
        "model: two_compartment\ntime: {dt: 1, steps: 4}\nsubjects:\n  population:\n"
        "    count: 500\n    seed: 3\n    typical: {ka: 1.0, cl: 5.0, v_central: 20.0}\n"
        "    iiv: {cl: 0.09}\n    residual: {additive: 0.5}\n    lloq: 2.5\n"
        "doses:\n  - {compartment: central, time: 0, amount: 100}\n"
        "output: {path: out.csv, times: [1, 2, 3, 4]}\n")
    subprocess.run([cli, "run", "run.yaml", "--quiet"], cwd=tmp_path, check=True)
    table = np.genfromtxt(tmp_path / "out.csv", delimiter=",", names=True)
    np.testing.assert_array_equal(table["dv"], r["dv"].ravel())
    np.testing.assert_array_equal(table["ipred"], r["ipred"].ravel())
    np.testing.assert_array_equal(table["blq"], r["blq"].ravel())


def test_the_same_run_as_the_run_file_gives_the_same_summary(tmp_path):
    cli = os.environ.get("PKSCAN_CLI")
    if not cli:
        pytest.skip("PKSCAN_CLI is not set")
    run = tmp_path / "pop.yaml"
    run.write_text("""model: two_compartment
time: {dt: 0.25, steps: 96}
subjects:
  population:
    count: 3000
    seed: 5
    typical: {ka: 1.0, cl: 5.0, v_central: 20}
    iiv: {cl: 0.09}
doses:
  - {compartment: central, time: 0, amount: 100}
output:
  trajectories: false
  summaries: {percentiles: [10, 50, 90]}
""")
    out = tmp_path / "pop.csv"
    subprocess.run([cli, "run", str(run), "--output", str(out), "--quiet"], check=True)
    table = np.genfromtxt(tmp_path / "pop.summary.csv", delimiter=",", names=True)
    r = pkscan.simulate_population("two_compartment", TYPICAL, DOSE, dt=0.25, steps=96,
                                   count=3000, seed=5, iiv={"cl": 0.09},
                                   percentiles=[10, 50, 90])
    np.testing.assert_allclose(table["mean_conc_central"], r["mean"][:, 1], rtol=1e-15)
    np.testing.assert_allclose(table["p50_conc_central"], r["quantiles"][:, 1, 1], rtol=1e-15)
    metrics = np.genfromtxt(tmp_path / "pop.metrics.csv", delimiter=",", names=True)
    np.testing.assert_allclose(metrics["auc"], r["metrics"][:, 2], rtol=1e-15)


def test_bad_input_is_a_value_error():
    with pytest.raises(ValueError, match="iiv"):
        pkscan.simulate_population("two_compartment", TYPICAL, DOSE, dt=0.25, steps=8, count=2,
                                   iiv=[0.1])
    with pytest.raises(ValueError):
        pkscan.simulate_population("two_compartment", TYPICAL, DOSE, dt=0.25, steps=8, count=2,
                                   sweep={"no_such_parameter": [1.0]})
    with pytest.raises(ValueError, match="typical"):
        pkscan.simulate_population("two_compartment", {"cl": [1.0, 2.0]}, DOSE, dt=0.25,
                                   steps=8, count=2)


def test_sizes_are_checked_before_anything_is_held():
    """Every size is checked before allocating: too large to hold is a MemoryError saying how
    much the call needs (the library's limit: 80% of the memory available), an invalid size a
    ValueError; never the kernel's OOM killer."""
    run = dict(model="two_compartment", typical=TYPICAL, doses=DOSE, dt=0.25)
    for kwargs in [dict(steps=8, count=10**12), dict(steps=8, count=10**6, replicates=10**9),
                   dict(steps=8, count=10**6, sweep={"cl": [1.0] * 10**7}),
                   # 1e5 sweep points, each its own summary of 2002 values: ~3 TiB kept at once
                   dict(steps=1000, count=10, sweep={"cl": [1 + i / 1e5 for i in range(10**5)]}),
                   dict(steps=10**8, count=10),  # the per-time summaries of 1e8 times
                   dict(steps=10**5, count=10**8, trajectories=True)]:
        with pytest.raises(MemoryError, match=r"simulate_population: .* need [0-9.e+]+ GiB, "
                                              r"but only [0-9.e+]+ GiB are available"):
            pkscan.simulate_population(**run, **kwargs)
    for kwargs, what in [(dict(steps=8, count=0), "count"), (dict(steps=8, count=-10**12), "count"),
                         (dict(steps=8, count=2, replicates=0), "replicates"),
                         (dict(steps=10**12, count=2), "steps"), (dict(steps=-1, count=2), "steps")]:
        with pytest.raises(ValueError, match=what):
            pkscan.simulate_population(**run, **kwargs)
    # A run that fits still runs, with every table whole.
    out = pkscan.simulate_population(**run, steps=8, count=3000, replicates=2, trajectories=True)
    assert out["ids"].shape == (6000,) and out["amounts"].shape == (6000, 9, 2)
    np.testing.assert_allclose(out["amounts"][5999, :, 1], 20.0 * conc(0.25 * np.arange(9), 5.0),
                               rtol=1e-12)
