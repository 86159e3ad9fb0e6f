"""pkscan.jax: jit, grad and vmap against pkscan's own Predictor, central finite differences and
unbatched calls; -inf / NaN and no exception out of the domain; float32."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pkscan
import pkscan.jax as pj

ERRORS = [("additive", [0.3]), ("proportional", [0.15]), ("combined", [0.2, 0.1])]


@pytest.fixture(scope="module")
def p(source_dir):
    return pkscan.Predictor(str(source_dir / "config/examples/fit/dataset.csv"), "two_compartment")


@pytest.fixture(scope="module")
def rows(p):
    rng = np.random.default_rng(1)
    S = p.subjects
    return p.make_parameters({"ka": 1.2 * np.exp(0.2 * rng.standard_normal(S)),
                              "ke": 0.15 * np.exp(0.2 * rng.standard_normal(S)),
                              "v_central": 12.0 * np.exp(0.2 * rng.standard_normal(S))})


def free(p):
    return [p.parameter_names.index(n) for n in ("ka", "ke", "v_central")]


@pytest.mark.parametrize("error,sigma", ERRORS)
def test_value_and_gradient_match_predictor(p, rows, error, sigma):
    f = jax.jit(jax.value_and_grad(lambda r, s: pj.log_likelihood(p, r, s, error=error),
                                   argnums=(0, 1)))
    v, (g, gs) = f(rows, jnp.asarray(sigma))
    rv, rg, rgs = p.log_likelihood_all(rows, error, sigma)
    assert np.isclose(v, rv, rtol=1e-13, atol=0)
    cols = free(p)
    np.testing.assert_allclose(np.asarray(g)[:, cols], rg[:, cols], rtol=1e-12)
    np.testing.assert_allclose(gs, rgs, rtol=1e-12)
    total, per = pj.log_likelihood(p, rows, jnp.asarray(sigma), error=error, per_subject=True)
    np.testing.assert_allclose(per, p.log_likelihood_all(rows, error, sigma, gradient=False,
                                                         per_subject=True), rtol=1e-13)
    assert np.isclose(total, rv, rtol=1e-13)


@pytest.mark.parametrize("error,sigma", ERRORS)
def test_gradient_matches_central_differences(p, rows, error, sigma):
    def f(r, s):
        return pj.log_likelihood(p, r, s, error=error)

    g, gs = jax.grad(f, argnums=(0, 1))(rows, jnp.asarray(sigma))
    worst = 0.0
    for s_ in (0, 5):
        for c in free(p):
            h = 1e-6 * rows[s_, c]
            up, dn = rows.copy(), rows.copy()
            up[s_, c] += h
            dn[s_, c] -= h
            fd = (float(f(up, jnp.asarray(sigma))) - float(f(dn, jnp.asarray(sigma)))) / (2 * h)
            err = abs(fd - float(g[s_, c])) / max(1.0, abs(fd))
            worst = max(worst, err)
    for k in range(len(sigma)):
        h = 1e-6 * sigma[k]
        up, dn = np.array(sigma, float), np.array(sigma, float)
        up[k] += h
        dn[k] -= h
        fd = (float(f(rows, up)) - float(f(rows, dn))) / (2 * h)
        worst = max(worst, abs(fd - float(gs[k])) / max(1.0, abs(fd)))
    assert worst < 1e-5, worst


def test_vmap_is_one_batched_call_equal_to_unbatched_calls(p, rows):
    rng = np.random.default_rng(2)
    B = 5
    batch = rows[None] * np.exp(0.1 * rng.standard_normal((B,) + rows.shape))
    sig = 0.2 + 0.1 * rng.random((B, 1))

    def f(r, s):
        return pj.log_likelihood(p, r, s, error="proportional")

    vg = jax.jit(jax.vmap(jax.value_and_grad(f, argnums=(0, 1))))
    v, (g, gs) = vg(batch, sig)
    for b in range(B):
        vb, (gb, gsb) = jax.value_and_grad(f, argnums=(0, 1))(batch[b], sig[b])
        assert float(v[b]) == float(vb)
        np.testing.assert_array_equal(g[b], gb)
        np.testing.assert_array_equal(gs[b], gsb)
    # the batch is one FFI call in the compiled program (no loop over batch elements)
    hlo = jax.jit(jax.vmap(f)).lower(batch, sig).as_text()
    assert hlo.count("pkscan_loglik") == 1
    assert "while" not in hlo
    # nested vmap, and vmap over sigma only
    nested = jax.vmap(jax.vmap(f, in_axes=(0, None)), in_axes=(None, 0))(batch, sig)
    assert nested.shape == (B, B)
    assert float(nested[3, 2]) == float(f(batch[2], sig[3]))
    only_sigma = jax.vmap(f, in_axes=(None, 0))(rows, sig)
    np.testing.assert_array_equal(only_sigma, [float(f(rows, s)) for s in sig])


BAD_PARAMS = [("ka", -1.0), ("ke", np.inf), ("v_central", np.nan), ("v_central", -np.inf),
              ("ke", -0.1)]


@pytest.mark.parametrize("name,value", BAD_PARAMS)
def test_out_of_domain_parameters_give_minus_inf_and_zero_gradient(p, rows, name, value):
    bad = rows.copy()
    bad[3, p.parameter_names.index(name)] = value
    f = jax.jit(jax.value_and_grad(lambda r, s: pj.log_likelihood(p, r, s), argnums=(0, 1)))
    v, (g, gs) = f(bad, jnp.array([0.3]))
    assert float(v) == -np.inf
    assert np.all(np.asarray(g) == 0) and np.all(np.asarray(gs) == 0)
    total, per = pj.log_likelihood(p, bad, 0.3, per_subject=True)
    assert float(per[3]) == -np.inf and np.all(np.isfinite(np.delete(np.asarray(per), 3)))
    pred = pj.predict(p, bad)
    o = p.observation_offsets
    assert np.all(np.isnan(pred[o[3]:o[4]]))
    assert np.all(np.isfinite(np.delete(np.asarray(pred), np.arange(o[3], o[4]))))
    gp = jax.grad(lambda r: jnp.nansum(pj.predict(p, r)))(bad)
    assert np.all(np.isfinite(gp)) and np.all(np.asarray(gp)[3] == 0)


@pytest.mark.parametrize("sigma", [np.inf, 0.0, -0.3, np.nan])
@pytest.mark.parametrize("error", ["additive", "proportional"])
def test_out_of_domain_sigma_gives_minus_inf(p, rows, error, sigma):
    v, (g, gs) = jax.jit(jax.value_and_grad(
        lambda r, s: pj.log_likelihood(p, r, s, error=error), argnums=(0, 1)))(rows, sigma)
    assert float(v) == -np.inf
    assert np.all(np.asarray(g) == 0) and float(gs) == 0
    # one bad element of a batch leaves the others alone
    vs = jax.vmap(lambda s: pj.log_likelihood(p, rows, s, error=error))(jnp.array([0.3, sigma]))
    assert np.isfinite(vs[0]) and float(vs[1]) == -np.inf


def test_problem_errors_are_raised_when_traced(p, rows):
    with pytest.raises(ValueError, match="shape"):
        pj.log_likelihood(p, rows[:, :3], 0.3)
    with pytest.raises(ValueError, match="needs 2 values"):
        pj.log_likelihood(p, rows, 0.3, error="combined")
    with pytest.raises(ValueError, match="log_scale"):
        pj.log_likelihood(p, rows, 0.3, error="proportional", log_scale=True)
    with pytest.raises(ValueError, match="error is"):
        pj.log_likelihood(p, rows, 0.3, error="poisson")
    with pytest.raises(ValueError, match="shape"):
        pj.predict(p, rows[:2])
    with pytest.raises(TypeError):
        pj.predict("not a predictor", rows)


def test_predict_and_its_vjp_match_the_jacobian(p, rows):
    pred = jax.jit(lambda r: pj.predict(p, r))(rows)
    np.testing.assert_allclose(pred, p.predict_all(rows), rtol=1e-14)
    w = np.random.default_rng(3).standard_normal(p.observations)
    g = jax.grad(lambda r: jnp.dot(pj.predict(p, r), w))(rows)
    _, jac = p.predict_gradient_all(rows)
    want = np.zeros_like(rows)
    np.add.at(want, p.observation_subjects, np.nan_to_num(jac) * w[:, None])
    np.testing.assert_allclose(g, want, rtol=1e-12, atol=1e-12)
    # vmap of predict
    batch = np.stack([rows, rows * 1.1])
    vp = jax.vmap(lambda r: pj.predict(p, r))(batch)
    np.testing.assert_array_equal(vp[1], pj.predict(p, batch[1]))


def test_float32(p, rows):
    r32 = jnp.asarray(rows, dtype=jnp.float32)
    v, g = jax.value_and_grad(lambda r: pj.log_likelihood(p, r, jnp.float32(0.3)))(r32)
    assert v.dtype == jnp.float32 and g.dtype == jnp.float32
    ref = p.log_likelihood_all(np.asarray(r32, dtype=np.float64), "additive", 0.3,
                               gradient=False)
    assert np.isclose(float(v), ref, rtol=1e-6)
    pred = pj.predict(p, r32)
    assert pred.dtype == jnp.float32
    np.testing.assert_allclose(pred, p.predict_all(np.asarray(r32, np.float64)), rtol=1e-6)


def test_parameters_helper(p):
    r = pj.parameters(p, {"ka": 1.0, "u": jnp.arange(1.0, p.subjects + 1), "v_central": 3.0})
    assert r.shape == (p.subjects, len(p.parameter_names))
    assert float(r[4, p.parameter_names.index("ke")]) == 5.0
    with pytest.raises(ValueError, match="unknown parameter"):
        pj.parameters(p, {"kz": 1.0})


def test_three_compartment_clearances_gradient_matches_central_differences(source_dir):
    """The model of docs/python.md's examples: cl, q and volumes, proportional error."""
    p3 = pkscan.Predictor(str(source_dir / "config/examples/fit/dataset.csv"), "three_compartment")
    names = ["ka", "cl", "v_central", "q", "v_peripheral"]
    theta = np.log([1.4, 4.6, 19.0, 2.0, 52.0, 0.1])

    def f(th):
        v = jnp.exp(th)
        rows = pj.parameters(p3, dict(zip(names, v[:5])))
        return pj.log_likelihood(p3, rows, v[5], error="proportional")

    g = np.asarray(jax.jit(jax.grad(f))(jnp.asarray(theta)))
    h = 1e-6
    fd = np.array([(float(f(theta + h * e)) - float(f(theta - h * e))) / (2 * h)
                   for e in np.eye(6)])
    np.testing.assert_allclose(g, fd, rtol=1e-5, atol=1e-4)


