"""Property-based test (Hypothesis) of the likelihood's promises on both Python surfaces, the
C++ Predictor (pkscan.Predictor) and pkscan.jax, at the edges of the double range.

A one-compartment IV bolus (amount = AMT exp(-ke t), prediction = amount / v_central) with two
subjects; ke, v_central and sigma are drawn from extreme values (0, -0, subnormals, 1e-300 ..
1e300, the largest double, negatives, NaN, inf) and from the whole float range. The promises:
- never NaN, never an exception (not from inside jax.jit or jax.grad either);
- out of the domain (ke not finite and >= 0, v_central not finite and > 0, a sigma not finite
  and > 0) exactly when the value is -inf, with zero gradients;
- in the domain: the log-density of an independent NumPy closed form (the naive formula in
  long double, whose range holds sigma^2 and the squared residual for any double), finite, or
  -inf where that is below the range of double (or there is no density: a proportional model
  at a prediction of 0);
- the Predictor's value and gradients and pkscan.jax's (jit, value_and_grad) are the same bits
  (gradients up to XLA flushing subnormal results of its own arithmetic to zero).
Derandomized: the same inputs on every run."""

import collections
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pkscan
import pkscan.jax as pj

CSV = ("ID,TIME,AMT,CMT,EVID,DV\n1,0,100,1,1,.\n1,1,.,1,0,5\n1,4,.,1,0,2\n"
       "2,0,50,1,1,.\n2,1,.,1,0,3\n2,4,.,1,0,1\n")
AMT = np.array([100.0, 50.0])
TIMES = np.array([1.0, 4.0])
DV = np.array([[5.0, 2.0], [3.0, 1.0]])
ERRORS = {"additive": 1, "proportional": 1, "combined": 2}
EXAMPLES = 1000
TRIED = collections.Counter()  # inputs tried, by outcome (reported by test_count)

EDGES = [0.0, -0.0, 5e-324, 1e-320, 2.2250738585072014e-308, 1e-300, 1e-150, 1e-5, 0.3, 1.0,
         10.0, 1e150, 1e300, 1e308, 1.7976931348623157e308, -1e-300, -1.0, -1e308,
         math.nan, math.inf, -math.inf]
POSITIVE = st.one_of(st.sampled_from([x for x in EDGES if x > 0 and math.isfinite(x)]),
                     st.floats(min_value=1e-300, max_value=1e300),
                     st.floats(min_value=5e-324, max_value=1.7976931348623157e308))
ANY = st.one_of(st.sampled_from(EDGES),
                st.floats(allow_nan=True, allow_infinity=True, allow_subnormal=True))
VALUES = st.one_of(POSITIVE, POSITIVE, POSITIVE, ANY)  # mostly in the domain


@pytest.fixture(scope="module")
def problem():
    model = pkscan.Model.linear(["central"], eliminations=[("central", "ke")])
    p = pkscan.Predictor(CSV, model)
    names = p.parameter_names
    return p, names.index("ke"), names.index("v_central")


@pytest.fixture(scope="module")
def jax_call(problem):
    """error -> jit(value_and_grad) of pkscan.jax.log_likelihood (total, per subject)."""
    p = problem[0]
    out = {}
    for error in ERRORS:
        f = jax.value_and_grad(lambda r, s, e=error: pj.log_likelihood(p, r, s, error=e),
                               argnums=(0, 1))
        per = jax.jit(lambda r, s, e=error: pj.log_likelihood(p, r, s, error=e,
                                                              per_subject=True)[1])
        out[error] = (jax.jit(f), per)
    return out


def same_up_to_subnormals(a, b):
    """Equal, or apart by no more than a few subnormal terms (of the two subjects' sum)."""
    tiny = np.finfo(np.float64).tiny
    return a.shape == b.shape and bool(np.all((a == b) | (np.abs(a - b) <= 4 * tiny)))


def in_domain(ke, v, sigma):
    return (all(math.isfinite(x) and x >= 0 for x in ke)
            and all(math.isfinite(x) and x > 0 for x in v)
            and all(math.isfinite(s) and s > 0 for s in sigma))


