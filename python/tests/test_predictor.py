"""pkscan.Predictor: predictions against closed forms and `pkscan run`, log-likelihoods against a
direct NumPy computation, gradients against central finite differences, threads, errors."""

import csv
import subprocess
import threading

import numpy as np
import pytest

import pkscan
from conftest import bateman, releases_gil

# Three subjects of the two-compartment model (depot -> central). Subject 1: 100 at t = 0, 8, 16
# (ADDL 2, II 8); subject 2: 50 at t = 0 and one record with a missing DV; subject 3: 80 at t = 1.
TEXT = """ID,TIME,AMT,CMT,EVID,II,ADDL,DV
1,0,100,1,1,8,2,.
1,1,.,2,0,.,.,1.5
1,7.5,.,2,0,.,.,2.5
1,9.25,.,2,0,.,.,3.5
1,30,.,2,0,.,.,.
2,0,50,1,1,.,.,.
2,0.5,.,2,0,.,.,0.7
2,4,.,2,0,.,.,0.9
3,1,80,1,1,.,.,.
3,2.5,.,2,0,.,.,2.2
3,6,.,2,0,.,.,2.9
3,12,.,2,0,.,.,1.9
"""
DOSES = {0: [(0.0, 100.0), (8.0, 100.0), (16.0, 100.0)], 1: [(0.0, 50.0)], 2: [(1.0, 80.0)]}
KA = np.array([1.1, 0.6, 0.9])
KE = np.array([0.12, 0.3, 0.2])
V = np.array([4.0, 5.0, 6.5])
F = np.array([1.0, 0.8, 0.9])
LAG = np.array([0.0, 0.0, 0.35])


@pytest.fixture(scope="module")
def predictor():
    return pkscan.Predictor(TEXT, "two_compartment")


@pytest.fixture(scope="module")
def params(predictor):
    return predictor.make_parameters(
        {"ka": KA, "ke": KE, "v_central": V, "f_depot": F, "lag_depot": LAG}
    )


def closed_form(predictor):
    """Concentrations at every observation record from superposed Bateman curves."""
    out = np.empty(predictor.observations)
    for i, (s, t) in enumerate(zip(predictor.observation_subjects, predictor.observation_times)):
        amount = sum(
            bateman(t - td - LAG[s], F[s] * d, KA[s], KE[s]) for td, d in DOSES[s]
        )
        out[i] = amount / V[s]
    return out


def test_layout(predictor, params):
    names = predictor.parameter_names
    assert names == pkscan.Model("two_compartment").parameters
    assert params.shape == (3, len(names))
    assert predictor.subjects == 3 and predictor.ids == ["1", "2", "3"]
    assert predictor.observations == 9
    np.testing.assert_array_equal(predictor.observation_counts, [4, 2, 3])
    np.testing.assert_array_equal(predictor.observation_offsets, [0, 4, 6, 9])
    np.testing.assert_array_equal(predictor.observation_subjects, [0, 0, 0, 0, 1, 1, 2, 2, 2])
    np.testing.assert_array_equal(predictor.observation_times, [1, 7.5, 9.25, 30, 0.5, 4, 2.5, 6, 12])
    np.testing.assert_array_equal(predictor.dv, [1.5, 2.5, 3.5, np.nan, 0.7, 0.9, 2.2, 2.9, 1.9])
    np.testing.assert_array_equal(predictor.observed, [1, 1, 1, 0, 1, 1, 1, 1, 1])
    # make_parameters: given values, defaults elsewhere (v_depot 1), NaN for the unused cl.
    col = {n: i for i, n in enumerate(names)}
    np.testing.assert_array_equal(params[:, col["ka"]], KA)
    np.testing.assert_array_equal(params[:, col["lag_depot"]], LAG)
    assert (params[:, col["v_depot"]] == 1.0).all()
    assert np.isnan(params[:, col["cl"]]).all()


def test_predictions_match_closed_form(predictor, params):
    expected = closed_form(predictor)
    np.testing.assert_allclose(predictor.predict_all(params), expected, rtol=1e-10, atol=1e-12)
    off = predictor.observation_offsets
    for s in range(3):
        np.testing.assert_allclose(
            predictor.predict(s, params[s]), expected[off[s] : off[s + 1]], rtol=1e-10, atol=1e-12
        )


def log_normal_pdf(x, mean, sd):
    return -0.5 * np.log(2 * np.pi * sd**2) - 0.5 * ((x - mean) / sd) ** 2


