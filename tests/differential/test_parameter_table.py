"""The per-row parameter table (`STEM.parameters.csv`, HDF5 `/etas`) through `pkscan run`: the
etas recovered as draws from N(0, Omega) (means, variances and the covariance within 5 standard
errors of their expected values, n = 4000, fixed seed), every parameter recomputed from its
typical value, covariate effect and eta (NONMEM's P = THETA * (WT/70)^0.75 * EXP(ETA)), the
table holding what was simulated (the written CL and V give the written concentrations by the
closed form of an IV bolus), the sweep pairing the subjects, and the HDF5 file holding the same
values."""

import os
import subprocess

import numpy as np
import pytest

N = 4000
OMEGA = np.array([[0.09, 0.03, 0.0],
                  [0.03, 0.04, 0.0],
                  [0.0, 0.0, 0.16]])  # cl, v_central, ka
RUN = """model: two_compartment
time: {{dt: 1, steps: 4}}
subjects:
  population:
    count: {n}
    seed: 11
    typical: {{ka: 1.0, cl: 5.0, v_central: 20}}
    iiv: {{block: [cl, v_central, ka], omega: [0.09, 0.03, 0.04, 0, 0, 0.16]}}
    covariates:
      file: cov.csv
      effects:
        - {{parameter: cl, covariate: wt, type: power, coefficient: 0.75, reference: 70}}
{sweep}doses:
  - {{compartment: central, time: 0, amount: 100}}
output:
  path: {path}
{extra}"""


