"""Generated run files and datasets through `pkscan run`, against the independent reference.

Tolerance: the largest difference of a subject's amounts (and concentrations) over its output,
relative to that subject's peak, at most 1e-9 for float64 and 1e-5 for float32.
"""

import numpy as np
import pytest

import harness
import reference

TOLERANCE = {"float64": 1e-9, "float32": 1e-5}


def relative_errors(got, expected, subject_of_row, scale=None):
    """Per subject: max |got - expected| / max |scale| over that subject's rows (scale: the
    expected values themselves unless given)."""
    errors = {}
    scale = expected if scale is None else scale
    for s in np.unique(subject_of_row):
        rows = subject_of_row == s
        peak = np.max(np.abs(scale[rows]))
        diff = np.max(np.abs(got[rows] - expected[rows]))
        errors[int(s)] = 0.0 if diff == 0 else diff / peak if peak > 0 else np.inf
    return errors


def check(what, got, expected, subject_of_row, tol, scale=None):
    assert got.shape == expected.shape, f"{what}: shape {got.shape}, expected {expected.shape}"
    assert np.all(np.isfinite(got)), f"{what}: non-finite values"
    errors = relative_errors(got, expected, subject_of_row, scale)
    worst = max(errors, key=errors.get)
    assert errors[worst] <= tol, (
        f"{what}: subject {worst + 1} differs from the reference by {errors[worst]:.3g} of its "
        f"peak (tolerance {tol:g})")
    return errors[worst]


@pytest.mark.parametrize("name", harness.case_names(), ids=harness.case_id)
def test_cli_matches_reference(name, worst_errors):
    c = harness.case(name)
    run = c["run"]
    out = harness.run_cli(name)
    assert out.returncode == 0, out.stderr
    model = reference.Model(run.get("model", "three_compartment"))
    assert out.header[:2] == ["id", "time"]
    assert out.header[2:2 + 2 * model.n] == (["amount_" + x for x in model.compartments]
                                             + ["conc_" + x for x in model.compartments])
    if c["dataset"] is None:
        precision = run.get("precision", "float64")
        expected = reference.grid_reference(run)                  # [subjects, times, n]
        subjects, times, n = expected.shape
        ids = np.repeat(np.arange(subjects), times)
        assert out.column("id") == [str(s + 1) for s in ids]
        dt = run["time"]["dt"]
        grid = (np.arange(times) * dt if run["output"].get("times", "all") == "all"
                else np.array(run["output"]["times"]))
        np.testing.assert_allclose([float(t) for t in out.column("time")], np.tile(grid, subjects),
                                   rtol=1e-12, atol=1e-12 * dt)
        volumes = np.array([[model.resolve(v)["v_" + x] for x in model.compartments]
                            for v in reference.subject_values(run["subjects"]["parameters"],
                                                              subjects)])
        expected = expected.reshape(-1, n)
        tol = TOLERANCE[precision]
        err = check("amounts", out.numbers("amount_"), expected, ids, tol)
        check("concentrations", out.numbers("conc_"), expected / volumes[ids], ids, tol)
        worst_errors[precision] = max(worst_errors.get(precision, 0.0), err)
        return
    expected, pred, conc = reference.dataset_reference(run, c["dataset"], concentrations=True)
    _, subjects = reference.read_dataset(c["dataset"])
    obs = [(k, rec) for k, (_, recs) in enumerate(subjects) for rec in recs
           if reference.record_evid(rec) == 0]
    assert out.column("id") == [rec["id"] for _, rec in obs]
    assert [float(t) for t in out.column("time")] == [float(rec["time"]) for _, rec in obs]
    assert [float(v) if v else None for v in out.column("dv")] == [
        float(rec["dv"]) if rec["dv"] is not None else None for _, rec in obs]
    ids = np.array([k for k, _ in obs])
    err = check("amounts", out.numbers("amount_"), expected, ids, TOLERANCE["float64"])
    check("concentrations", out.numbers("conc_"), conc, ids, TOLERANCE["float64"])
    # pred relative to the subject's peak concentration (any compartment): a subject whose
    # observed compartment stays at 0 has no peak of its own (the reference's rounding is 1e-16).
    check("pred", out.numbers("pred")[:, 0], pred, ids, TOLERANCE["float64"], scale=conc)
    worst_errors["dataset"] = max(worst_errors.get("dataset", 0.0), err)


# ---- The reference itself ---------------------------------------------------------------------

