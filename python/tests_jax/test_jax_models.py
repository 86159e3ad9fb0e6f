"""pkscan.jax in models: the plain-JAX formulation (lax.scan of x_t = K x_{t-1} over
stacked per-subject K) gives the same log-density and gradient, and NumPyro's NUTS samples a
population model to the end and recovers the true typical values."""
import time
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.scipy.linalg import expm

import pkscan
import pkscan.jax as pj

DT, T = 0.5, 48                      # grid 0, 0.5, ..., 24 h
DOSE_STEPS = (0, 24)                 # 100 mg into the depot at 0 and 12 h
OBS_STEPS = np.array([1, 2, 4, 6, 8, 12, 16, 20, 26, 28, 32, 40, 48])


def write_dataset(path, dv):
    """One subject per row of dv [S, len(OBS_STEPS)]; NaN DV written as '.'."""
    lines = ["ID,TIME,AMT,CMT,EVID,DV"]
    for s in range(dv.shape[0]):
        events = [(k, f"{s + 1},{k * DT:g},100,1,1,.") for k in DOSE_STEPS]
        events += [(k + 0.5, f"{s + 1},{k * DT:g},.,2,0,"
                    + ("." if np.isnan(dv[s, i]) else repr(float(dv[s, i]))))
                   for i, k in enumerate(OBS_STEPS)]
        lines += [line for _, line in sorted(events)]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def seed_concentrations(theta):
    """The model in plain JAX: per-subject K = expm(A dt) stacked [S, 2, 2] (exact
    propagation, as pkscan's Predictor on datasets), lax.scan of x_t = K x_{t-1} + b_t over the
    grid, amounts divided by the central volume at the end. theta [S, 3] = log(ka, ke, v)."""
    ka, ke, v = jnp.exp(theta[:, 0]), jnp.exp(theta[:, 1]), jnp.exp(theta[:, 2])
    zero = jnp.zeros_like(ka)
    A = jnp.stack([jnp.stack([-ka, zero], -1), jnp.stack([ka, -ke], -1)], -2)   # [S, 2, 2]
    K = jax.vmap(expm)(A * DT)
    S = theta.shape[0]
    b = jnp.zeros((T + 1, S, 2)).at[jnp.array(DOSE_STEPS), :, 0].set(100.0)
    x0 = b[0]

    def step(x, b_t):
        x = jnp.einsum("nij,nj->ni", K, x) + b_t
        return x, x

    _, xs = jax.lax.scan(step, x0, b[1:])
    xs = jnp.concatenate([x0[None], xs])                       # [T + 1, S, 2]
    return xs[OBS_STEPS, :, 1].T / v[:, None]                  # [S, observations]


def seed_loglik(theta, sigma, dv):
    c = seed_concentrations(theta)
    r = (dv - c) / sigma
    return jnp.sum(-0.5 * r * r - jnp.log(sigma) - 0.5 * jnp.log(2 * jnp.pi))


def test_seed_plain_jax_model_gives_the_same_log_density_and_gradient(tmp_path):
    S = 6
    rng = np.random.default_rng(11)
    theta = np.log([1.0, 0.15, 12.0]) + 0.25 * rng.standard_normal((S, 3))
    dv = np.asarray(seed_concentrations(jnp.asarray(theta)))
    dv = dv + 0.2 * rng.standard_normal(dv.shape)
    p = pkscan.Predictor(write_dataset(tmp_path / "grid.csv", dv), "two_compartment")

    def pk_loglik(theta, sigma):
        rows = pj.parameters(p, {"ka": jnp.exp(theta[:, 0]), "ke": jnp.exp(theta[:, 1]),
                                 "v_central": jnp.exp(theta[:, 2])})
        return pj.log_likelihood(p, rows, sigma)

    args = (jnp.asarray(theta), jnp.float64(0.3))
    v_pk, (g_pk, gs_pk) = jax.jit(jax.value_and_grad(pk_loglik, argnums=(0, 1)))(*args)
    v_seed, (g_seed, gs_seed) = jax.jit(jax.value_and_grad(
        lambda th, s: seed_loglik(th, s, jnp.asarray(dv)), argnums=(0, 1)))(*args)
    assert abs(float(v_pk) - float(v_seed)) <= 1e-10 * abs(float(v_seed))
    np.testing.assert_allclose(g_pk, g_seed, rtol=1e-8, atol=1e-9)
    np.testing.assert_allclose(gs_pk, gs_seed, rtol=1e-10)


