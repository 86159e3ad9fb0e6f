"""Extreme but valid inputs through `pkscan run`, against closed forms and limits: rate constants
from 1e-300 to 1e300 on the grid, a central volume far below the others in a dataset, an
infusion far shorter than the grid step, steady states without (or with almost no) elimination,
and additional doses far beyond the last observation. Each answer is either right to the stated
tolerance or the subject is reported non-finite (the warning on stderr, nan in its rows)."""

import math
import os
import resource
import subprocess

import numpy as np
import pytest

METHODS = ["scan", "batched", "power"]


def run(tmp_path, yaml_text, dataset=None, limit_bytes=None, expect=0):
    """`pkscan run run.yaml` in tmp_path; (header, rows as float arrays, stderr)."""
    (tmp_path / "run.yaml").write_text(yaml_text)
    if dataset is not None:
        (tmp_path / "data.csv").write_text(dataset)

    def limit():
        if limit_bytes is not None:
            resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))

    p = subprocess.run([os.environ["PKSCAN_CLI"], "run", "run.yaml", "--quiet"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=120, check=False,
                       preexec_fn=limit)
    assert p.returncode == expect, p.stderr
    if expect != 0:
        return None, None, p.stderr
    lines = (tmp_path / "out.csv").read_text().splitlines()
    header = lines[0].split(",")
    rows = [ln.split(",") for ln in lines[1:]]
    return header, rows, p.stderr


def column(header, rows, name):
    j = header.index(name)
    return np.array([float(r[j]) for r in rows])


# Absorption (ka) and elimination (ke) swept over 1e-300 .. 1e300, one subject per value.
RATES = [10.0 ** e for e in range(-300, 301, 10)]


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("swept", ["ka", "ke"])
def test_rate_constants_across_the_whole_range_on_the_grid(tmp_path, method, swept):
    """two_compartment (depot -> central), 100 into the depot at 0: central follows the Bateman
    function ka D (e^-ke t - e^-ka t) / (ka - ke) for every ka and ke from 1e-300 to 1e300
    (ka -> infinity: a bolus into central; ka -> 0: the dose stays in the depot). Relative
    1e-12 of each value, plus the condition of e^-x (x ulps for x = rate * t); values below
    1e-290 (underflow) absolutely."""
    other = {"ka": 0.25, "ke": 1.3}[swept]
    values = ", ".join(repr(r) for r in RATES)
    fixed = "ke" if swept == "ka" else "ka"
    header, rows, _ = run(tmp_path, f"""model: two_compartment
time: {{dt: 0.5, steps: 8}}
subjects:
  parameters:
    {swept}: [{values}]
    {fixed}: {other}
    v_central: 1
doses:
  - {{compartment: depot, time: 0, amount: 100}}
output: {{path: out.csv}}
engine: {{method: {method}}}
""")
    central = column(header, rows, "amount_central").reshape(len(RATES), 9)
    depot = column(header, rows, "amount_depot").reshape(len(RATES), 9)
    t = np.arange(9) * 0.5
    tried = 0
    for s, r in enumerate(RATES):
        ka, ke = (r, other) if swept == "ka" else (other, r)
        with np.errstate(over="ignore", under="ignore", invalid="ignore"):
            want_c = 100.0 * ka / (ka - ke) * (np.exp(-ke * t) - np.exp(-ka * t))
            want_d = 100.0 * np.exp(-ka * t)
        cond = 1e-12 + 2.0 ** -52 * (np.minimum(ka * t, 800) + np.minimum(ke * t, 800))
        for got, want in ((central[s], want_c), (depot[s], want_d)):
            small = np.abs(want) < 1e-290
            err = np.abs(got[~small] - want[~small]) / np.abs(want[~small])
            assert np.all(err <= cond[~small]), (swept, r, got, want)
            assert np.all(np.abs(got[small]) < 1e-280), (swept, r, got, want)
            tried += got.size
    assert tried == 2 * 9 * len(RATES)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("rate", [1e6, 1e12, 1e300])
def test_an_infusion_shorter_than_the_grid_step_enters_whole(tmp_path, method, rate):
    """100 infused into the depot at `rate` (duration 100 / rate, far below dt = 0.5): the depot
    holds R (1 - e^-ka T) e^-ka (t - T) / ka after the infusion's end T, and nothing is lost."""
    header, rows, _ = run(tmp_path, f"""model: two_compartment
time: {{dt: 0.5, steps: 4}}
subjects:
  parameters: {{ka: 1.2, ke: 0.25, v_central: 1}}
doses:
  - {{compartment: depot, time: 0, amount: 100, rate: {rate!r}}}
output: {{path: out.csv}}
engine: {{method: {method}}}
""")
    depot = column(header, rows, "amount_depot")
    central = column(header, rows, "amount_central")
    ka, ke, dur = 1.2, 0.25, 100.0 / rate
    t = np.arange(1, 5) * 0.5  # after the infusion's end
    # The infusion's rate R over [0, T] convolved with the unit responses, for t >= T:
    # depot R e^-ka t (e^ka T - 1) / ka; central R ka / (ka - ke) (e^-ke t (e^ke T - 1) / ke
    # - e^-ka t (e^ka T - 1) / ka).
    want_d = rate * np.exp(-ka * t) * math.expm1(ka * dur) / ka
    want_c = rate * ka / (ka - ke) * (np.exp(-ke * t) * math.expm1(ke * dur) / ke
                                      - np.exp(-ka * t) * math.expm1(ka * dur) / ka)
    np.testing.assert_allclose(depot[1:], want_d, rtol=1e-12)
    np.testing.assert_allclose(central[1:], want_c, rtol=1e-12)
    assert depot[0] == 0 and central[0] == 0  # an infusion adds nothing at its start


@pytest.mark.parametrize("rate", [1e6, 1e12])
def test_an_infusion_shorter_than_the_grid_step_enters_with_euler(tmp_path, rate):
    """Euler: the infusion's amount enters at the end of its step, whole."""
    header, rows, _ = run(tmp_path, f"""model: two_compartment
discretization: euler
time: {{dt: 0.5, steps: 2}}
subjects:
  parameters: {{ka: 1.2, ke: 0.25, v_central: 1}}
doses:
  - {{compartment: depot, time: 0, amount: 100, rate: {rate!r}}}
output: {{path: out.csv}}
""")
    depot = column(header, rows, "amount_depot")
    np.testing.assert_allclose(depot[1], 100.0, rtol=1e-15)


TINY_V = """model: three_compartment
subjects:
  dataset: data.csv
  parameters: {ka: 1, cl: 1, q: 2, v_central: VC, v_peripheral: 10}
output:
  path: out.csv
"""


@pytest.mark.parametrize("vc", [1e-16, 1e-100, 1e-300])
def test_a_vanishing_central_volume_keeps_the_mass(tmp_path, vc):
    """V_central -> 0 with clearances fixed: central holds no mass and is in equilibrium with
    what flows in, so the peripheral amount follows the Bateman function with rates ka and
    kp = (Q / V2) CL / (CL + Q), scaled by Q / (CL + Q) (the share of what enters central that
    goes to the peripheral compartment), and the central concentration is
    (ka depot + (Q / V2) peripheral) / (CL + Q). The limit is exact to O(V_central)."""
    obs = "".join(f"1,{t},.,0\n" for t in (0.5, 1, 2, 6, 24))
    header, rows, err = run(tmp_path, TINY_V.replace("VC", repr(vc)),
                            "ID,TIME,AMT,EVID\n1,0,100,1\n" + obs)
    assert "warning" not in err
    t = np.array([0.5, 1, 2, 6, 24])
    ka, cl, q, v2 = 1.0, 1.0, 2.0, 10.0
    k21 = q / v2
    kp = k21 * cl / (cl + q)
    depot = 100 * np.exp(-ka * t)
    periph = q / (cl + q) * 100 * ka / (ka - kp) * (np.exp(-kp * t) - np.exp(-ka * t))
    np.testing.assert_allclose(column(header, rows, "amount_depot"), depot, rtol=1e-12)
    np.testing.assert_allclose(column(header, rows, "amount_peripheral"), periph, rtol=1e-10)
    np.testing.assert_allclose(column(header, rows, "conc_central"),
                               (ka * depot + k21 * periph) / (cl + q), rtol=1e-10)


SS_MODEL = """model: MODEL
subjects:
  dataset: data.csv
  parameters: PARAMS
output:
  path: out.csv
"""


@pytest.mark.parametrize("model,params", [
    ("three_compartment", "{ka: 1, cl: 0, q: 2, v_central: 10, v_peripheral: 20}"),
    ("four_compartment",
     "{ka: 1, cl: 0, q: 2, q2: 0.5, v_central: 10, v_peripheral1: 20, v_peripheral2: 30}"),
    ("two_compartment", "{ka: 1, cl: 0, v_central: 10}"),
    ("three_compartment", "{ka: 1, cl: 1e-13, q: 2, v_central: 10, v_peripheral: 20}"),
])
@pytest.mark.parametrize("dose", ["1,0,100,.,12,1,1", "1,0,0,5,0,1,1"])
def test_a_steady_state_without_elimination_is_reported_not_solved(tmp_path, model, params,
                                                                    dose):
    """SS=1 (bolus every 12, or a constant infusion) with no elimination, or so little that
    double precision cannot hold the steady state to 8 digits: no steady state exists (the
    doses accumulate without bound); the subject is non-finite, with the run's warning."""
    header, rows, err = run(tmp_path,
                            SS_MODEL.replace("MODEL", model).replace("PARAMS", params),
                            "ID,TIME,AMT,RATE,II,SS,EVID\n" + dose + "\n1,1,.,.,.,.,0\n")
    assert "1 subjects have non-finite values" in err
    assert all(math.isnan(v) for v in column(header, rows, "amount_central"))


@pytest.mark.parametrize("ke", [1e-6, 1e-3, 0.1])
def test_a_steady_state_with_slow_elimination_is_solved(tmp_path, ke):
    """The same with elimination: the steady-state peak of 100 every 12 into central is
    100 / (1 - e^-12 ke), including ke = 1e-6 (a half-life of 80 years)."""
    header, rows, err = run(tmp_path,
                            SS_MODEL.replace("MODEL", "two_compartment")
                            .replace("PARAMS", f"{{ka: 1, ke: {ke!r}, v_central: 10}}"),
                            "ID,TIME,AMT,II,SS,CMT,EVID\n1,0,100,12,1,2,1\n1,0,.,.,.,2,0\n"
                            "1,5,.,.,.,2,0\n")
    assert "warning" not in err
    peak = 100 / -math.expm1(-12 * ke)
    np.testing.assert_allclose(column(header, rows, "amount_central"),
                               [peak, peak * math.exp(-5 * ke)], rtol=1e-9)


ADDL = """model: two_compartment
subjects:
  dataset: data.csv
  parameters: {ka: 1.2, ke: 0.25, v_central: 1}
output:
  path: out.csv
"""


def test_additional_doses_after_the_last_observation_cost_nothing(tmp_path):
    """ADDL = 1e9 with observations up to 48 h, under a 1 GiB address-space limit: the doses
    after 48 h change nothing and are not made; the result is the regimen of doses every 12 h
    up to 48 h (superposed Bateman functions)."""
    header, rows, err = run(tmp_path, ADDL,
                            "ID,TIME,AMT,II,ADDL,EVID\n1,0,100,12,1000000000,1\n"
                            + "".join(f"1,{t},.,.,.,0\n" for t in (1, 13, 47.5, 48)),
                            limit_bytes=1 << 30)
    assert "warning" not in err
    t = np.array([1, 13, 47.5, 48.0])
    want = sum(np.where(t >= d, 100 * 1.2 / (1.2 - 0.25) * (np.exp(-0.25 * (t - d))
                                                            - np.exp(-1.2 * (t - d))), 0)
               for d in (0, 12, 24, 36, 48))
    np.testing.assert_allclose(column(header, rows, "amount_central"), want, rtol=1e-12)


def test_additional_doses_that_would_not_fit_in_memory_are_an_input_error(tmp_path):
    """ADDL = 1e9 with an observation after the last dose: a billion events do not fit under a
    1 GiB address-space limit; the run stops before allocating with one line, exit status 2,
    naming the record."""
    _, _, err = run(tmp_path, ADDL,
                    "ID,TIME,AMT,II,ADDL,EVID\n1,0,100,12,1000000000,1\n1,2e10,.,.,.,0\n",
                    limit_bytes=1 << 30, expect=2)
    assert err.count("\n") == 1 and err.startswith("pkscan: error: "), err
    assert "data.csv:2" in err and "ADDL" in err, err


def test_a_grid_run_larger_than_the_address_space_limit_is_an_input_error(tmp_path):
    """200000 subjects x 1001 times (4.8 GB of amounts) under a 1 GiB address-space limit
    (ulimit -v): rejected before anything is allocated, with the size it needs; one line, exit
    status 2, never the kernel's out-of-memory killer."""
    _, _, err = run(tmp_path, """model: two_compartment
time: {dt: 0.5, steps: 1000}
subjects:
  count: 200000
  parameters: {ka: 1.2, ke: 0.25, v_central: 1}
doses:
  - {compartment: depot, time: 0, amount: 100}
output: {path: out.csv}
""", limit_bytes=1 << 30, expect=2)
    assert err.count("\n") == 1 and "too large to hold in memory" in err, err
    assert not (tmp_path / "out.csv").exists()


ONE_CPT_GRID = """model: two_compartment
time: {{dt: {dt!r}, steps: 8}}
subjects:
  parameters:
    ka: 0
    ke: [{ks}]
    v_central: {v!r}
doses:
  - {{compartment: central, time: 0, amount: {amount!r}}}
output: {{path: out.csv}}
engine: {{method: {method}}}
"""

EXTREME_K = [0.0, 5e-324, 1e-300, 1e-10, 1.0, 1e10, 1e300, 1.7976931348623157e308]


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("dt", [5e-324, 1e-300, 1e-10, 1.0, 1e10, 1e300])
@pytest.mark.parametrize("amount,v", [(5e-324, 1.0), (1e-300, 1e-300), (1.0, 5e-324),
                                      (1e300, 1e300), (1e300, 1e-5)])
def test_one_compartment_at_the_ends_of_every_range(tmp_path, method, dt, amount, v):
    """A bolus D into central with elimination k (ka 0: the depot plays no part), every value at the ends of its
    allowed range (subnormal, 1e-300, the largest double; dt from the smallest subnormal to
    1e300): the amount at t_i = i dt is D e^-(k t_i) (relative 1e-13 plus the condition of
    e^-x, x ulps; values in the subnormal range to within one subnormal ulp of the closed form's
    own rounding), or, where the concentration D / V overflows, the subject is reported
    non-finite and its concentrations hold inf."""
    ks = ", ".join(repr(k) for k in EXTREME_K)
    header, rows, err = run(tmp_path, ONE_CPT_GRID.format(dt=dt, ks=ks, v=v, amount=amount,
                                                          method=method))
    amounts = column(header, rows, "amount_central").reshape(len(EXTREME_K), 9)
    conc = column(header, rows, "conc_central").reshape(len(EXTREME_K), 9)
    t = np.arange(9) * dt
    for s, k in enumerate(EXTREME_K):
        with np.errstate(over="ignore", under="ignore", invalid="ignore"):
            x = k * t
            x = np.where(np.isnan(x), 0.0, x)  # 0 * inf: t = 0
            want = amount * np.exp(-x)
        cond = 1e-13 + 2.0 ** -52 * np.minimum(x, 800)
        got = amounts[s]
        tiny = np.abs(want) < 1e-300
        assert np.all(np.abs(got[~tiny] - want[~tiny]) <= cond[~tiny] * np.abs(want[~tiny])), \
            (k, dt, amount, got, want)
        assert np.all(np.abs(got[tiny] - want[tiny]) <= 1e-300 * 1e-13 + 1e-323), \
            (k, dt, amount, got, want)
        with np.errstate(over="ignore"):
            want_c = got / v
        np.testing.assert_array_equal(conc[s], want_c)
    with np.errstate(over="ignore"):
        overflow = np.isinf(amounts / v).any(axis=1).sum()
    if overflow:
        assert f"{overflow} subjects have non-finite values" in err, err
    else:
        assert "warning" not in err, err


def test_a_concentration_that_overflows_in_a_dataset_run_is_reported(tmp_path):
    """V_central = 5e-324 (the smallest subnormal, a valid volume): the amounts are right, the
    central concentration amount / V overflows to inf, and the subject is reported non-finite
    (the run's warning), never a silent inf."""
    run_file = TINY_V.replace("VC", "5e-324").replace("cl: 1, q: 2, ",
                                                      "ke: 0.25, k12: 0.1, k21: 0.2, ")
    header, rows, err = run(tmp_path, run_file, "ID,TIME,AMT,EVID\n1,0,100,1\n1,0.5,.,0\n1,2,.,0\n")
    assert "1 subjects have non-finite values" in err, err
    assert np.all(np.isinf(column(header, rows, "conc_central")))
    depot = column(header, rows, "amount_depot")
    np.testing.assert_allclose(depot, 100 * np.exp(-1.0 * np.array([0.5, 2.0])), rtol=1e-13)