def reference(ke, v, error, sigma):
    """Per-subject log-likelihood: predictions in float64 NumPy, the naive Gaussian density in
    long double; None where the predictions leave the normal range (there a few ulps of the
    prediction can decide between a finite value and -inf)."""
    ld = np.longdouble
    out = []
    for s in range(2):
        with np.errstate(all="ignore"):
            f = AMT[s] * np.exp(-ke[s] * TIMES) / v[s]
        if not np.all((f == 0) | ((np.abs(f) > 1e-290) & (np.abs(f) < 1e290))):
            return None
        f = f.astype(ld)
        sa = ld(sigma[0])
        sp = ld(sigma[-1])
        var = {"additive": sa * sa + 0 * f, "proportional": sp * sp * f * f,
               "combined": sa * sa + sp * sp * f * f}[error]
        r = DV[s].astype(ld) - f
        with np.errstate(all="ignore"):
            terms = -ld(0.5) * np.log(ld(2) * ld(np.pi)) - ld(0.5) * np.log(var) \
                - ld(0.5) * r * r / var
        total = np.sum(terms)
        scale = np.sum(np.abs(terms)) + 1
        out.append((total, scale))
    return out


@settings(derandomize=True, max_examples=EXAMPLES, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(ke=st.lists(VALUES, min_size=2, max_size=2), v=st.lists(VALUES, min_size=2, max_size=2),
       error=st.sampled_from(sorted(ERRORS)), sigma=st.lists(VALUES, min_size=2, max_size=2))
def test_likelihood_promises(problem, jax_call, ke, v, error, sigma):
    p, cke, cv = problem
    sigma = sigma[:ERRORS[error]]
    rows = p.make_parameters({"ke": np.array(ke), "v_central": np.array(v)})
    # The C++ Predictor: total with gradients, and per subject.
    total, g, gs = p.log_likelihood_all(rows, error, sigma)
    per = p.log_likelihood_all(rows, error, sigma, gradient=False, per_subject=True)
    each = [p.log_likelihood(s, rows[s], error, sigma) for s in range(2)]
    assert not math.isnan(total) and not np.any(np.isnan(per)) and not np.any(np.isnan(g)) \
        and not np.any(np.isnan(gs))
    np.testing.assert_array_equal(per, [e[0] for e in each])
    assert total == -math.inf or math.isfinite(total)
    assert (total == -math.inf) == (per[0] == -math.inf or per[1] == -math.inf)
    # pkscan.jax inside jit and grad: the same bits, no exception.
    vg, per_jax = jax_call[error]
    jv, (jg, jgs) = vg(jnp.asarray(rows), jnp.asarray(sigma))
    assert float(jv) == total or (math.isnan(float(jv)) and math.isnan(total))
    np.testing.assert_array_equal(np.asarray(per_jax(jnp.asarray(rows), jnp.asarray(sigma))), per)
    # (XLA's own arithmetic, the sum and products of the gradient rule, flushes subnormal inputs
    # and results to zero: equal bits, or apart by a few subnormals.)
    assert same_up_to_subnormals(np.asarray(jg), g), (jg, g)
    assert same_up_to_subnormals(np.asarray(jgs), gs), (jgs, gs)

    if not in_domain(ke, v, sigma):
        assert total == -math.inf and np.all(g == 0) and np.all(gs == 0)
        TRIED["out of the domain: -inf"] += 1
        return
    if total == -math.inf:
        assert np.all(g == 0) and np.all(gs == 0)
    want = reference(ke, v, error, sigma)
    if want is None:
        TRIED["in the domain, predictions beyond the normal range"] += 1
        return
    TRIED["in the domain, against the closed form"] += 1
    for s, (w, scale) in enumerate(want):
        if not (w >= -np.finfo(np.float64).max):  # below the range of double, or no density
            assert per[s] == -math.inf, (s, w, per[s])
        else:
            assert math.isfinite(per[s]), (s, w, per[s])
            assert abs(np.longdouble(per[s]) - w) <= 1e-12 * scale, (s, w, per[s])


def test_count():
    """Runs after the property test (file order): every example was tried."""
    print(f"test_likelihood_promises tried {sum(TRIED.values())} inputs: {dict(TRIED)}")
    assert sum(TRIED.values()) >= EXAMPLES // 2
    assert TRIED["in the domain, against the closed form"] >= EXAMPLES // 10
