"""pkscan.simulate_design (design simulations, NONMEM's $SIM, without a run file) against
independent answers:

- without variability, every replicate is pkscan.simulate_dataset with the typical values, bit
  for bit;
- every parameter of the table recomputed with NumPy from the etas, the kappas and the dataset's
  WT column (typical * (WT / 70)^0.75 * exp(eta + kappa), relative 1e-13; WT changes between the
  occasions, so the table's row of an occasion is at that occasion's WT);
- etas and kappas as draws of their covariances, within K = 5 standard errors: for n draws with
  variance var, the SE of the mean is sqrt(var / n), of a variance var * sqrt(2 / (n - 1)), of a
  covariance sqrt((var_1 var_2 + cov^2) / (n - 1)), and of a correlation (true value 0)
  1 / sqrt(n); the simulated observations' standardised residual as N(0, 1) the same way;
- the same numbers as `pkscan run` on the equivalent run file (the CSV it writes);
- bad input is a ValueError with a one-line message, a run too large to hold a MemoryError.
"""

import os
import subprocess

import numpy as np
import pytest

import pkscan

K = 5.0  # tolerance of the statistical checks, in standard errors
N = 1000  # subjects of the design
TIMES = [0.5, 1, 2, 4, 8, 12]  # observation times after each dose
TYPICAL = {"ka": 1.0, "cl": 5.0, "v_central": 20.0, "q": 8.0, "v_peripheral": 70.0}
IIV = {"cl": 0.09, "v_central": 0.04}
IOV = {"occasion": "OCC", "variances": {"cl": 0.0225}}
EFFECTS = [{"parameter": "cl", "covariate": "WT", "type": "power", "coefficient": 0.75,
            "reference": 70}]
RESIDUAL = {"additive": 0.05, "proportional": 0.1}


def design_text(n=N, lloq=None):
    """Subjects with a dose at 0 (occasion 1) and at 24 (occasion 2), observed in central after
    each; the weight changes by +5 kg at the second occasion. Optionally an LLOQ column."""
    rng = np.random.default_rng(7)
    lines = ["ID,TIME,AMT,CMT,EVID,DV,WT,OCC" + (",LLOQ" if lloq else "")]
    extra = f",{lloq}" if lloq else ""
    for i in range(1, n + 1):
        wt = round(float(rng.uniform(50, 100)), 1)
        for occ, t0, w in ((1, 0, wt), (2, 24, wt + 5)):
            lines.append(f"{i},{t0},100,1,1,.,{w},{occ}{extra}")
            lines += [f"{i},{t0 + t},.,2,0,.,{w},{occ}{extra}" for t in TIMES]
    return "\n".join(lines) + "\n"


def columns(text):
    """The design's columns, read with NumPy ('.' is NaN)."""
    return np.genfromtxt(text.splitlines(), delimiter=",", names=True, missing_values=".")


def mean_and_variance_errors(x, var):
    """|mean| and |sample variance - var| of x in standard errors (true mean 0)."""
    n = len(x)
    return (abs(x.mean()) / np.sqrt(var / n),
            abs(x.var(ddof=1) - var) / (var * np.sqrt(2 / (n - 1))))


@pytest.fixture(scope="module")
def design():
    text = design_text()
    data = pkscan.parse_dataset(text, "three_compartment")
    r = pkscan.simulate_design(data, TYPICAL, iiv=IIV, iov=IOV, effects=EFFECTS,
                               residual=RESIDUAL, lloq=0.5, seed=11, replicates=2)
    return text, data, r


def test_without_variability_each_replicate_is_the_dataset_run_bit_for_bit():
    data = pkscan.parse_dataset(design_text(n=40), "three_compartment")
    r = pkscan.simulate_design(data, TYPICAL, replicates=2)
    want = pkscan.simulate_dataset(data, parameters=TYPICAL)
    rows = len(want["time"])
    assert rows == 40 * 12 and len(r["time"]) == 2 * rows
    np.testing.assert_array_equal(r["replicate"], np.repeat([1, 2], rows))
    for rep in range(2):
        part = slice(rep * rows, (rep + 1) * rows)
        for key in ["subject", "record", "time", "compartment", "amounts", "concentrations"]:
            np.testing.assert_array_equal(r[key][part], want[key], err_msg=key)
        np.testing.assert_array_equal(r["ipred"][part], want["prediction"])
    assert "dv" not in r and "blq" not in r
    assert r["ids"] == want["ids"] and r["ok"].shape == (2, 40) and r["ok"].all()
    # The table: every subject at the typical values (the model's defaults elsewhere).
    defaults = pkscan.Model("three_compartment").defaults
    assert set(TYPICAL) <= set(r["parameter_names"])
    for j, name in enumerate(r["parameter_names"]):
        assert np.all(r["parameters"][:, j] == TYPICAL.get(name, defaults[name])), name
    assert r["etas"].shape == (80, 0) and r["kappas"].shape == (80, 0)
    assert "table_occasion" not in r