@pytest.mark.parametrize(
    "error, sigma",
    [("additive", 0.4), ("proportional", 0.15), ("combined", [0.3, 0.1])],
)
def test_log_likelihood_matches_numpy(predictor, params, error, sigma):
    pred = closed_form(predictor)
    dv = predictor.dv
    obs = predictor.observed
    if error == "additive":
        sd = np.full_like(pred, sigma)
    elif error == "proportional":
        sd = sigma * pred
    else:
        sd = np.sqrt(sigma[0] ** 2 + (sigma[1] * pred) ** 2)
    per_record = np.where(obs, log_normal_pdf(np.where(obs, dv, 0.0), pred, sd), 0.0)
    subj = predictor.observation_subjects
    expected = np.array([per_record[subj == s].sum() for s in range(3)])
    for s in range(3):
        value = predictor.log_likelihood(s, params[s], error, sigma, gradient=False)
        assert value == pytest.approx(expected[s], rel=1e-10, abs=1e-12)
    total = predictor.log_likelihood_all(params, error, sigma, gradient=False)
    assert total == pytest.approx(expected.sum(), rel=1e-10)
    each = predictor.log_likelihood_all(params, error, sigma, gradient=False, per_subject=True)
    np.testing.assert_allclose(each, expected, rtol=1e-10)


def test_log_scale_log_likelihood_matches_numpy(predictor, params):
    pred = closed_form(predictor)
    dv = predictor.dv
    obs = predictor.observed
    sigma = 0.25
    x = np.where(obs, dv, 1.0)
    # Log-normal density on the DV scale: normal density of log(DV) minus log(DV).
    per_record = np.where(obs, log_normal_pdf(np.log(x), np.log(pred), sigma) - np.log(x), 0.0)
    value = predictor.log_likelihood_all(params, "additive", sigma, log_scale=True, gradient=False)
    assert value == pytest.approx(per_record.sum(), rel=1e-10)


def free_columns(predictor, params):
    """Columns with a value (not the unused NaN alternative)."""
    return [k for k in range(params.shape[1]) if not np.isnan(params[0, k])]


def central_difference(f, x, k, h):
    xp = x.copy()
    xm = x.copy()
    step = h * max(1.0, abs(x[k]))
    xp[k] += step
    xm[k] -= step
    return (f(xp) - f(xm)) / (2 * step)


def forward_difference(f, x, k, h):
    """For a parameter at the edge of its domain (a lag of 0): the one-sided derivative."""
    xp = x.copy()
    step = h * max(1.0, abs(x[k]))
    xp[k] += step
    return (f(xp) - f(x)) / step


def is_lag_at_zero(predictor, params, s, k):
    return predictor.parameter_names[k].startswith("lag_") and params[s, k] == 0.0


def test_prediction_gradient_matches_finite_differences(predictor, params):
    for s in range(3):
        pred, jac = predictor.predict_gradient(s, params[s])
        np.testing.assert_array_equal(pred, predictor.predict(s, params[s]))
        assert jac.shape == (len(pred), params.shape[1])
        for k in free_columns(predictor, params):
            f = lambda p: predictor.predict(s, p)  # noqa: E731
            msg = f"subject {s} column {predictor.parameter_names[k]}"
            if is_lag_at_zero(predictor, params, s, k):
                fd = forward_difference(f, params[s], k, 1e-7)
                np.testing.assert_allclose(jac[:, k], fd, rtol=1e-4, atol=1e-6, err_msg=msg)
            else:
                fd = central_difference(f, params[s], k, 1e-6)
                np.testing.assert_allclose(jac[:, k], fd, rtol=1e-6, atol=1e-8, err_msg=msg)
        cl = predictor.parameter_names.index("cl")
        assert (jac[:, cl] == 0).all()