TRUE = {"log_ka": np.log(1.0), "log_ke": np.log(0.15), "log_v": np.log(12.0)}
OMEGA, SIGMA_PROP = 0.25, 0.1


@pytest.fixture(scope="module")
def population(tmp_path_factory):
    """12 simulated subjects (log-normal variability on ka, ke, v; 10% proportional error)."""
    S = 12
    rng = np.random.default_rng(2026)
    d = tmp_path_factory.mktemp("nuts")
    blank = pkscan.Predictor(write_dataset(d / "blank.csv", np.full((S, len(OBS_STEPS)), np.nan)),
                             "two_compartment")
    eta = OMEGA * rng.standard_normal((S, 3))
    rows = blank.make_parameters({"ka": np.exp(TRUE["log_ka"] + eta[:, 0]),
                                  "ke": np.exp(TRUE["log_ke"] + eta[:, 1]),
                                  "v_central": np.exp(TRUE["log_v"] + eta[:, 2])})
    pred = blank.predict_all(rows).reshape(S, -1)
    dv = pred * (1 + SIGMA_PROP * rng.standard_normal(pred.shape))
    return pkscan.Predictor(write_dataset(d / "population.csv", dv), "two_compartment")


def population_model(p):
    import numpyro
    import numpyro.distributions as dist

    def model():
        log_ka = numpyro.sample("log_ka", dist.Normal(0.0, 1.0))
        log_ke = numpyro.sample("log_ke", dist.Normal(-1.5, 1.0))
        log_v = numpyro.sample("log_v", dist.Normal(2.5, 1.0))
        omega = numpyro.sample("omega", dist.HalfNormal(0.5).expand([3]).to_event(1))
        sigma = numpyro.sample("sigma", dist.HalfNormal(0.5))
        with numpyro.plate("subjects", p.subjects):
            eta = numpyro.sample("eta", dist.Normal(0.0, 1.0).expand([3]).to_event(1))
        rows = pj.parameters(p, {"ka": jnp.exp(log_ka + omega[0] * eta[:, 0]),
                                 "ke": jnp.exp(log_ke + omega[1] * eta[:, 1]),
                                 "v_central": jnp.exp(log_v + omega[2] * eta[:, 2])})
        numpyro.factor("loglik", pj.log_likelihood(p, rows, sigma, error="proportional"))

    return model


def test_nuts_recovers_the_typical_values(population):
    from numpyro.infer import MCMC, NUTS

    start = time.perf_counter()
    mcmc = MCMC(NUTS(population_model(population)), num_warmup=300, num_samples=300,
                progress_bar=False)
    mcmc.run(jax.random.PRNGKey(0))
    draws = mcmc.get_samples()
    elapsed = time.perf_counter() - start
    for name, truth in TRUE.items():
        lo, hi = np.quantile(np.asarray(draws[name]), [0.05, 0.95])
        print(f"{name}: true {truth:.3f}, 90% interval [{lo:.3f}, {hi:.3f}]")
        assert lo <= truth <= hi, (name, truth, lo, hi)
    lo, hi = np.quantile(np.asarray(draws["sigma"]), [0.05, 0.95])
    print(f"sigma: true {SIGMA_PROP}, 90% interval [{lo:.3f}, {hi:.3f}]; {elapsed:.1f} s")
    assert 0.05 < lo and hi < 0.2   # (its 90% interval for this seed is [0.105, 0.129])
    assert int(np.sum(mcmc.get_extra_fields()["diverging"])) < 15