def test_parameters_recomputed_from_etas_kappas_and_weight(design):
    text, data, r = design
    cols = columns(text)
    # WT at each (subject, occasion): the occasion's first record.
    wt = {}
    for s, occ, w in zip(cols["ID"].astype(int) - 1, cols["OCC"].astype(int), cols["WT"]):
        wt.setdefault((s, occ), w)
    rows = len(r["table_subject"])
    assert rows == 2 * N * 2  # replicates x subjects x occasions
    np.testing.assert_array_equal(r["table_replicate"], np.repeat([1, 2], 2 * N))
    np.testing.assert_array_equal(r["table_subject"], np.tile(np.repeat(np.arange(N), 2), 2))
    np.testing.assert_array_equal(r["table_occasion"], np.tile([1.0, 2.0], 2 * N))
    w = np.array([wt[(s, int(o))] for s, o in zip(r["table_subject"], r["table_occasion"])])
    assert r["eta_columns"] == ["eta_cl", "eta_v_central"] and r["iov_columns"] == ["iov_cl"]
    p = dict(zip(r["parameter_names"], r["parameters"].T))
    eta_cl, eta_v = r["etas"].T
    cl = 5.0 * (w / 70.0) ** 0.75 * np.exp(eta_cl + r["kappas"][:, 0])
    np.testing.assert_allclose(p["cl"], cl, rtol=1e-13)
    np.testing.assert_allclose(p["v_central"], 20.0 * np.exp(eta_v), rtol=1e-13)
    assert np.all(p["ka"] == 1.0) and np.all(p["q"] == 8.0) and np.all(p["v_peripheral"] == 70.0)
    # A subject's etas are the same at both occasions; its kappas differ.
    np.testing.assert_array_equal(r["etas"][0::2], r["etas"][1::2])
    assert np.all(r["kappas"][0::2] != r["kappas"][1::2])


def test_etas_and_kappas_are_draws_of_their_variances(design):
    _, _, r = design
    first = r["table_occasion"] == 1  # the etas once per subject and replicate
    eta_cl, eta_v = r["etas"][first].T
    kappa = r["kappas"][:, 0]
    errors = {}
    for name, x, var in [("eta_cl", eta_cl, 0.09), ("eta_v_central", eta_v, 0.04),
                         ("iov_cl", kappa, 0.0225)]:
        errors[name] = mean_and_variance_errors(x, var)
    errors["corr(eta_cl, eta_v_central)"] = (abs(np.corrcoef(eta_cl, eta_v)[0, 1]) *
                                            np.sqrt(len(eta_cl)),)
    k1, k2 = kappa[r["table_occasion"] == 1], kappa[r["table_occasion"] == 2]
    errors["corr(kappa occasion 1, 2)"] = (abs(np.corrcoef(k1, k2)[0, 1]) * np.sqrt(len(k1)),)
    # Replicates draw anew.
    rep1 = r["table_replicate"][first] == 1
    assert not np.any(eta_cl[rep1] == eta_cl[~rep1])
    assert max(max(e) for e in errors.values()) < K, errors


def test_block_variances_are_draws_of_their_covariances():
    data = pkscan.parse_dataset(design_text(n=2000), "three_compartment")
    omega = np.array([[0.09, 0.03], [0.03, 0.04]])
    iov = np.array([[0.0225, 0.005], [0.005, 0.01]])
    r = pkscan.simulate_design(
        data, TYPICAL, iiv={"block": ["cl", "v_central"], "omega": [0.09, 0.03, 0.04]},
        iov={"occasion": "OCC", "block": ["cl", "v_central"], "omega": [0.0225, 0.005, 0.01]},
        seed=4)
    first = r["table_occasion"] == 1
    for draws, cov in [(r["etas"][first], omega), (r["kappas"], iov)]:
        n = len(draws)
        s = np.cov(draws.T)
        for i in range(2):
            assert abs(draws[:, i].mean()) < K * np.sqrt(cov[i, i] / n)
            assert abs(s[i, i] - cov[i, i]) < K * cov[i, i] * np.sqrt(2 / (n - 1))
        se = np.sqrt((cov[0, 0] * cov[1, 1] + cov[0, 1] ** 2) / (n - 1))
        assert abs(s[0, 1] - cov[0, 1]) < K * se, (s[0, 1], cov[0, 1], se)