@pytest.mark.parametrize(
    "error, sigma, log_scale",
    [("additive", 0.4, False), ("proportional", 0.15, False), ("combined", [0.3, 0.1], False),
     ("additive", 0.25, True)],
)
def test_log_likelihood_gradient_matches_finite_differences(predictor, params, error, sigma, log_scale):
    sig = np.atleast_1d(np.asarray(sigma, dtype=float))
    for s in range(3):
        value, g, gs = predictor.log_likelihood(s, params[s], error, sigma, log_scale=log_scale)
        assert value == pytest.approx(
            predictor.log_likelihood(s, params[s], error, sigma, log_scale=log_scale, gradient=False)
        )
        f = lambda p: predictor.log_likelihood(  # noqa: E731
            s, p, error, sigma, log_scale=log_scale, gradient=False
        )
        for k in free_columns(predictor, params):
            msg = f"subject {s} column {predictor.parameter_names[k]}"
            if is_lag_at_zero(predictor, params, s, k):
                fd = forward_difference(f, params[s], k, 1e-7)
                assert g[k] == pytest.approx(fd, rel=1e-4, abs=1e-5), msg
            else:
                fd = central_difference(f, params[s], k, 1e-6)
                assert g[k] == pytest.approx(fd, rel=1e-5, abs=1e-7), msg
        for j in range(len(sig)):
            fd = central_difference(
                lambda q: predictor.log_likelihood(s, params[s], error, q, log_scale=log_scale, gradient=False),
                sig, j, 1e-6,
            )
            assert gs[j] == pytest.approx(fd, rel=1e-5, abs=1e-7)


def test_all_subject_calls_agree_with_per_subject_calls(predictor, params):
    off = predictor.observation_offsets
    pred, jac = predictor.predict_gradient_all(params)
    value, g, gs = predictor.log_likelihood_all(params, "combined", [0.3, 0.1])
    total_gs = np.zeros(2)
    total = 0.0
    for s in range(3):
        p_s, j_s = predictor.predict_gradient(s, params[s])
        np.testing.assert_array_equal(pred[off[s] : off[s + 1]], p_s)
        np.testing.assert_array_equal(jac[off[s] : off[s + 1]], j_s)
        v_s, g_s, gs_s = predictor.log_likelihood(s, params[s], "combined", [0.3, 0.1])
        np.testing.assert_allclose(g[s], g_s, rtol=1e-14)
        total += v_s
        total_gs += gs_s
    assert value == pytest.approx(total, rel=1e-14)
    np.testing.assert_allclose(gs, total_gs, rtol=1e-12)


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_predictions_equal_pkscan_run(source_dir, cli, tmp_path):
    data = source_dir / "config/examples/datasets/population.csv"
    run = tmp_path / "run.yaml"
    out = tmp_path / "out.csv"
    run.write_text(
        "model: three_compartment\n"
        f"subjects:\n  dataset: {data}\n  parameters:\n"
        "    ka: 0.9\n    ke: [0.2, 0.15, 0.25]\n    k12: 0.4\n    k21: 0.11\n"
        "    v_central: 20\n    v_peripheral: 70\n"
        f"output:\n  path: {out}\n"
    )
    subprocess.run([cli, "run", str(run), "--quiet"], check=True)
    rows = read_csv(out)
    p = pkscan.Predictor(str(data), "three_compartment")
    params = p.make_parameters(
        {"ka": 0.9, "ke": [0.2, 0.15, 0.25], "k12": 0.4, "k21": 0.11, "v_central": 20, "v_peripheral": 70}
    )
    pred = p.predict_all(params)
    assert len(pred) == len(rows)
    np.testing.assert_array_equal([p.ids[s] for s in p.observation_subjects], [r["id"] for r in rows])
    np.testing.assert_array_equal(p.observation_times, [float(r["time"]) for r in rows])
    np.testing.assert_allclose(pred, [float(r["pred"]) for r in rows], rtol=1e-12, atol=0)
    # KA is a dataset column: the row's ka only governs intervals where the dataset leaves KA
    # missing (subject 102 before t = 8, when its depot is empty), so its derivative is 0
    # everywhere; ke (not a column) has the finite-difference derivative.
    _, jac = p.predict_gradient_all(params)
    np.testing.assert_allclose(jac[:, p.parameter_names.index("ka")], 0.0, rtol=0, atol=1e-12)
    ke = p.parameter_names.index("ke")
    off = p.observation_offsets
    for s in range(p.subjects):
        fd = central_difference(lambda q: p.predict(s, q), params[s], ke, 1e-6)
        np.testing.assert_allclose(jac[off[s] : off[s + 1], ke], fd, rtol=1e-6, atol=1e-9)
        assert (np.abs(fd) > 1e-3).any()


def population_text(subjects):
    lines = ["ID,TIME,AMT,CMT,EVID,DV"]
    for s in range(subjects):
        lines.append(f"{s + 1},0,100,1,1,.")
        for t in (0.5, 1, 2, 4, 8, 12, 24):
            lines.append(f"{s + 1},{t},.,2,0,1.0")
    return "\n".join(lines) + "\n"