def test_nuts_vectorized_chains_and_out_of_domain_proposals(population):
    from numpyro.infer import MCMC, NUTS
    from numpyro.infer.util import log_density

    model = population_model(population)
    mcmc = MCMC(NUTS(model), num_warmup=100, num_samples=100, num_chains=2,
                chain_method="vectorized", progress_bar=False)
    mcmc.run(jax.random.PRNGKey(1))
    assert mcmc.get_samples()["log_ka"].shape == (200,)
    # what a sampler's step-size search proposes: an overflowing sigma, a NaN volume
    params = {k: v[0] for k, v in mcmc.get_samples().items()}
    for bad in ({"sigma": jnp.inf}, {"log_v": jnp.nan}, {"log_ke": 800.0}):
        with warnings.catch_warnings():   # NumPyro warns of the NaN it is given
            warnings.simplefilter("ignore", UserWarning)
            value, _ = log_density(model, (), {}, {**params, **bad})
        assert not np.isfinite(float(value))   # rejected; and no exception from pkscan


def seed_concentrations_euler(theta):
    """The plain-JAX formulation with euler steps: per-subject K = I + A dt stacked [S, 2, 2],
    lax.scan of x_t = K x_{t-1} + b_t over the grid, amounts divided by the central volume at
    the end."""
    ka, ke, v = jnp.exp(theta[:, 0]), jnp.exp(theta[:, 1]), jnp.exp(theta[:, 2])
    zero = jnp.zeros_like(ka)
    A = jnp.stack([jnp.stack([-ka, zero], -1), jnp.stack([ka, -ke], -1)], -2)
    K = jnp.eye(2) + A * DT
    S = theta.shape[0]
    b = jnp.zeros((T + 1, S, 2)).at[jnp.array(DOSE_STEPS), :, 0].set(100.0)

    def step(x, b_t):
        x = jnp.einsum("nij,nj->ni", K, x) + b_t
        return x, x

    _, xs = jax.lax.scan(step, b[0], b[1:])
    xs = jnp.concatenate([b[0][None], xs])
    return xs[OBS_STEPS, :, 1].T / v[:, None]


def test_seed_euler_formulation_gives_the_same_log_density_and_gradient():
    """The plain-JAX euler lax.scan against pkscan.jax's euler Simulator on the same grid, the
    same Gaussian log-likelihood around both."""
    S = 6
    rng = np.random.default_rng(12)
    theta = np.log([1.0, 0.15, 12.0]) + 0.25 * rng.standard_normal((S, 3))
    dv = np.asarray(seed_concentrations_euler(jnp.asarray(theta)))
    dv = jnp.asarray(dv + 0.2 * rng.standard_normal(dv.shape))
    sim = pj.Simulator("two_compartment",
                       doses=[{"compartment": "depot", "time": 0, "amount": 100,
                               "every": DOSE_STEPS[1] * DT, "repeat": 1}],
                       dt=DT, steps=T, subjects=S, times=OBS_STEPS * DT, discretization="euler")

    def gaussian(c, sigma):
        r = (dv - c) / sigma
        return jnp.sum(-0.5 * r * r - jnp.log(sigma) - 0.5 * jnp.log(2 * jnp.pi))

    def pk_loglik(th, sigma):
        rows = pj.parameters(sim, {"ka": jnp.exp(th[:, 0]), "ke": jnp.exp(th[:, 1]),
                                   "v_central": jnp.exp(th[:, 2])})
        return gaussian(sim(rows)[:, :, 1], sigma)

    def seed_loglik_euler(th, sigma):
        return gaussian(seed_concentrations_euler(th), sigma)

    args = (jnp.asarray(theta), jnp.float64(0.3))
    v_pk, (g_pk, gs_pk) = jax.jit(jax.value_and_grad(pk_loglik, argnums=(0, 1)))(*args)
    v_seed, (g_seed, gs_seed) = jax.jit(jax.value_and_grad(seed_loglik_euler,
                                                           argnums=(0, 1)))(*args)
    assert abs(float(v_pk) - float(v_seed)) <= 1e-10 * abs(float(v_seed))
    np.testing.assert_allclose(g_pk, g_seed, rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(gs_pk, gs_seed, rtol=1e-10)
    # and the euler model is not the exact one (the comparison above is not vacuous)
    assert abs(float(seed_loglik(jnp.asarray(theta), 0.3, dv)) - float(v_seed)) > 1e-3