def test_observations_are_ipred_with_the_residual_error(design):
    _, _, r = design
    assert r["dv"].shape == r["ipred"].shape and r["blq"].dtype == np.int8
    np.testing.assert_array_equal(r["ipred"], r["concentrations"][:, 1])
    z = (r["dv"] - r["ipred"]) / np.sqrt(0.05 ** 2 + (0.1 * r["ipred"]) ** 2)
    assert max(mean_and_variance_errors(z, 1.0)) < K
    np.testing.assert_array_equal(r["blq"], (r["dv"] < 0.5).astype(np.int8))
    assert 0 < r["blq"].sum() < len(r["blq"])


def test_lloq_column_flags_each_record_by_its_own_lloq():
    data = pkscan.parse_dataset(design_text(n=50, lloq="1.5"), "three_compartment")
    r = pkscan.simulate_design(data, TYPICAL, iiv=IIV, residual=RESIDUAL, lloq="LLOQ", seed=2)
    np.testing.assert_array_equal(r["blq"], (r["dv"] < 1.5).astype(np.int8))
    assert 0 < r["blq"].sum() < len(r["blq"])


def test_the_same_run_as_the_run_file_gives_the_same_numbers(tmp_path):
    cli = os.environ.get("PKSCAN_CLI")
    if not cli:
        pytest.skip("PKSCAN_CLI is not set")
    (tmp_path / "design.csv").write_text(design_text(n=200))
    (tmp_path / "sim.yaml").write_text("""model: three_compartment
subjects:
  dataset: design.csv
  population:
    seed: 11
    replicates: 2
    typical: {ka: 1.0, cl: 5.0, v_central: 20, q: 8, v_peripheral: 70}
    iiv: {cl: 0.09, v_central: 0.04}
    iov: {occasion: OCC, variances: {cl: 0.0225}}
    covariates:
      effects: [{parameter: cl, covariate: WT, type: power, coefficient: 0.75, reference: 70}]
    residual: {additive: 0.05, proportional: 0.1}
    lloq: 0.5
output:
  path: sim.csv
""")
    subprocess.run([cli, "run", "sim.yaml", "--quiet"], cwd=tmp_path, check=True)
    data = pkscan.read_dataset(str(tmp_path / "design.csv"), "three_compartment")
    r = pkscan.simulate_design(data, TYPICAL, iiv=IIV, iov=IOV, effects=EFFECTS,
                               residual=RESIDUAL, lloq=0.5, seed=11, replicates=2)
    sim = np.genfromtxt(tmp_path / "sim.csv", delimiter=",", names=True)
    ids = np.array(r["ids"], dtype=float)
    np.testing.assert_array_equal(sim["id"], ids[r["subject"]])
    for name, got in [("time", r["time"]), ("replicate", r["replicate"]), ("ipred", r["ipred"]),
                      ("dv", r["dv"]), ("blq", r["blq"])]:
        np.testing.assert_array_equal(sim[name], got, err_msg=name)
    for k, c in enumerate(["depot", "central", "peripheral"]):
        np.testing.assert_array_equal(sim[f"amount_{c}"], r["amounts"][:, k])
        np.testing.assert_array_equal(sim[f"conc_{c}"], r["concentrations"][:, k])
    par = np.genfromtxt(tmp_path / "sim.parameters.csv", delimiter=",", names=True)
    np.testing.assert_array_equal(par["id"], ids[r["table_subject"]])
    np.testing.assert_array_equal(par["replicate"], r["table_replicate"])
    np.testing.assert_array_equal(par["occasion"], r["table_occasion"])
    for j, name in enumerate(r["parameter_names"]):
        np.testing.assert_array_equal(par[name], r["parameters"][:, j], err_msg=name)
    for j, name in enumerate(r["eta_columns"]):
        np.testing.assert_array_equal(par[name], r["etas"][:, j], err_msg=name)
    np.testing.assert_array_equal(par["iov_cl"], r["kappas"][:, 0])
    assert len(par.dtype.names) == 3 + len(r["parameter_names"]) + 3


