"""pkscan.fit: population estimation from Python, against NONMEM 7.4.1's published THEO results
(tests/data/estimation/README.md) and NONMEM's diagnostics recomputed here with NumPy from the
closed-form one-compartment oral solution."""

import numpy as np
import pytest

import pkscan
from conftest import SOURCE_DIR, with_dv

THEO = str(SOURCE_DIR / "tests" / "data" / "estimation" / "theo.csv")
THETA0 = {"ka": {"init": 2, "lower": 0, "upper": 1e6},
          "v_central": {"init": 50, "lower": 0, "upper": 1e6},
          "ke": {"init": 0.1, "lower": 0, "upper": 1e6}}
IIV0 = {"block": ["ka", "v_central", "ke"], "omega": [0.2, 0.1, 0.2, 0.1, 0.1, 0.2]}
ERROR0 = {"proportional": 0.1, "additive": 0.1}


def test_objective_at_nonmems_initial_estimates():
    r = pkscan.fit("two_compartment", THEO, THETA0, IIV0, ERROR0,
                   estimation={"method": "focei", "max_evaluations": 0})
    assert r.ofv == pytest.approx(192.65025555940014, abs=1e-3)
    r = pkscan.fit("two_compartment", THEO, THETA0, IIV0, ERROR0,
                   estimation={"method": "fo", "max_evaluations": 0})
    assert r.ofv == pytest.approx(141.30755264437002, abs=1e-3)
    r = pkscan.fit("two_compartment", THEO, THETA0, IIV0, ERROR0,
                   estimation={"method": "laplace", "max_evaluations": 0})
    assert r.ofv == pytest.approx(194.10173581227173, abs=1e-3)  # THEO-LAPLI.ext


def test_focei_fit_reaches_nonmems_estimates():
    r = pkscan.fit("two_compartment", THEO, THETA0, IIV0, ERROR0,
                   estimation={"method": "focei", "covariance": "sandwich"})
    assert r.converged, r.message
    # The acceptance window around NONMEM's final objective.
    assert -0.05 <= r.ofv - 92.830869045516039 <= 0.001
    nonmem = {"theta.ka": 1.49072, "theta.v_central": 32.4470, "theta.ke": 0.0872901,
              "omega.ka.ka": 0.434717, "omega.v_central.v_central": 0.0193995,
              "omega.ke.ke": 0.0202334}
    for name, value in nonmem.items():
        assert r.estimates[name] == pytest.approx(value, rel=0.01), name
    assert r.covariance_ok
    assert set(r.se) == set(r.estimates)
    # The covariance matrix and the SEs agree; the correlation has a unit diagonal.
    se = np.array([r.se[n] for n in r.covariance_names])
    np.testing.assert_allclose(np.sqrt(np.diag(r.covariance)), se, rtol=1e-12)
    np.testing.assert_allclose(np.diag(r.correlation), 1.0, rtol=1e-12)
    eig = np.linalg.eigvalsh(r.correlation)
    assert r.condition_number == pytest.approx(eig.max() / eig.min(), rel=1e-9)
    assert r.rse["theta.ka"] == pytest.approx(100 * r.se["theta.ka"] / r.estimates["theta.ka"])
    assert [h["iteration"] for h in r.history] == list(range(len(r.history)))
    assert r.history[-1]["ofv"] == pytest.approx(r.ofv, abs=1e-9)


def one_compartment_oral(t, ka, v, k):
    """F and dF/dETA (P = THETA exp(ETA): P dF/dP) of 320 mg into the depot, in closed form."""
    e = np.exp(-k * t) - np.exp(-ka * t)
    den = ka - k
    f = 320 * ka / (v * den) * e
    df_dka = 320 / v * (-k / den**2 * e + ka * t * np.exp(-ka * t) / den)
    df_dk = 320 * ka / v * (e / den**2 - t * np.exp(-k * t) / den)
    return f, np.column_stack([df_dka * ka, -f, df_dk * k])


def inverse_sqrt(c):
    lam, v = np.linalg.eigh(c)
    return v @ np.diag(lam**-0.5) @ v.T


