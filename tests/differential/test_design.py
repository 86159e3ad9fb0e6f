"""Design simulations (`subjects: {dataset, population}`, NONMEM's $SIM) through `pkscan run`:

- the parameter table: etas and kappas (IOV) as draws of their covariances (mean and variance
  within 5 standard errors: SE of a mean sqrt(var / n), of a variance var sqrt(2 / (n - 1)), of a
  correlation 1 / sqrt(n)), and every parameter recomputed from them with NumPy
  (typical * (WT / 70)^0.75 * exp(eta + kappa), relative 1e-13);
- IPRED against SciPy's ODE solver (solve_ivp, LSODA at rtol 1e-11) from the written
  parameters, each record's parameters governing the interval that ends at it (NONMEM's rule);
- DV's standardised residual as N(0, 1) within 5 SE, and BLQ exactly DV < LLOQ (a number or a
  dataset column);
- without variability the design is the dataset run, bit for bit; a design subject's etas are
  the grid population subject's of the same index; results are the same bytes for 1 and 2
  threads;
- bad input: one line naming the file, line and column or the YAML node, exit status 2, no file.
"""

import os
import subprocess

import numpy as np
import pytest
from scipy.integrate import solve_ivp

N = 1000  # subjects of the design
TIMES = [0.5, 1, 2, 4, 8, 12]


def write_design(path, n=N, occ2="2", lloq=None):
    rng = np.random.default_rng(7)
    lines = ["ID,TIME,AMT,CMT,EVID,DV,WT,OCC" + (",LLOQ" if lloq else "")]
    for i in range(1, n + 1):
        wt = round(float(rng.uniform(50, 100)), 1)
        extra = "," + lloq if lloq else ""
        lines.append(f"{i},0,100,1,1,.,{wt},1{extra}")
        lines += [f"{i},{t},.,2,0,1,{wt},1{extra}" for t in TIMES]
        lines.append(f"{i},24,100,1,1,.,{wt},{occ2}{extra}")
        lines += [f"{i},{24 + t},.,2,0,1,{wt},{occ2}{extra}" for t in TIMES]
    path.write_text("\n".join(lines) + "\n")


POP = """    seed: 11
    replicates: {replicates}
    typical: {{ka: 1.0, cl: 5.0, v_central: 20, q: 8, v_peripheral: 70}}
{variability}"""

VARIABILITY = """    iiv: {cl: 0.09, v_central: 0.04}
    iov: {occasion: OCC, variances: {cl: 0.0225}}
    covariates:
      effects: [{parameter: cl, covariate: WT, type: power, coefficient: 0.75, reference: 70}]
    residual: {additive: 0.05, proportional: 0.1}
    lloq: 0.5
"""


def run_file(tmp_path, population, name="sim", dataset="design.csv", extra=""):
    text = (f"model: three_compartment\nsubjects:\n  dataset: {dataset}\n"
            f"  population:\n{population}{extra}output:\n  path: {name}.csv\n")
    (tmp_path / f"{name}.yaml").write_text(text)
    return tmp_path / f"{name}.yaml"


def pkscan(tmp_path, yaml, *args, expect=0):
    p = subprocess.run([os.environ["PKSCAN_CLI"], "run", str(yaml), "--quiet", *args],
                       cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False)
    assert p.returncode == expect, p.stderr
    return p.stderr


def table(path):
    lines = path.read_text().splitlines()
    header = lines[0].split(",")
    rows = np.array([[float(x) for x in ln.split(",")] for ln in lines[1:]])
    return {h: rows[:, j] for j, h in enumerate(header)}


def within(sample, mean, var, k=5.0):
    n = len(sample)
    assert abs(sample.mean() - mean) < k * np.sqrt(var / n), (sample.mean(), mean, var, n)
    assert abs(sample.var(ddof=1) - var) < k * var * np.sqrt(2 / (n - 1)), (sample.var(), var)


@pytest.fixture(scope="module")
def design_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("design")
    write_design(tmp / "design.csv")
    yaml = run_file(tmp, POP.format(replicates=2, variability=VARIABILITY))
    pkscan(tmp, yaml)
    return tmp, table(tmp / "sim.csv"), table(tmp / "sim.parameters.csv")


def test_etas_and_kappas_are_draws_of_their_covariances(design_run):
    _, _, par = design_run
    first = par["occasion"] == 1  # one row per subject and replicate for the etas
    assert first.sum() == 2 * N
    eta_cl, eta_v = par["eta_cl"][first], par["eta_v_central"][first]
    within(eta_cl, 0.0, 0.09)
    within(eta_v, 0.0, 0.04)
    assert abs(np.corrcoef(eta_cl, eta_v)[0, 1]) < 5 / np.sqrt(len(eta_cl))
    within(par["iov_cl"], 0.0, 0.0225)
    # Kappas of one subject's two occasions are independent draws.
    k1, k2 = par["iov_cl"][par["occasion"] == 1], par["iov_cl"][par["occasion"] == 2]
    assert abs(np.corrcoef(k1, k2)[0, 1]) < 5 / np.sqrt(len(k1))
    # The etas of a subject are the same at both occasions; replicates draw anew.
    np.testing.assert_array_equal(par["eta_cl"][par["occasion"] == 2], eta_cl)
    rep1 = par["replicate"][first] == 1
    assert not np.any(eta_cl[rep1] == eta_cl[~rep1])


