"""pkscan.Predictor's exact second derivatives (hessian=True): predictions against the Hessian of
the closed-form Bateman curves by NumPy finite differences (also at a steady state: the sum of
the doses given every II since long before, in closed form), the log-likelihood's Hessian
against central differences of its exact gradient, symmetry, and bad input."""

import numpy as np
import pytest

import pkscan

# Two subjects of the two-compartment model in clearances (depot -> central): lagged oral doses
# with F (subject 1: 100 at t = 0 and 12; subject 2: 80 at t = 0), samples away from the lagged
# arrivals.
TEXT = """ID,TIME,AMT,CMT,EVID,DV
1,0,100,1,1,.
1,0.8,.,2,0,3.1
1,2.5,.,2,0,4.4
1,7,.,2,0,2.9
1,12,100,1,1,.
1,14,.,2,0,4.7
1,20,.,2,0,2.6
2,0,80,1,1,.
2,1.5,.,2,0,3.2
2,6,.,2,0,2.4
"""
DOSES = {0: [(0.0, 100.0), (12.0, 100.0)], 1: [(0.0, 80.0)]}
NAMES = ["ka", "cl", "v_central", "f_depot", "lag_depot"]
VALUES = np.array([1.3, 2.1, 15.0, 0.8, 0.3])


def closed_form(times, doses, theta):
    """Concentrations of the oral one-compartment model in clearances (Bateman)."""
    ka, cl, v, f, lag = theta
    ke = cl / v
    out = np.zeros(len(times))
    for td, d in doses:
        t = np.asarray(times) - td - lag
        out += np.where(t >= 0, f * d * ka / (ka - ke) * (np.exp(-ke * t) - np.exp(-ka * t)), 0)
    return out / v


def fd_hessian(f, theta):
    """d2 f / d theta2 by central differences (step 1e-4 relative: errors about 1e-8 relative
    from truncation and rounding), f: theta -> [n]."""
    m = len(theta)
    h = 1e-4 * np.abs(theta)
    out = None
    for a in range(m):
        for b in range(m):
            def at(sa, sb):
                t = theta.copy()
                t[a] += sa * h[a]
                t[b] += sb * h[b]
                return f(t)
            d = (at(1, 1) - at(1, -1) - at(-1, 1) + at(-1, -1)) / (4 * h[a] * h[b])
            if out is None:
                out = np.zeros((len(d), m, m))
            out[:, a, b] = d
    return out


@pytest.fixture(scope="module")
def predictor():
    return pkscan.Predictor(TEXT, "two_compartment")


def row(predictor, theta):
    return predictor.make_parameters(dict(zip(NAMES, theta)))[0]


def test_prediction_hessian_matches_the_closed_form(predictor):
    for s in range(predictor.subjects):
        lo, hi = predictor.observation_offsets[s], predictor.observation_offsets[s + 1]
        times = predictor.observation_times[lo:hi]
        pred, jac, hess = predictor.predict_gradient(s, row(predictor, VALUES), hessian=True,
                                                     columns=NAMES)
        assert hess.shape == (hi - lo, 5, 5)
        np.testing.assert_allclose(pred, closed_form(times, DOSES[s], VALUES), rtol=1e-12)
        want = fd_hessian(lambda t: closed_form(times, DOSES[s], t), VALUES.copy())
        scale = np.abs(want).max()
        # 1e-6 relative: 100 times the finite differences' error.
        np.testing.assert_allclose(hess, want, rtol=1e-6, atol=1e-6 * scale)
        np.testing.assert_array_equal(hess, np.swapaxes(hess, 1, 2))


def steady_state_form(times, theta, amount, ii):
    """Concentrations after an SS=1 oral dose at t = 0 every ii (lagged): the implied doses at
    -k ii + lag, k >= 1, summed in closed form (geometric series), plus the dose at lag."""
    ka, cl, v, f, lag = theta
    ke = cl / v
    t = np.asarray(times) - lag
    out = np.zeros(len(times))
    for rate, sign in ((ke, 1), (ka, -1)):
        # sum_{k >= 0} exp(-rate (t + k ii)) over the doses at or before t (t >= 0; the dose at
        # lag is k = 0), and the implied ones alone before it
        implied = np.exp(-rate * (t + ii)) / (1 - np.exp(-rate * ii))
        own = np.where(t >= 0, np.exp(-rate * np.maximum(t, 0)), 0.0)
        out += sign * (implied + own)
    return f * amount * ka / (ka - ke) * out / v