def test_concurrent_predict_all_from_threads_agree():
    n = 400
    p = pkscan.Predictor(population_text(n), "two_compartment")
    ka = np.linspace(0.3, 2.5, n)
    params = p.make_parameters({"ka": ka, "ke": 0.15, "v_central": 10.0})
    t = p.observation_times
    expected = bateman(t, 100.0, ka[p.observation_subjects], 0.15) / 10.0
    results = [None] * 4

    def work(i):
        for _ in range(5):
            results[i] = p.predict_all(params, threads=1)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    for r in results:
        np.testing.assert_allclose(r, expected, rtol=1e-10, atol=1e-13)


@pytest.mark.parametrize(
    "call",
    [
        lambda p, q: p.predict(0, q[0]),
        lambda p, q: p.predict_gradient(0, q[0]),
        lambda p, q: p.log_likelihood(0, q[0], "additive", 0.3),
        lambda p, q: p.predict_all(q),
        lambda p, q: p.predict_gradient_all(q),
        lambda p, q: p.log_likelihood_all(q, "combined", [0.3, 0.1]),
    ],
    ids=["predict", "predict_gradient", "log_likelihood", "predict_all", "predict_gradient_all",
         "log_likelihood_all"],
)
def test_gil_is_released_while_evaluating(call):
    # Calls long enough (2000 observations a subject, about a millisecond) that a thread woken
    # by the OS can take the GIL while one runs: with the module's 3-observation subjects a call
    # lasts a few microseconds, shorter than the OS's wake-up latency, too short for the check.
    lines = ["ID,TIME,AMT,CMT,EVID,II,ADDL,DV"]
    for s in range(1, 3):
        lines.append(f"{s},0,100,1,1,24,100,.")
        lines += [f"{s},{0.5 + h},.,2,0,.,.,1.0" for h in range(2000)]
    long_predictor = pkscan.Predictor("\n".join(lines) + "\n", "two_compartment")
    long_params = long_predictor.make_parameters({"ka": 1.0, "ke": 0.1, "v_central": 5.0})
    assert not releases_gil(lambda: sum(range(1000)), tries=1000)  # the harness holds
    assert releases_gil(lambda: call(long_predictor, long_params), tries=2000)


def test_errors(predictor, params):
    with pytest.raises(ValueError, match="shape"):
        predictor.predict_all(params[:2])
    with pytest.raises(ValueError):
        predictor.predict(0, params[0][:3])
    with pytest.raises(IndexError):
        predictor.predict(3, params[0])
    bad = params.copy()
    bad[1, predictor.parameter_names.index("ke")] = -1.0
    with pytest.raises(ValueError, match="ke"):
        predictor.predict_all(bad)
    with pytest.raises(ValueError, match="ke"):
        predictor.predict_gradient_all(bad)
    with pytest.raises(ValueError, match="gaussian"):
        predictor.log_likelihood(0, params[0], "gaussian", 1.0)
    with pytest.raises(ValueError, match="sigma"):
        predictor.log_likelihood(0, params[0], "combined", 1.0)
    with pytest.raises(ValueError, match="sigma is required"):
        predictor.log_likelihood_all(params, "additive")
    with pytest.raises(ValueError):
        pkscan.Predictor(TEXT)  # text needs a model
    with pytest.raises(ValueError):
        pkscan.Predictor("ID,TIME,AMT,CMT,EVID\n1,0,10,7,1\n", "two_compartment")  # CMT 7


def test_inputs_of_any_layout_and_dtype(predictor, params):
    # C-contiguous float64 is read in place; anything else is converted once, same values.
    expected = predictor.predict_all(params)
    np.testing.assert_array_equal(predictor.predict_all(np.asfortranarray(params)), expected)
    np.testing.assert_array_equal(predictor.predict_all(params.tolist()), expected)
    np.testing.assert_array_equal(predictor.predict(1, params[:, :][1]), expected[4:6])
    strided = np.repeat(params, 2, axis=1)[:, ::2]
    np.testing.assert_array_equal(predictor.predict_all(strided), expected)