def test_parameters_recomputed_from_etas_kappas_and_weight(design_run, tmp_path):
    tmp, _, par = design_run
    wt = {}
    for ln in (tmp / "design.csv").read_text().splitlines()[1:]:
        f = ln.split(",")
        wt[int(f[0])] = float(f[6])
    w = np.array([wt[int(i)] for i in par["id"]])
    cl = 5.0 * (w / 70.0) ** 0.75 * np.exp(par["eta_cl"] + par["iov_cl"])
    np.testing.assert_allclose(par["cl"], cl, rtol=1e-13)
    np.testing.assert_allclose(par["v_central"], 20.0 * np.exp(par["eta_v_central"]), rtol=1e-13)
    assert np.all(par["q"] == 8.0) and np.all(par["v_peripheral"] == 70.0)


def ode_ipred(ka, cls, vc, q, vp, record_times, record_occ, doses, obs_times):
    """Central concentrations at obs_times: between records the parameters of the record that
    ends the interval (cl per occasion)."""
    a = np.zeros(3)
    out = {}
    t0 = 0.0
    for t, occ in zip(record_times, record_occ):
        cl = cls[occ]
        if t > t0:
            def f(_, x):
                return [-ka * x[0],
                        ka * x[0] - (cl + q) / vc * x[1] + q / vp * x[2],
                        q / vc * x[1] - q / vp * x[2]]
            a = solve_ivp(f, (t0, t), a, method="LSODA", rtol=1e-11, atol=1e-13).y[:, -1]
            t0 = t
        if t in doses:
            a[0] += doses[t]
        if t in obs_times:
            out[t] = a[1] / vc
    return out


def test_ipred_against_an_ode_solver(design_run):
    _, sim, par = design_run
    for subject in (1, 2, 3, 500):
        for rep in (1, 2):
            p = (par["id"] == subject) & (par["replicate"] == rep)
            cls = dict(zip(par["occasion"][p].astype(int), par["cl"][p]))
            vc = par["v_central"][p][0]
            times = [0.0] + TIMES + [24.0] + [24 + t for t in TIMES]
            occ = [1] * 7 + [2] * 7
            want = ode_ipred(1.0, cls, vc, 8.0, 70.0, times, occ, {0.0: 100.0, 24.0: 100.0},
                             set(TIMES) | {24 + t for t in TIMES})
            rows = (sim["id"] == subject) & (sim["replicate"] == rep)
            got = dict(zip(sim["time"][rows], sim["ipred"][rows]))
            assert len(got) == 12
            for t, v in want.items():
                assert abs(got[t] - v) <= 1e-8 * abs(v), (subject, rep, t, got[t], v)


def test_residual_error_and_blq(design_run):
    _, sim, _ = design_run
    np.testing.assert_array_equal(sim["ipred"], sim["conc_central"])
    z = (sim["dv"] - sim["ipred"]) / np.sqrt(0.05 ** 2 + (0.1 * sim["ipred"]) ** 2)
    within(z, 0.0, 1.0)
    np.testing.assert_array_equal(sim["blq"], (sim["dv"] < 0.5).astype(float))
    assert 0 < sim["blq"].sum() < len(sim["blq"])


def test_lloq_column_flags_each_record_by_its_own_lloq(tmp_path):
    write_design(tmp_path / "design.csv", n=50, lloq="1.5")
    variability = VARIABILITY.replace("lloq: 0.5", "lloq: LLOQ")
    pkscan(tmp_path, run_file(tmp_path, POP.format(replicates=1, variability=variability)))
    sim = table(tmp_path / "sim.csv")
    np.testing.assert_array_equal(sim["blq"], (sim["dv"] < 1.5).astype(float))
    assert np.all(sim["LLOQ"] == 1.5)


