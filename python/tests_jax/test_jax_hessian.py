"""pkscan.jax's second derivatives: jax.hessian, jax.jacfwd(jax.grad(f)) and jax.hessian under
vmap on log_likelihood and predict, against the Predictor's exact Hessians and central
differences of pkscan's exact gradients."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pkscan.jax as pj

from test_jax import ERRORS, free, p, rows  # noqa: F401  (the same dataset and fixtures)


def loglik_of_free(p, rows, error):
    """The total log-likelihood as a function of (ka, ke, V of every subject, sigma)."""
    cols = jnp.asarray(free(p))
    base = jnp.asarray(rows)  # NaN in the unused columns, which theta does not touch

    def f(theta, sigma):
        return pj.log_likelihood(p, base.at[:, cols].set(theta), sigma, error=error)
    return f


@pytest.mark.parametrize("error,sigma", ERRORS)
def test_hessian_matches_the_predictor(p, rows, error, sigma):
    cols = free(p)
    theta = jnp.asarray(rows[:, cols])
    sig = jnp.asarray(sigma)
    f = loglik_of_free(p, rows, error)
    h = jax.jit(jax.hessian(f, argnums=(0, 1)))(theta, sig)
    (h_tt, h_ts), (h_st, h_ss) = h
    S, m, k = theta.shape[0], len(cols), len(sigma)
    want_ss = np.zeros((k, k))
    for s in range(S):
        _, _, hs = p.log_likelihood(s, rows[s], error, sigma, hessian=True, columns=cols)
        np.testing.assert_allclose(np.asarray(h_tt)[s, :, s, :], hs[:m, :m], rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(np.asarray(h_ts)[s, :, :], hs[:m, m:], rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(np.asarray(h_st)[:, s, :], hs[m:, :m], rtol=1e-12, atol=1e-12)
        want_ss += hs[m:, m:]
        # Different subjects do not interact.
        others = [q for q in range(S) if q != s]
        assert not np.asarray(h_tt)[s, :, others, :].any()
    np.testing.assert_allclose(h_ss, want_ss, rtol=1e-12)
    # Forward over reverse gives the same matrix.
    jf = jax.jacfwd(jax.grad(f, argnums=1), argnums=1)(theta, sig)
    np.testing.assert_allclose(jf, h_ss, rtol=1e-12)


def test_hessian_matches_differences_of_the_exact_gradient(p, rows):
    cols = free(p)
    theta = np.asarray(rows[:, cols])
    sig = jnp.asarray([0.2, 0.1])
    f = loglik_of_free(p, rows, "combined")
    g = jax.jit(jax.grad(f))
    h = np.asarray(jax.jit(jax.hessian(f))(jnp.asarray(theta), sig))
    s = 2  # one subject's block, by central differences of pkscan's exact gradient
    for a in range(len(cols)):
        step = 1e-5 * abs(theta[s, a])
        up, down = theta.copy(), theta.copy()
        up[s, a] += step
        down[s, a] -= step
        fd = (np.asarray(g(jnp.asarray(up), sig)) - np.asarray(g(jnp.asarray(down), sig))) / (2 * step)
        np.testing.assert_allclose(h[s, :, s, a], fd[s], rtol=1e-6, atol=1e-8 * np.abs(fd).max())


def test_hessian_under_vmap(p, rows):
    cols = free(p)
    theta = jnp.asarray(rows[:, cols])
    batch = jnp.stack([theta, theta * 1.05, theta * 0.9])
    sig = jnp.asarray([0.3])
    f = loglik_of_free(p, rows, "additive")
    hv = jax.vmap(jax.hessian(f), in_axes=(0, None))(batch, sig)
    for b in range(3):
        np.testing.assert_allclose(hv[b], jax.hessian(f)(batch[b], sig), rtol=1e-13, atol=1e-13)


def test_predict_hessian(p, rows):
    cols = free(p)
    r = jnp.asarray(rows)

    def first_prediction(theta):
        rr = r.at[0, jnp.asarray(cols)].set(theta)
        return pj.predict(p, rr)[0]

    h = jax.hessian(first_prediction)(r[0, jnp.asarray(cols)])
    _, _, want = p.predict_gradient(0, rows[0], hessian=True, columns=cols)
    np.testing.assert_allclose(h, want[0], rtol=1e-12, atol=1e-14)