def test_device_cuda_gives_the_closed_forms_or_says_it_is_not_available(params):
    """Predictor.device: 'cuda' runs predict_all and log_likelihood_all (without gradients) on the
    GPU; without one, setting it raises a one-line error and the predictor stays on the CPU."""
    p = pkscan.Predictor(TEXT, "two_compartment")
    assert p.device == "cpu"
    cpu_ll = p.log_likelihood_all(params, sigma=0.5, gradient=False)
    with pytest.raises(ValueError, match="device"):
        p.device = "gpu"
    try:
        p.device = "cuda"
    except RuntimeError as e:
        assert "Predictor: device 'cuda' is not available" in str(e)
        assert "\n" not in str(e)
        assert p.device == "cpu"
        return
    assert p.device == "cuda"
    np.testing.assert_allclose(p.predict_all(params), closed_form(p), rtol=1e-12)
    np.testing.assert_allclose(p.log_likelihood_all(params, sigma=0.5, gradient=False), cpu_ll,
                               rtol=1e-10)
    p.device = "auto"
    assert p.device == "cpu"


def test_out_of_the_domain_the_likelihood_is_minus_inf_not_an_exception(predictor, params):
    """What predict rejects (ValueError), the likelihood answers with -inf and zero gradients, as
    pkscan.jax does: a sampler's or optimizer's proposal out of the domain is rejected, not an
    error. A subject whose predictions are not finite (here: a dose so large that they
    overflow) is -inf too, never NaN."""
    ke = predictor.parameter_names.index("ke")
    for value in [-1.0, np.nan, np.inf]:
        bad = params.copy()
        bad[1, ke] = value
        v, g, gs = predictor.log_likelihood(1, bad[1], "additive", 0.3)
        assert v == -np.inf and np.all(g == 0) and np.all(gs == 0)
        total, g, gs = predictor.log_likelihood_all(bad, "additive", 0.3)
        assert total == -np.inf and np.all(g == 0) and np.all(gs == 0)
        per = predictor.log_likelihood_all(bad, "additive", 0.3, gradient=False, per_subject=True)
        assert per[1] == -np.inf and np.all(np.isfinite(per[[0, 2]]))
    for sigma in [0.0, -0.3, np.nan, np.inf]:
        for error in ["additive", "proportional"]:
            assert predictor.log_likelihood(0, params[0], error, sigma, gradient=False) == -np.inf
            total, g, gs = predictor.log_likelihood_all(params, error, sigma)
            assert total == -np.inf and np.all(g == 0) and np.all(gs == 0)
    huge = pkscan.Predictor("ID,TIME,AMT,CMT,EVID,DV\n1,0,1e300,2,1,.\n1,1,.,2,0,5\n",
                            "two_compartment")
    rows = huge.make_parameters({"ka": 1.0, "ke": 0.1, "v_central": 1e-300})
    assert not np.isfinite(huge.predict_all(rows)).any()
    for error in ["additive", "proportional", "combined"]:
        sigma = [0.3, 0.1] if error == "combined" else 0.3
        total, g, gs = huge.log_likelihood_all(rows, error, sigma)
        assert total == -np.inf and np.all(g == 0) and np.all(gs == 0)


def test_sigma_up_to_1e308_gives_the_finite_log_density(predictor, params):
    """Every finite sigma > 0 is in the domain: the log-density is formed from log(sigma) and
    (DV - pred) / sd, so sigma = 1e308 (sd^2 overflows) gives the finite value of the closed
    form, here with a proportional error whose sd = 1e308 * pred overflows itself."""
    pred = predictor.predict_all(params)
    obs = predictor.observed
    dv, f = predictor.dv[obs], pred[obs]
    for error, sigma, sd in [("additive", 1e308, np.full(f.shape, 1e308)),
                             ("proportional", 1e308, None), ("combined", [1e308, 1e308], None)]:
        # log(sd) in closed form without overflow: log(sigma) + log(pred) (and for combined,
        # log(sigma) + log(hypot(1, pred)))
        if error == "additive":
            log_sd = np.log(sd)
        elif error == "proportional":
            log_sd = np.log(1e308) + np.log(np.abs(f))
        else:
            log_sd = np.log(1e308) + np.log(np.hypot(1.0, f))
        want = np.sum(-0.5 * np.log(2 * np.pi) - log_sd)   # (DV - pred) / sd is ~1e-308
        total = predictor.log_likelihood_all(params, error, sigma, gradient=False)
        assert np.isfinite(total)
        np.testing.assert_allclose(total, want, rtol=1e-13)
        v, g, gs = predictor.log_likelihood_all(params, error, sigma)
        assert v == total and np.all(np.isfinite(g)) and np.all(np.isfinite(gs))
