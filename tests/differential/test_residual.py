"""Simulated observations of population runs (`subjects.population.residual`, `lloq`) through
`pkscan run`, as statistics: with fixed seeds and n = 4000 observations per check, the
residuals DV - IPRED (additive), DV / IPRED - 1 (proportional), log(DV / IPRED) (exponential)
and the combined error's standardised residual have the mean and variance of their normal
distribution within 5 standard errors (SE of a mean sqrt(var / n), of a variance
var sqrt(2 / (n - 1))); the BLQ flags are DV < LLOQ and their count is within 5 binomial SEs of
the sum of the normal probabilities; IPRED is the written concentration; the errors of a
subject are the same at every sweep point and for any thread count; `variances: true` reads
NONMEM's $SIGMA; the HDF5 file holds the same values; bad combinations are one-line errors."""

import os
import subprocess

import numpy as np
import pytest
from scipy.stats import norm

RUN = """model: two_compartment
time: {{dt: 1, steps: 8}}
subjects:
  population:
    count: 500
    seed: 3
    typical: {{ka: 1.0, cl: 5.0, v_central: 20}}
    iiv: {{cl: 0.09}}
    residual: {residual}
{more}doses:
  - {{compartment: central, time: 0, amount: 100}}
output:
  path: {path}
  times: [1, 2, 3, 4, 5, 6, 7, 8]
{output}"""


def run(tmp_path, residual, more="", path="out.csv", output="", args=(), expect=0):
    (tmp_path / "run.yaml").write_text(
        RUN.format(residual=residual, more=more, path=path, output=output))
    p = subprocess.run([os.environ["PKSCAN_CLI"], "run", "run.yaml", "--quiet", *args],
                       cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
    assert p.returncode == expect, p.stderr
    return p.stderr


def table(tmp_path, name="out.csv"):
    lines = (tmp_path / name).read_text().splitlines()
    header = lines[0].split(",")
    rows = np.array([[float(x) for x in ln.split(",")] for ln in lines[1:]])
    return {h: rows[:, j] for j, h in enumerate(header)}, header


def within(sample, mean, var, k=5.0):
    n = len(sample)
    assert abs(sample.mean() - mean) < k * np.sqrt(var / n), (sample.mean(), mean, var, n)
    assert abs(sample.var(ddof=1) - var) < k * var * np.sqrt(2 / (n - 1)), (sample.var(), var)


def test_additive_error(tmp_path):
    run(tmp_path, "{additive: 0.5}")
    t, header = table(tmp_path)
    assert header[-2:] == ["ipred", "dv"]
    np.testing.assert_array_equal(t["ipred"], t["conc_central"])
    within(t["dv"] - t["ipred"], 0.0, 0.25)


def test_proportional_error_scales_with_ipred(tmp_path):
    run(tmp_path, "{proportional: 0.2}")
    t, _ = table(tmp_path)
    within(t["dv"] / t["ipred"] - 1.0, 0.0, 0.04)
    # The absolute error grows with IPRED: each half of the observations by IPRED has its own
    # variance, 0.04 IPRED^2 on average.
    high = t["ipred"] > np.median(t["ipred"])
    for part in (high, ~high):
        r = t["dv"][part] - t["ipred"][part]
        within(r / t["ipred"][part], 0.0, 0.04)


def test_combined_error_is_nonmems_y_equals_ipred_plus_ipred_eps1_plus_eps2(tmp_path):
    run(tmp_path, "{additive: 0.1, proportional: 0.15}")
    t, _ = table(tmp_path)
    sd = np.sqrt(0.1 ** 2 + (0.15 * t["ipred"]) ** 2)
    within((t["dv"] - t["ipred"]) / sd, 0.0, 1.0)


def test_exponential_error_is_lognormal(tmp_path):
    run(tmp_path, "{exponential: 0.3}")
    t, _ = table(tmp_path)
    assert np.all(t["dv"] > 0)
    within(np.log(t["dv"] / t["ipred"]), 0.0, 0.09)


def test_blq_flags_dv_below_the_lloq(tmp_path):
    run(tmp_path, "{additive: 0.5}", more="    lloq: 2.5\n")
    t, header = table(tmp_path)
    assert header[-3:] == ["ipred", "dv", "blq"]
    np.testing.assert_array_equal(t["blq"], (t["dv"] < 2.5).astype(float))
    p = norm.cdf((2.5 - t["ipred"]) / 0.5)
    assert 0.1 < p.mean() < 0.9  # a real mix of both
    assert abs(t["blq"].sum() - p.sum()) < 5 * np.sqrt(np.sum(p * (1 - p)))


def test_errors_repeat_at_every_sweep_point_and_for_any_thread_count(tmp_path):
    more = "sweep:\n  cl: [3, 6]\n"
    run(tmp_path, "{additive: 0.5}", more=more)
    one = (tmp_path / "out.csv").read_bytes()
    run(tmp_path, "{additive: 0.5}", more=more, args=("--threads", "1"))
    assert (tmp_path / "out.csv").read_bytes() == one
    t, _ = table(tmp_path)
    e = t["dv"] - t["ipred"]
    half = len(e) // 2
    np.testing.assert_allclose(e[:half], e[half:], atol=1e-12)
    # NONMEM's $SIGMA: variances.
    run(tmp_path, "{additive: 0.25, variances: true}", more=more)
    assert (tmp_path / "out.csv").read_bytes() == one


def test_hdf5_holds_ipred_dv_and_blq(tmp_path):
    h5py = pytest.importorskip("h5py")
    run(tmp_path, "{additive: 0.5}", more="    lloq: 2.5\n")
    t, _ = table(tmp_path)
    run(tmp_path, "{additive: 0.5}", more="    lloq: 2.5\n", path="out.h5")
    with h5py.File(tmp_path / "out.h5", "r") as f:
        assert f["dv"].shape == (500, 8) and f["blq"].dtype == np.int8
        np.testing.assert_array_equal(f["ipred"][...].ravel(), t["ipred"])
        np.testing.assert_array_equal(f["dv"][...].ravel(), t["dv"])
        np.testing.assert_array_equal(f["blq"][...].ravel(), t["blq"])


@pytest.mark.parametrize("residual,more,output,words", [
    ("{additive: 0.1, exponential: 0.2}", "", "", ["run.yaml:9:", "cannot be combined"]),
    ("{additive: 0.1}", "", "  trajectories: false\n", ["run.yaml:9:", "needs trajectories"]),
    ("{additive: -1}", "", "", ["run.yaml:9:", "additive", ">= 0"]),
    ("{}", "", "", ["run.yaml:9:", "needs additive, proportional or exponential"]),
])
def test_bad_residual_errors_are_one_line(tmp_path, residual, more, output, words):
    err = run(tmp_path, residual, more=more, output=output, expect=2)
    assert err.count("\n") == 1 and all(w in err for w in words), err
    assert sorted(f.name for f in tmp_path.iterdir()) == ["run.yaml"]