def test_steady_state_hessian_matches_the_closed_form():
    p = pkscan.Predictor("ID,TIME,AMT,CMT,EVID,II,SS,DV\n1,0,100,1,1,12,1,.\n"
                         "1,0.2,.,2,0,.,.,3\n1,2,.,2,0,.,.,4\n1,9,.,2,0,.,.,2\n", "two_compartment")
    times = p.observation_times
    pred, _, hess = p.predict_gradient(0, row(p, VALUES), hessian=True, columns=NAMES)
    np.testing.assert_allclose(pred, steady_state_form(times, VALUES, 100, 12), rtol=1e-12)
    want = fd_hessian(lambda t: steady_state_form(times, t, 100, 12), VALUES.copy())
    np.testing.assert_allclose(hess, want, rtol=1e-6, atol=1e-6 * np.abs(want).max())


def test_columns_by_index_and_default(predictor):
    r = row(predictor, VALUES)
    idx = [predictor.parameter_names.index(n) for n in NAMES]
    _, _, by_name = predictor.predict_gradient(0, r, hessian=True, columns=NAMES)
    _, _, by_index = predictor.predict_gradient(0, r, hessian=True, columns=idx)
    _, _, every = predictor.predict_gradient(0, r, hessian=True)
    np.testing.assert_array_equal(by_name, by_index)
    P = len(predictor.parameter_names)
    assert every.shape[1:] == (P, P)
    np.testing.assert_allclose(every[:, idx][:, :, idx], by_name, rtol=1e-12, atol=1e-300)


@pytest.mark.parametrize("error,sigma", [("additive", [0.4]), ("proportional", [0.15]),
                                         ("combined", [0.3, 0.1])])
def test_log_likelihood_hessian_matches_differences_of_the_gradient(predictor, error, sigma):
    r = row(predictor, VALUES)
    idx = [predictor.parameter_names.index(n) for n in NAMES]
    sigma = np.asarray(sigma, dtype=float)
    for s in range(predictor.subjects):
        value, grad, hess = predictor.log_likelihood(s, r, error, sigma, hessian=True,
                                                     columns=NAMES)
        v0, g0, gs0 = predictor.log_likelihood(s, r, error, sigma)
        assert value == v0
        np.testing.assert_array_equal(grad, np.concatenate([g0[idx], gs0]))
        x0 = np.concatenate([VALUES, sigma])
        m = len(x0)

        def gradient(x):
            rr = row(predictor, x[:5])
            _, g, gs = predictor.log_likelihood(s, rr, error, x[5:])
            return np.concatenate([g[idx], gs])

        fd = np.zeros((m, m))
        for b in range(m):
            h = 1e-5 * abs(x0[b])
            up, down = x0.copy(), x0.copy()
            up[b] += h
            down[b] -= h
            fd[:, b] = (gradient(up) - gradient(down)) / (2 * h)
        np.testing.assert_allclose(hess, fd, rtol=1e-5, atol=1e-6 * np.abs(fd).max())
        np.testing.assert_array_equal(hess, hess.T)


def test_bad_input(predictor):
    r = row(predictor, VALUES)
    with pytest.raises(ValueError, match="not a parameter"):
        predictor.predict_gradient(0, r, hessian=True, columns=["nope"])
    with pytest.raises(ValueError, match="listed twice"):
        predictor.predict_gradient(0, r, hessian=True, columns=["ka", "ka"])
    with pytest.raises(ValueError, match="only read with hessian=True"):
        predictor.predict_gradient(0, r, columns=["ka"])
    # Out of the domain: -inf with zeros, no exception.
    bad = r.copy()
    bad[predictor.parameter_names.index("ka")] = -1.0
    value, grad, hess = predictor.log_likelihood(0, bad, "additive", 0.4, hessian=True,
                                                 columns=NAMES)
    assert value == -np.inf and not grad.any() and not hess.any()