# With a lag and a bioavailability the walk takes the general path (the kept plans make their
# events again); without, the bolus one.
@pytest.mark.parametrize("extra", ["", ", lag_depot: 0.3, f_depot: 0.8"])
def test_without_variability_the_design_is_the_dataset_run_bit_for_bit(tmp_path, extra):
    write_design(tmp_path / "design.csv", n=30)
    pkscan(tmp_path, run_file(tmp_path, POP.replace("v_peripheral: 70", "v_peripheral: 70" + extra)
                              .format(replicates=2, variability="")))
    (tmp_path / "data.yaml").write_text(
        "model: three_compartment\nsubjects:\n  dataset: design.csv\n  parameters: "
        "{ka: 1.0, cl: 5.0, v_central: 20, q: 8, v_peripheral: 70" + extra +
        "}\noutput:\n  path: data.csv\n")
    pkscan(tmp_path, tmp_path / "data.yaml")
    sim = [ln.split(",") for ln in (tmp_path / "sim.csv").read_text().splitlines()]
    data = [ln.split(",") for ln in (tmp_path / "data.csv").read_text().splitlines()]
    hs, hd = sim[0], data[0]
    assert len(sim) == 2 * 30 * 12 + 1 and len(data) == 30 * 12 + 1
    for rep in ("1", "2"):  # each replicate the dataset run (a plan kept across replicates)
        rows = [r for r in sim[1:] if r[hs.index("replicate")] == rep]
        for name in ["id", "time", "amount_depot", "amount_central", "amount_peripheral",
                     "conc_central"]:
            assert [r[hs.index(name)] for r in rows] == [r[hd.index(name)] for r in data[1:]]
        assert [r[hs.index("ipred")] for r in rows] == [r[hd.index("pred")] for r in data[1:]]


def test_a_design_subject_has_the_etas_of_the_grid_population_subject(tmp_path):
    write_design(tmp_path / "design.csv", n=40)
    pkscan(tmp_path, run_file(tmp_path, POP.format(
        replicates=1, variability="    iiv: {cl: 0.09, v_central: 0.04}\n")))
    (tmp_path / "grid.yaml").write_text(
        "model: three_compartment\ntime: {dt: 1, steps: 2}\nsubjects:\n  population:\n"
        "    count: 40\n" + POP.format(replicates=1,
                                       variability="    iiv: {cl: 0.09, v_central: 0.04}\n")
        + "doses: [{compartment: depot, time: 0, amount: 100}]\noutput:\n  path: grid.csv\n")
    pkscan(tmp_path, tmp_path / "grid.yaml")
    d, g = table(tmp_path / "sim.parameters.csv"), table(tmp_path / "grid.parameters.csv")
    np.testing.assert_array_equal(d["eta_cl"], g["eta_cl"])
    np.testing.assert_array_equal(d["cl"], g["cl"])


def test_the_same_bytes_for_one_and_two_threads(tmp_path):
    write_design(tmp_path / "design.csv", n=300)
    yaml = run_file(tmp_path, POP.format(replicates=2, variability=VARIABILITY))
    pkscan(tmp_path, yaml, "--threads", "1", "--output", "one.csv")
    pkscan(tmp_path, yaml, "--threads", "2", "--output", "two.csv")
    for suffix in (".csv", ".parameters.csv"):
        assert (tmp_path / f"one{suffix}").read_bytes() == (tmp_path / f"two{suffix}").read_bytes()


@pytest.mark.parametrize("variability,occ2,where", [
    (VARIABILITY.replace("covariate: WT", "covariate: BW"), "2",
     "covariate is \"BW\", but the dataset"),
    (VARIABILITY, "2.5", "design.csv:9:8: occasion column OCC is \"2.5\", but must be a whole"),
    (VARIABILITY.replace("cl: 0.0225", "cl: -0.01"), "2", "iov.variances.cl is -0.01"),
    (VARIABILITY.replace("lloq: 0.5", "lloq: WT2"), "2", "LLOQ column WT2 is not a column"),
    (VARIABILITY.replace("iov: {occasion: OCC,", "iov: {occasion: OCCASION,"), "2",
     "occasion column OCCASION is not a column"),
])
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, variability, occ2, where):
    write_design(tmp_path / "design.csv", n=5, occ2=occ2)
    err = pkscan(tmp_path, run_file(tmp_path, POP.format(replicates=1, variability=variability)),
                 expect=2)
    assert where in err, err
    assert len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "sim.csv").exists()
    # `pkscan validate` makes the run's checks of every record without running: the same line.
    v = subprocess.run([os.environ["PKSCAN_CLI"], "validate", str(tmp_path / "sim.yaml")],
                       cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False)
    assert v.returncode == 2 and v.stderr == err, (v.returncode, v.stderr, err)


def test_a_dataset_column_may_not_give_a_parameter_the_population_varies(tmp_path):
    (tmp_path / "design.csv").write_text("ID,TIME,AMT,CMT,EVID,CL\n1,0,100,1,1,4\n1,1,.,2,0,4\n")
    err = pkscan(tmp_path, run_file(tmp_path, POP.format(
        replicates=1, variability="    iiv: {cl: 0.09}\n")), expect=2)
    assert "the population varies cl" in err and "sim.yaml:3:" in err, err