def ode_cases():
    """A few one-subject cases of each kind for the Radau cross-check (it is slow)."""
    def small(n, limit):
        c = harness.case(n)
        if reference.subject_count(c["run"]["subjects"]) != 1 and c["dataset"] is None:
            return False
        if c["dataset"] is None:
            return "exact" in c["features"] and c["run"]["time"]["steps"] <= limit
        return ({"ss1", "ss2"} & c["features"] and c["dataset"].count("\n") <= limit
                and c["dataset"].count("\n2,") == 0)
    grid = [n for n in harness.case_names() if n.startswith("grid") and small(n, 30)][:4]
    data = [n for n in harness.case_names() if n.startswith("dataset") and small(n, 8)][:4]
    return grid + data


@pytest.mark.parametrize("name", ode_cases(), ids=harness.case_id)
def test_reference_propagation_agrees_with_radau(name):
    """The matrix-exponential reference against solve_ivp(Radau, rtol 1e-12) restarted at every
    event (steady states included: the cycle map is built from Radau solutions too)."""
    c = harness.case(name)
    ode = reference.Propagator("ode")
    if c["dataset"] is None:
        exact, radau = reference.grid_reference(c["run"]), reference.grid_reference(c["run"], ode)
        subject = np.repeat(np.arange(exact.shape[0]), exact.shape[1])
        exact, radau = exact.reshape(len(subject), -1), radau.reshape(len(subject), -1)
    else:
        exact, _ = reference.dataset_reference(c["run"], c["dataset"])
        radau, _ = reference.dataset_reference(c["run"], c["dataset"], ode)
        _, subjects = reference.read_dataset(c["dataset"])
        subject = np.array([k for k, (_, recs) in enumerate(subjects) for rec in recs
                            if reference.record_evid(rec) == 0])
    check("reference (expm vs Radau)", exact, radau, subject, 1e-8)


def test_reference_steady_states_match_the_textbook_one_compartment_formulas():
    """One compartment, elimination k: an SS bolus A every II gives A / (1 - exp(-k II)) just
    after the dose; an SS infusion of rate R over D every II gives, at the end of the infusion,
    R/k (1 - exp(-k D)) / (1 - exp(-k II)); a constant infusion gives R / k, then decays."""
    k, ii, amount, rate = 0.2, 12.0, 100.0, 25.0
    run = {"model": {"linear": {"compartments": ["central"], "flows": [],
                                "eliminations": [{"from": "central", "rate": "k"}]}},
           "subjects": {"parameters": {"k": k}}}
    data = ("ID,TIME,AMT,RATE,II,SS,EVID\n"
            f"1,0,{amount},.,{ii},1,1\n1,0,.,.,.,.,0\n1,3,.,.,.,.,0\n"
            f"2,0,{amount},{rate},{ii},1,1\n2,4,.,.,.,.,0\n"
            f"3,0,0,{rate},0,1,1\n3,0,.,.,.,.,0\n3,5,.,.,.,.,0\n")
    amounts, _ = reference.dataset_reference(run, data)
    peak = amount / (1 - np.exp(-k * ii))
    end_of_infusion = rate / k * (1 - np.exp(-k * amount / rate)) / (1 - np.exp(-k * ii))
    expected = [peak, peak * np.exp(-3 * k), end_of_infusion, rate / k,
                rate / k * np.exp(-5 * k)]
    np.testing.assert_allclose(amounts[:, 0], expected, rtol=1e-13)


def test_reference_lagged_steady_state_matches_the_textbook_formula():
    """One compartment, SS bolus A every II arriving with lag L. L < II: doses arrive at
    t0 + L - k II, so at the record time t0 the last arrival was II - L ago and each later
    arrival brings the state to A / (1 - exp(-k II)). L >= II: NONMEM's advance II - L is not
    positive, so the state at t0 is that peak, and the record's own dose arrives at t0 + L."""
    k, ii, amount = 0.15, 8.0, 50.0
    run = {"model": {"linear": {"compartments": ["central"], "flows": [],
                                "eliminations": [{"from": "central", "rate": "k"}]}},
           "subjects": {"parameters": {"k": k, "lag_central": [2.0, 12.0]}}}
    data = ("ID,TIME,AMT,II,SS,EVID\n"
            f"1,4,{amount},{ii},1,1\n1,4,.,.,.,0\n1,6,.,.,.,0\n"
            f"2,4,{amount},{ii},1,1\n2,4,.,.,.,0\n2,8,.,.,.,0\n2,16,.,.,.,0\n2,17,.,.,.,0\n")
    amounts, _ = reference.dataset_reference(run, data)
    peak = amount / (1 - np.exp(-k * ii))
    at16 = peak * np.exp(-12 * k) + amount                         # L = 12: own dose at 16
    expected = [peak * np.exp(-6 * k), peak,                        # L = 2: arrivals -2, 6
                peak, peak * np.exp(-4 * k), at16, at16 * np.exp(-k)]
    np.testing.assert_allclose(amounts[:, 0], expected, rtol=1e-13)