def test_diagnostics_are_nonmems_definitions():
    """At NONMEM's final FOCEI estimates (fixed: max_evaluations 0), every diagnostic column
    against NumPy on the closed form, with the EBEs pkscan found (checked against NONMEM's in
    tests/estimation/objective_test.cpp)."""
    theta = {"ka": 1.49072, "v_central": 32.4470, "ke": 0.0872901}
    lower = [0.434717, 0.0569202, 0.0193995, -0.00648548, 0.0120830, 0.0202334]
    sig_p, sig_a = 0.0170386, 0.0828440
    r = pkscan.fit("two_compartment", THEO, theta,
                   {"block": ["ka", "v_central", "ke"], "omega": lower},
                   {"proportional": sig_p, "additive": sig_a},
                   estimation={"method": "focei", "max_evaluations": 0})
    omega = np.zeros((3, 3))
    omega[np.tril_indices(3)] = lower
    omega = omega + np.tril(omega, -1).T
    t = r.table
    ids = np.array(t["id"])
    iwres_all = []
    for s, sid in enumerate(r.subjects["id"]):
        rows = ids == sid
        time, dv = t["time"][rows], t["dv"][rows]
        eta = r.subjects["eta"][s]
        f0, g0 = one_compartment_oral(time, theta["ka"], theta["v_central"], theta["ke"])
        f, g = one_compartment_oral(time, theta["ka"] * np.exp(eta[0]),
                                    theta["v_central"] * np.exp(eta[1]),
                                    theta["ke"] * np.exp(eta[2]))
        r0, ri = sig_a + sig_p * f0**2, sig_a + sig_p * f**2
        np.testing.assert_allclose(t["pred"][rows], f0, rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose(t["ipred"][rows], f, rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose(t["res"][rows], dv - f0, atol=1e-9)
        np.testing.assert_allclose(t["ires"][rows], dv - f, atol=1e-9)
        np.testing.assert_allclose(t["iwres"][rows], (dv - f) / np.sqrt(ri), atol=1e-9)
        wres = inverse_sqrt(g0 @ omega @ g0.T + np.diag(r0)) @ (dv - f0)
        c = dv - f + g @ eta
        cwres = inverse_sqrt(g @ omega @ g.T + np.diag(r0)) @ c
        cwresi = inverse_sqrt(g @ omega @ g.T + np.diag(ri)) @ c
        np.testing.assert_allclose(t["wres"][rows], wres, atol=1e-9)
        np.testing.assert_allclose(t["cwres"][rows], cwres, atol=1e-9)
        np.testing.assert_allclose(t["cwresi"][rows], cwresi, atol=1e-9)
        iwres_all.extend((dv - f) / np.sqrt(ri))
    sd = np.std(r.subjects["eta"], axis=0, ddof=1)
    for k, name in enumerate(["ka", "v_central", "ke"]):
        assert r.shrinkage[f"omega.{name}.{name}"] == pytest.approx(
            100 * (1 - sd[k] / np.sqrt(omega[k, k])), abs=1e-9)
        assert r.cv[f"omega.{name}.{name}"] == pytest.approx(
            100 * np.sqrt(np.exp(omega[k, k]) - 1), rel=1e-12)
    assert r.shrinkage["eps"] == pytest.approx(100 * (1 - np.std(iwres_all, ddof=1)), abs=1e-9)
    assert len(t["time"]) == 132


@pytest.mark.parametrize("theta,iiv,error,message", [
    ({"q": 1.0}, IIV0, ERROR0, '"q" is not a parameter'),
    (THETA0, {"block": ["ka", "q"], "omega": [0.1, 0, 0.1]}, ERROR0, '"q" is not a parameter'),
    ({"ka": 2.0, "v_central": 50.0, "ke": 0.1}, {"diagonal": ["ka"], "omega": [0.1, 0.2]},
     ERROR0, "must have 1 values"),
    ({"ka": 2.0, "ke": 0.1, "v_central": 50.0}, {"diagonal": ["ka"], "omega": [0.1]},
     {"proportional": -1}, "must be finite and > 0"),
    ({"ka": 2.0, "ke": 0.1, "v_central": 50.0}, {"diagonal": ["ka"], "omega": [0.1]},
     {"exponential": 0.1}, 'unknown key "exponential"'),
])
def test_bad_input_is_a_value_error(theta, iiv, error, message):
    with pytest.raises(ValueError, match=message):
        pkscan.fit("two_compartment", THEO, theta, iiv, error,
                   estimation={"max_evaluations": 0})


def test_a_covariate_effect_is_recovered():
    """Data simulated by pkscan.simulate_design with WT on cl (power 0.75, reference 70: the
    design simulation's own effect code), refitted from a coefficient of 0.3 with the
    coefficient estimated: the estimate within 3 of its standard errors of 0.75 (a fixed seed;
    120 subjects)."""
    rng = np.random.default_rng(3)
    times = [0.5, 1, 2, 4, 8, 12, 24]
    rows = ["ID,TIME,AMT,CMT,EVID,DV,WT"]
    for i in range(1, 121):
        wt = round(float(rng.uniform(40, 120)), 1)
        rows.append(f"{i},0,100,1,1,.,{wt}")
        rows += [f"{i},{t},.,2,0,.,{wt}" for t in times]
    design = "\n".join(rows) + "\n"
    truth = {"ka": 1.2, "cl": 4.0, "v_central": 30.0}
    sim = pkscan.simulate_design(
        design, truth, model="two_compartment", iiv={"cl": 0.09, "v_central": 0.04},
        effects=[{"parameter": "cl", "covariate": "WT", "type": "power", "coefficient": 0.75,
                  "reference": 70}],
        residual={"proportional": 0.1}, seed=11)
    r = pkscan.fit("two_compartment", with_dv(rows, sim["dv"]),
                   theta={k: {"init": v, "lower": 0} for k, v in truth.items()},
                   covariates=[{"parameter": "cl", "covariate": "WT", "type": "power",
                                "coefficient": 0.3, "reference": 70}],
                   iiv={"diagonal": ["cl", "v_central"], "omega": [0.1, 0.1]},
                   error={"proportional": 0.1, "as": "standard_deviation"},
                   estimation={"method": "focei", "covariance": "sandwich"})
    assert r.converged and r.covariance_ok, r.message
    assert abs(r.estimates["effect.cl.WT"] - 0.75) <= 3 * r.se["effect.cl.WT"], (
        r.estimates["effect.cl.WT"], r.se["effect.cl.WT"])
    assert r.se["effect.cl.WT"] < 0.2
    assert r.fixed["effect.cl.WT"] is False