DOSES = [{"compartment": "depot", "time": 0, "amount": 100, "every": 12, "repeat": 3},
         {"compartment": "central", "time": 2, "amount": 50, "rate": 25}]
GRID_PARAMS = {"ka": np.array([1.2, 1.0, 0.8]), "k12": 0.4, "k21": 0.11, "ke": 0.25,
               "v_central": 20.0, "v_peripheral": 70.0}


def test_simulator_matches_pkscan_simulate_exact():
    r = pkscan.simulate("three_compartment", parameters=GRID_PARAMS, doses=DOSES, dt=0.25,
                        steps=96, discretization="exact")
    sim = pj.Simulator("three_compartment", DOSES, 0.25, 96, 3)
    rows = sim.predictor.make_parameters(GRID_PARAMS)
    c = jax.jit(sim)(rows)
    assert c.shape == (3, 97, 3)
    np.testing.assert_allclose(c, r["concentrations"], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(sim.amounts(rows), r["amounts"], rtol=1e-12, atol=1e-10)
    some = pj.Simulator("three_compartment", DOSES, 0.25, 96, 3, times=[0, 6, 12, 24])
    np.testing.assert_allclose(some(rows), r["concentrations"][:, [0, 24, 48, 96]], rtol=1e-12,
                               atol=1e-12)
    with pytest.raises(ValueError, match="grid"):
        pj.Simulator("three_compartment", DOSES, 0.25, 96, 3, times=[0.1])
    # Too large to hold: MemoryError saying how much, before anything is built.
    for discretization in ("exact", "euler"):
        with pytest.raises(MemoryError, match=r"Simulator: .* need [0-9.e+]+ GiB"):
            pj.Simulator("three_compartment", DOSES, 0.25, 10**6, 10**6,
                         discretization=discretization)


def test_simulator_gradient_and_vmap():
    sim = pj.Simulator("three_compartment", DOSES, 0.25, 96, 3, times=[1, 4, 13, 24])
    rows = sim.predictor.make_parameters(GRID_PARAMS)
    ke = sim.parameter_names.index("ke")

    def f(r):
        return jnp.sum(sim(r)[:, :, 1] ** 2)

    g = jax.grad(f)(rows)
    h = 1e-6
    up, dn = rows.copy(), rows.copy()
    up[1, ke] += h
    dn[1, ke] -= h
    fd = (float(f(up)) - float(f(dn))) / (2 * h)
    assert abs(float(g[1, ke]) - fd) <= 1e-6 * abs(fd)
    batch = np.stack([rows, rows * 1.05])
    np.testing.assert_array_equal(jax.vmap(sim)(batch)[1], sim(batch[1]))


def test_log_scale_matches_predictor(p, rows):
    v, g = jax.value_and_grad(lambda r: pj.log_likelihood(p, r, 0.2, log_scale=True))(rows)
    rv, rg, _ = p.log_likelihood_all(rows, "additive", 0.2, log_scale=True)
    assert np.isclose(float(v), rv, rtol=1e-13)
    np.testing.assert_allclose(np.asarray(g)[:, free(p)], rg[:, free(p)], rtol=1e-12)


@pytest.mark.parametrize("error,sigma", ERRORS)
def test_forward_mode_matches_reverse_mode_and_central_differences(p, rows, error, sigma):
    """jax.jvp / jax.jacfwd (forward mode, from the same exact gradients) against jax.grad and
    against central differences of Predictor.log_likelihood_all along a random direction."""
    cols = free(p)
    rng = np.random.default_rng(5)
    t_rows = np.zeros_like(rows)
    t_rows[:, cols] = rng.standard_normal((p.subjects, len(cols))) * rows[:, cols]
    t_sigma = 0.3 * np.asarray(sigma)

    def f(r, s):
        return pj.log_likelihood(p, r, s, error=error)

    s0 = jnp.asarray(sigma)
    v, dv = jax.jit(lambda r, s, tr, ts: jax.jvp(f, (r, s), (tr, ts)))(rows, s0, t_rows, t_sigma)
    g, gs = jax.grad(f, argnums=(0, 1))(rows, s0)
    assert np.isclose(float(dv), float(np.sum(np.asarray(g) * t_rows) + np.dot(gs, t_sigma)),
                      rtol=1e-12)
    h = 1e-6
    fd = (p.log_likelihood_all(rows + h * t_rows, error, s0 + h * t_sigma, gradient=False)
          - p.log_likelihood_all(rows - h * t_rows, error, s0 - h * t_sigma, gradient=False)) / (2 * h)
    assert abs(float(dv) - fd) <= 1e-6 * max(1.0, abs(fd)), (float(dv), fd)
    # jacfwd of the per-subject values: one column per direction, equal to jacrev
    per = lambda th: pj.log_likelihood(p, jnp.asarray(rows).at[:, cols[0]].set(th), s0,  # noqa: E731
                                       error=error, per_subject=True)[1]
    th0 = jnp.asarray(rows[:, cols[0]])
    np.testing.assert_allclose(jax.jacfwd(per)(th0), jax.jacrev(per)(th0), rtol=1e-12, atol=1e-14)


def test_predict_forward_mode_matches_the_jacobian_and_vmap(p, rows):
    """jax.jvp of predict is the Jacobian times the tangent (row i: its subject's row); jacfwd
    equals jacrev; a vmap of jvp equals the unbatched calls."""
    cols = free(p)
    rng = np.random.default_rng(8)
    t = np.zeros_like(rows)
    t[:, cols] = rng.standard_normal((p.subjects, len(cols)))
    _, dpred = jax.jvp(lambda r: pj.predict(p, r), (jnp.asarray(rows),), (jnp.asarray(t),))
    _, jac = p.predict_gradient_all(rows)
    want = np.sum(np.nan_to_num(jac) * t[p.observation_subjects], axis=1)
    np.testing.assert_allclose(dpred, want, rtol=1e-12, atol=1e-12)
    h = 1e-6
    fd = (p.predict_all(rows + h * t) - p.predict_all(rows - h * t)) / (2 * h)
    np.testing.assert_allclose(dpred, fd, rtol=1e-6, atol=1e-8)
    f = lambda ka: pj.predict(p, jnp.asarray(rows).at[:, cols[0]].set(ka))  # noqa: E731
    ka0 = jnp.asarray(rows[:, cols[0]])
    np.testing.assert_allclose(jax.jacfwd(f)(ka0), jax.jacrev(f)(ka0), rtol=1e-12, atol=1e-14)
    batch = jnp.stack([rows, rows * 1.1])
    tb = jnp.stack([t, 2 * t])
    _, db = jax.vmap(lambda r, dt: jax.jvp(lambda x: pj.predict(p, x), (r,), (dt,)))(batch, tb)
    _, d1 = jax.jvp(lambda x: pj.predict(p, x), (batch[1],), (tb[1],))
    np.testing.assert_allclose(db[1], d1, rtol=1e-14)


EULER_DOSES = DOSES + [{"compartment": "central", "time": 5, "amount": 30, "duration": 1.1}]


def test_simulator_euler_matches_pkscan_simulate_bit_for_bit():
    """Simulator(discretization="euler") gives pkscan.simulate(..., discretization="euler")'s
    concentrations exactly (same recurrence, same order), every grid point or some times."""
    r = pkscan.simulate("three_compartment", parameters=GRID_PARAMS, doses=EULER_DOSES, dt=0.25,
                        steps=96, discretization="euler", method="scan")
    sim = pj.Simulator("three_compartment", EULER_DOSES, 0.25, 96, 3, discretization="euler")
    assert sim.predictor is None and sim.times.shape == (97,)
    rows = pj.parameters(sim, GRID_PARAMS)
    c = jax.jit(sim)(rows)
    assert c.shape == (3, 97, 3)
    np.testing.assert_array_equal(c, r["concentrations"])
    np.testing.assert_allclose(sim.amounts(rows), r["amounts"], rtol=1e-14, atol=1e-12)
    some = pj.Simulator("three_compartment", EULER_DOSES, 0.25, 96, 3, times=[0, 6, 12, 24],
                        discretization="euler")
    np.testing.assert_array_equal(some(rows), r["concentrations"][:, [0, 24, 48, 96]])
    with pytest.raises(ValueError):
        pj.Simulator("three_compartment", EULER_DOSES, 0.25, 96, 3, times=[0.1],
                     discretization="euler")
    with pytest.raises(ValueError, match="discretization"):
        pj.Simulator("three_compartment", EULER_DOSES, 0.25, 96, 3, discretization="rk4")
    with pytest.raises(ValueError, match="shape"):
        sim(rows[:2])


def test_simulator_euler_derivatives_match_central_differences_of_simulate():
    """jacrev and jacfwd of the euler Simulator against central differences of pkscan.simulate
    (the engine's own forward values), for every free parameter; vmap equals unbatched calls;
    out-of-domain rows give NaN and zero derivatives, no exception."""
    times = [0.5, 2.25, 4, 6.5, 13, 24]
    sim = pj.Simulator("three_compartment", EULER_DOSES, 0.25, 96, 3, times=times,
                       discretization="euler")
    rows = np.asarray(pj.parameters(sim, GRID_PARAMS))
    idx = [int(round(t / 0.25)) for t in times]
    jr = np.asarray(jax.jacrev(sim)(jnp.asarray(rows)))   # [3, T, C, 3, P]
    jf = np.asarray(jax.jacfwd(sim)(jnp.asarray(rows)))
    np.testing.assert_allclose(jf, jr, rtol=1e-13, atol=1e-16)
    for name in GRID_PARAMS:
        col = sim.parameter_names.index(name)
        for s in range(3):
            h = 1e-6 * rows[s, col]
            p_up, p_dn = dict(GRID_PARAMS), dict(GRID_PARAMS)
            base = np.asarray(rows[:, col], dtype=float)
            p_up[name] = base + h * (np.arange(3) == s)
            p_dn[name] = base - h * (np.arange(3) == s)
            cu = pkscan.simulate("three_compartment", parameters=p_up, doses=EULER_DOSES, dt=0.25,
                                 steps=96, discretization="euler")["concentrations"][s, idx]
            cd = pkscan.simulate("three_compartment", parameters=p_dn, doses=EULER_DOSES, dt=0.25,
                                 steps=96, discretization="euler")["concentrations"][s, idx]
            fd = (cu - cd) / (2 * h)
            np.testing.assert_allclose(jr[s, :, :, s, col], fd, rtol=1e-6, atol=1e-7,
                                       err_msg=f"{name} subject {s}")
    batch = jnp.stack([rows, rows * 1.05])
    np.testing.assert_array_equal(jax.vmap(sim)(batch)[1], sim(batch[1]))
    bad = rows.copy()
    bad[1, sim.parameter_names.index("ke")] = -1.0
    out = np.asarray(sim(bad))
    assert np.all(np.isnan(out[1])) and np.all(np.isfinite(out[[0, 2]]))
    g = jax.grad(lambda r: jnp.nansum(sim(r)))(jnp.asarray(bad))
    assert np.all(np.asarray(g)[1] == 0) and np.all(np.isfinite(g))