def run(tmp_path, n=N, sweep="", path="out.csv", extra="", replicates=1):
    wt = 50 + 40 * (np.arange(n) % 97) / 96
    (tmp_path / "cov.csv").write_text("wt\n" + "\n".join(f"{w!r}" for w in wt) + "\n")
    text = RUN.format(n=n, sweep=sweep, path=path, extra=extra)
    (tmp_path / "run.yaml").write_text(
        text.replace("seed: 11", f"seed: 11\n    replicates: {replicates}"))
    p = subprocess.run([os.environ["PKSCAN_CLI"], "run", "run.yaml", "--quiet"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=120, check=False)
    assert p.returncode == 0, p.stderr
    return wt


def read_csv(path):
    lines = path.read_text().splitlines()
    header = lines[0].split(",")
    rows = np.array([[float(x) for x in ln.split(",")] for ln in lines[1:]])
    return {name: rows[:, j] for j, name in enumerate(header)}, header


def test_etas_are_draws_of_omega_and_parameters_follow_from_them(tmp_path):
    wt = run(tmp_path)
    t, header = read_csv(tmp_path / "out.parameters.csv")
    assert header[0] == "id" and header[-3:] == ["eta_cl", "eta_v_central", "eta_ka"]
    # The columns the run gives, in the model's order (two_compartment: ka, ke, v_depot,
    # v_central, cl, then bioavailability and lag): ke is not given (cl is).
    assert "ke" not in header and header[1:4] == ["ka", "v_depot", "v_central"]
    np.testing.assert_array_equal(t["id"], np.arange(1, N + 1))
    eta = np.column_stack([t["eta_cl"], t["eta_v_central"], t["eta_ka"]])
    # Means: |mean| < 5 SE, SE = sqrt(omega_ii / n).
    se_mean = np.sqrt(np.diag(OMEGA) / N)
    assert np.all(np.abs(eta.mean(axis=0)) < 5 * se_mean), (eta.mean(axis=0), se_mean)
    # Covariances: SE of a sample covariance of normals, sqrt((s_ii s_jj + s_ij^2) / (n - 1)).
    cov = np.cov(eta, rowvar=False)
    se_cov = np.sqrt((np.outer(np.diag(OMEGA), np.diag(OMEGA)) + OMEGA ** 2) / (N - 1))
    assert np.all(np.abs(cov - OMEGA) < 5 * se_cov), (cov, se_cov)
    # Each parameter from its typical value, effect and eta.
    np.testing.assert_allclose(t["cl"], 5.0 * (wt / 70) ** 0.75 * np.exp(t["eta_cl"]), rtol=1e-13)
    np.testing.assert_allclose(t["v_central"], 20.0 * np.exp(t["eta_v_central"]), rtol=1e-13)
    np.testing.assert_allclose(t["ka"], 1.0 * np.exp(t["eta_ka"]), rtol=1e-13)
    # What was simulated: an IV bolus into central, C(t) = D / V exp(-CL / V t).
    traj, _ = read_csv(tmp_path / "out.csv")
    at4 = traj["time"] == 4
    want = 100 / t["v_central"] * np.exp(-t["cl"] / t["v_central"] * 4)
    np.testing.assert_allclose(traj["conc_central"][at4], want, rtol=1e-12)


def test_a_sweep_scales_the_typical_value_and_keeps_each_subjects_etas(tmp_path):
    # No summaries: one call simulates every replicate and sweep point (no group splits it).
    wt = run(tmp_path, n=300, sweep="sweep:\n  cl: [2, 8]\n", replicates=2)
    t, header = read_csv(tmp_path / "out.parameters.csv")
    # The replicate, the sweep point's cl, then the parameters.
    assert header[:4] == ["id", "replicate", "sweep_cl", "ka"]
    np.testing.assert_array_equal(t["replicate"], np.repeat([1.0, 2.0], 600))
    np.testing.assert_array_equal(t["sweep_cl"], np.tile(np.repeat([2.0, 8.0], 300), 2))
    parts = [slice(k * 300, (k + 1) * 300) for k in range(4)]  # (rep 1, 2), (rep 1, 8), ...
    for a, b in [(0, 1), (2, 3)]:  # a replicate's subjects keep their etas at every point
        np.testing.assert_array_equal(t["eta_cl"][parts[a]], t["eta_cl"][parts[b]])
    assert np.all(t["eta_cl"][parts[0]] != t["eta_cl"][parts[2]])  # replicates redraw
    for part, typical in zip(parts, [2.0, 8.0, 2.0, 8.0]):
        np.testing.assert_allclose(t["cl"][part],
                                   typical * (wt / 70) ** 0.75 * np.exp(t["eta_cl"][part]),
                                   rtol=1e-13)


def test_hdf5_holds_the_same_etas_and_parameters(tmp_path):
    h5py = pytest.importorskip("h5py")
    run(tmp_path, n=500)
    t, header = read_csv(tmp_path / "out.parameters.csv")
    run(tmp_path, n=500, path="out.h5")
    with h5py.File(tmp_path / "out.h5", "r") as f:
        cols = [c if isinstance(c, str) else c.decode() for c in f["etas"].attrs["columns"]]
        assert cols == ["eta_cl", "eta_v_central", "eta_ka"]
        for j, c in enumerate(cols):
            np.testing.assert_array_equal(f["etas"][:, j], t[c])
        names = [c if isinstance(c, str) else c.decode() for c in f["parameters"].attrs["columns"]]
        for name in header[1:-3]:
            np.testing.assert_array_equal(f["parameters"][:, names.index(name)], t[name])


def test_parameters_false_writes_no_table_and_removes_an_earlier_one(tmp_path):
    run(tmp_path, n=50)
    assert (tmp_path / "out.parameters.csv").exists()
    run(tmp_path, n=50, extra="  parameters: false\n")
    assert not (tmp_path / "out.parameters.csv").exists()
    assert (tmp_path / "out.csv").exists()
    # Summaries only: the table beside the summaries, the same values as with trajectories.
    run(tmp_path, n=50, extra="  trajectories: false\n")
    assert not (tmp_path / "out.csv").exists()
    only = (tmp_path / "out.parameters.csv").read_bytes()
    run(tmp_path, n=50)
    assert (tmp_path / "out.parameters.csv").read_bytes() == only