def test_count_resamples_the_subjects_as_the_run_file_does(tmp_path):
    # count=300 virtual subjects from 50: each one's observation times are its source's records
    # (read from the dataset), its etas are the grid population's subject j's, and the numbers
    # are those of `pkscan run` with subjects.population.count.
    text = design_text(n=50)
    r = pkscan.simulate_design(text, TYPICAL, model="three_compartment", iiv=IIV,
                               residual=RESIDUAL, seed=4, replicates=2, count=300)
    assert r["ok"].shape == (2, 300)
    assert set(r["subject"]) == set(range(300)) and set(r["source"]) <= set(range(50))
    table = columns(text)
    for rep in (1, 2):
        for j in (0, 17, 299):
            sel = (r["replicate"] == rep) & (r["subject"] == j)
            source = set(r["source"][sel])
            assert len(source) == 1
            sid = float(r["ids"][source.pop()])
            want = table["TIME"][(table["ID"] == sid) & (table["EVID"] == 0)]
            np.testing.assert_array_equal(r["time"][sel], want)
    grid = pkscan.simulate_population("three_compartment", TYPICAL, dt=1, steps=1, count=300,
                                      seed=4, iiv=IIV, replicates=2, trajectories=True)
    etas = r["etas"]
    np.testing.assert_array_equal(etas[r["table_replicate"] == 1], grid["etas"][:300])
    cli = os.environ.get("PKSCAN_CLI")
    if not cli:
        return
    (tmp_path / "design.csv").write_text(text)
    (tmp_path / "sim.yaml").write_text("""model: three_compartment
subjects:
  dataset: design.csv
  population:
    seed: 4
    count: 300
    replicates: 2
    typical: {ka: 1.0, cl: 5.0, v_central: 20, q: 8, v_peripheral: 70}
    iiv: {cl: 0.09, v_central: 0.04}
    residual: {additive: 0.05, proportional: 0.1}
output:
  path: sim.csv
""")
    subprocess.run([cli, "run", "sim.yaml", "--quiet"], cwd=tmp_path, check=True)
    sim = np.genfromtxt(tmp_path / "sim.csv", delimiter=",", names=True)
    np.testing.assert_array_equal(sim["id"], r["subject"] + 1)
    np.testing.assert_array_equal(sim["source_id"], np.array(r["ids"], dtype=float)[r["source"]])
    for name in ("time", "replicate", "ipred", "dv"):
        np.testing.assert_array_equal(sim[name], r[name], err_msg=name)


def test_bad_input_is_a_value_error_with_one_line():
    data = pkscan.parse_dataset(design_text(n=3), "three_compartment")
    bad = [
        (dict(effects=[dict(EFFECTS[0], covariate="AGE")]), "AGE is not a column"),
        (dict(iov={"occasion": "OCC", "variances": {"cl": -0.01}}), r"iov_omega.* is -0\.01"),
        (dict(iov={"occasion": "VISIT", "variances": {"cl": 0.01}}), "occasion column VISIT"),
        (dict(iov={"variances": {"cl": 0.01}}), "missing 'occasion'"),
        (dict(iiv={"cl": -0.09}), r"is -0\.09"),
        (dict(effects=[dict(EFFECTS[0], type="linear")]), "power or exponential"),
        (dict(residual=RESIDUAL, lloq="NOPE"), "LLOQ column NOPE"),
        (dict(lloq=0.5), "needs a residual error"),
        (dict(replicates=0), "replicates"),
    ]
    for kwargs, match in bad:
        with pytest.raises(ValueError, match=match) as e:
            pkscan.simulate_design(data, TYPICAL, **kwargs)
        assert "\n" not in str(e.value), str(e.value)
    # A covariate cell that is not a number: the dataset's file, line and column.
    lines = design_text(n=3).splitlines()
    cells = lines[3].split(",")
    cells[6] = "heavy"  # WT of file line 4
    lines[3] = ",".join(cells)
    data = pkscan.parse_dataset("\n".join(lines) + "\n", "three_compartment", file="d.csv")
    with pytest.raises(ValueError, match=r"d\.csv.*4.*WT is \"heavy\"") as e:
        pkscan.simulate_design(data, TYPICAL, effects=EFFECTS)
    assert "\n" not in str(e.value)


def test_a_design_too_large_to_hold_is_a_memory_error():
    data = pkscan.parse_dataset(design_text(n=3), "three_compartment")
    with pytest.raises(MemoryError, match=r"simulate_design: .* need [0-9.e+]+ GiB, "
                                          r"but only [0-9.e+]+ GiB are available"):
        pkscan.simulate_design(data, TYPICAL, iiv=IIV, replicates=10**13)
