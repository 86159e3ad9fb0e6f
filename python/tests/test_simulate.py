"""pkscan.simulate and pkscan.Engine against closed forms and direct computations."""

import threading

import numpy as np
import pytest

import pkscan
from conftest import bateman, expm_eig, releases_gil


def test_oral_bolus_matches_bateman_per_subject():
    ka = np.array([1.3, 0.7, 2.1])
    ke = np.array([0.2, 0.35, 0.1])
    r = pkscan.simulate(
        "two_compartment",
        {"ka": ka, "ke": ke, "v_central": 12.5},
        [{"compartment": "depot", "amount": 100.0}],
        dt=0.5,
        steps=48,
    )
    t = 0.5 * np.arange(49)
    np.testing.assert_allclose(r["times"], t, rtol=0, atol=1e-12)
    assert r["amounts"].shape == (3, 49, 2)
    assert r["amounts"].dtype == np.float64
    assert r["compartments"] == ["depot", "central"]
    for s in range(3):
        expected = bateman(t, 100.0, ka[s], ke[s])
        np.testing.assert_allclose(r["amounts"][s, :, 1], expected, rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(
            r["concentrations"][s, :, 1], expected / 12.5, rtol=1e-10, atol=1e-11
        )
        np.testing.assert_allclose(
            r["amounts"][s, :, 0], 100.0 * np.exp(-ka[s] * t), rtol=1e-10, atol=1e-12
        )
    assert r["ok"].tolist() == [True, True, True]
    assert r["device"] in ("cpu", "cuda") and r["method"] in ("scan", "batched", "power")


def test_result_arrays_are_views_of_the_engine_result():
    r = pkscan.simulate(
        "two_compartment",
        {"ka": 1.0, "ke": 0.1, "v_central": 2.0},
        [{"amount": 10.0}],
        dt=1.0,
        steps=4,
    )
    for key in ("amounts", "concentrations"):
        assert not r[key].flags.owndata
        assert r[key].base is not None
        assert r[key].flags.c_contiguous


def test_repeated_doses_and_output_times():
    # 100 every 6 h, 3 additional doses (t = 0, 6, 12, 18): superposition of Bateman curves.
    ka, ke = 0.9, 0.15
    times = [0.0, 3.0, 6.0, 13.5, 24.0]
    r = pkscan.simulate(
        "two_compartment",
        {"ka": ka, "ke": ke, "v_central": 5.0},
        [{"compartment": 0, "time": 0, "amount": 100, "every": 6, "repeat": 3}],
        dt=0.25,
        steps=96,
        times=times,
    )
    t = np.array(times)
    expected = sum(bateman(t - d, 100.0, ka, ke) for d in (0.0, 6.0, 12.0, 18.0))
    assert r["amounts"].shape == (1, 5, 2)
    np.testing.assert_allclose(r["times"], t)
    np.testing.assert_allclose(r["amounts"][0, :, 1], expected, rtol=1e-10, atol=1e-10)


def test_zero_order_infusion_into_central():
    ke, rate, duration = 0.3, 20.0, 4.0
    r = pkscan.simulate(
        "two_compartment",
        {"ka": 1.0, "ke": ke, "v_central": 10.0},
        [{"compartment": "central", "time": 1.0, "amount": rate * duration, "rate": rate}],
        dt=0.5,
        steps=24,
    )
    t = 0.5 * np.arange(25)
    during = rate / ke * (1 - np.exp(-ke * (t - 1.0)))
    at_end = rate / ke * (1 - np.exp(-ke * duration))
    after = at_end * np.exp(-ke * (t - 1.0 - duration))
    expected = np.where(t <= 1.0, 0.0, np.where(t <= 1.0 + duration, during, after))
    np.testing.assert_allclose(r["amounts"][0, :, 1], expected, rtol=1e-10, atol=1e-10)


def test_three_compartment_matches_matrix_exponential():
    p = dict(ka=1.2, k12=0.4, k21=0.11, ke=0.25, v_central=20.0, v_peripheral=70.0)
    r = pkscan.simulate(
        "three_compartment", p, [{"compartment": "depot", "amount": 100.0}], dt=0.25, steps=40
    )
    a = np.array(
        [
            [-p["ka"], 0, 0],
            [p["ka"], -(p["k12"] + p["ke"]), p["k21"]],
            [0, p["k12"], -p["k21"]],
        ]
    )
    x0 = np.array([100.0, 0, 0])
    expected = np.array([expm_eig(a, 0.25 * i) @ x0 for i in range(41)])
    np.testing.assert_allclose(r["amounts"][0], expected, rtol=1e-9, atol=1e-9)
    volumes = np.array([1.0, 20.0, 70.0])
    np.testing.assert_allclose(r["concentrations"][0], expected / volumes, rtol=1e-9, atol=1e-10)


def test_clearances_instead_of_micro_constants():
    r = pkscan.simulate(
        "two_compartment",
        {"ka": 1.1, "cl": 3.0, "v_central": 15.0},
        [{"amount": 50.0}],
        dt=1.0,
        steps=12,
    )
    t = np.arange(13.0)
    np.testing.assert_allclose(
        r["amounts"][0, :, 1], bateman(t, 50.0, 1.1, 3.0 / 15.0), rtol=1e-10, atol=1e-10
    )


def test_euler_discretization():
    # Bolus into central: x_i = (1 - ke dt)^i x_0 exactly in the Euler recurrence.
    ke, dt = 0.2, 0.5
    r = pkscan.simulate(
        "two_compartment",
        {"ka": 1.0, "ke": ke, "v_central": 1.0},
        [{"compartment": "central", "amount": 10.0}],
        dt=dt,
        steps=20,
        discretization="euler",
        method="scan",
    )
    np.testing.assert_allclose(
        r["amounts"][0, :, 1], 10.0 * (1 - ke * dt) ** np.arange(21), rtol=1e-12, atol=1e-13
    )


def test_float32():
    r = pkscan.simulate(
        "two_compartment",
        {"ka": 1.3, "ke": 0.2, "v_central": 1.0},
        [{"amount": 100.0}],
        dt=0.5,
        steps=48,
        precision="float32",
    )
    assert r["amounts"].dtype == np.float32
    assert r["concentrations"].dtype == np.float32
    t = 0.5 * np.arange(49)
    np.testing.assert_allclose(r["amounts"][0, :, 1], bateman(t, 100.0, 1.3, 0.2), rtol=2e-5, atol=1e-4)


@pytest.mark.parametrize("method", ["scan", "batched", "power"])
def test_every_cpu_method_matches_closed_form(method):
    ka = np.linspace(0.5, 2.0, 9)
    r = pkscan.simulate(
        "two_compartment",
        {"ka": ka, "ke": 0.25, "v_central": 1.0},
        [{"amount": 10.0}],
        dt=0.1,
        steps=200,
        method=method,
        device="cpu",
    )
    assert r["method"] == method and r["device"] == "cpu"
    t = 0.1 * np.arange(201)
    for s, k in enumerate(ka):
        np.testing.assert_allclose(r["amounts"][s, :, 1], bateman(t, 10.0, k, 0.25), rtol=1e-9, atol=1e-10)


def test_linear_model_mapping_and_model_object():
    spec = {
        "compartments": ["gut", "central"],
        "flows": [{"from": "gut", "to": "central", "rate": "ka"}],
        "eliminations": [("central", "ke")],
    }
    model = pkscan.Model.linear(["gut", "central"], [("gut", "central", "ka")], [("central", "ke")])
    assert model.compartments == ["gut", "central"]
    assert model.parameters[:2] == ["ka", "ke"]
    assert "v_central" in model.parameters
    for m in (spec, {"linear": spec}, model):
        r = pkscan.simulate(m, {"ka": 1.4, "ke": 0.3}, [{"amount": 20.0}], dt=0.5, steps=10)
        t = 0.5 * np.arange(11)
        np.testing.assert_allclose(r["amounts"][0, :, 1], bateman(t, 20.0, 1.4, 0.3), rtol=1e-10, atol=1e-10)


def test_builtin_model_description():
    m = pkscan.Model("three_compartment")
    assert m.name == "three_compartment"
    assert m.compartments == ["depot", "central", "peripheral"]
    assert m.parameters[:7] == ["ka", "k12", "k21", "ke", "v_depot", "v_central", "v_peripheral"]
    assert m.aliases["k01"] == "ka" and m.aliases["u"] == "ke"
    assert m.defaults["v_depot"] == 1.0 and np.isnan(m.defaults["ka"])
    assert m.observation_compartment == "central" and m.dose_compartment == "depot"


def test_engine_reuse_matches_closed_form():
    engine = pkscan.Engine()
    t = 0.25 * np.arange(41)
    for ka in (0.5, 1.5, 3.0):
        r = engine.simulate(
            "two_compartment", {"ka": ka, "ke": 0.2, "v_central": 1.0}, [{"amount": 5.0}], dt=0.25, steps=40
        )
        np.testing.assert_allclose(r["amounts"][0, :, 1], bateman(t, 5.0, ka, 0.2), rtol=1e-10, atol=1e-11)


def test_concurrent_calls_from_threads_agree():
    ka = np.linspace(0.3, 3.0, 64)
    args = ("two_compartment", {"ka": ka, "ke": 0.2, "v_central": 1.0}, [{"amount": 5.0}])
    t = 0.05 * np.arange(2001)
    expected = np.array([bateman(t, 5.0, k, 0.2) for k in ka])
    results = [None] * 4

    def work(i):
        results[i] = pkscan.simulate(*args, dt=0.05, steps=2000, threads=1)["amounts"][:, :, 1]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    for res in results:
        np.testing.assert_allclose(res, expected, rtol=1e-9, atol=1e-10)


def test_gil_is_released_while_simulating():
    # The harness itself: pure Python holds the GIL, so the other thread never runs.
    assert not releases_gil(lambda: sum(range(1000)), tries=1000)
    args = ("two_compartment", {"ka": 1.0, "ke": 0.1, "v_central": 1.0}, [{"amount": 1.0}])
    assert releases_gil(lambda: pkscan.simulate(*args, dt=1.0, steps=10))
    engine = pkscan.Engine()
    assert releases_gil(lambda: engine.simulate(*args, dt=1.0, steps=10))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(parameters={"ka": 1.0, "ke": 0.2, "v_central": 1.0, "zz": 1.0}), "zz"),
        (dict(parameters={"ka": 1.0, "ke": -0.2, "v_central": 1.0}), "ke"),
        (dict(parameters={"ka": 1.0, "k01": 1.0, "ke": 0.2, "v_central": 1.0}), "twice"),
        (dict(parameters={"ka": [1.0, 2.0], "ke": [0.1, 0.2, 0.3], "v_central": 1.0}), "values"),
        (dict(times=[0.3]), "grid"),
        (dict(doses=[{"compartment": "nowhere", "amount": 1.0}]), "nowhere"),
        (dict(doses=[{"amount": 1.0, "when": 2}]), "when"),
        (dict(doses=[{"amount": -1.0}]), "amount"),
        (dict(dt=-1.0), "dt"),
        (dict(method="fastest"), "fastest"),
        (dict(precision="float16"), "float16"),
        (dict(discretization="rk4"), 'discretization is "rk4", but must be exact or euler'),
        (dict(model="five_compartment"), "five_compartment"),
    ],
)
def test_bad_input_raises_value_error(kwargs, match):
    args = dict(
        model="two_compartment",
        parameters={"ka": 1.0, "ke": 0.2, "v_central": 1.0},
        doses=[{"amount": 1.0}],
        dt=0.5,
        steps=10,
    )
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        pkscan.simulate(**args)


def test_missing_required_parameter_raises():
    with pytest.raises(ValueError):
        pkscan.simulate("two_compartment", {"ka": 1.0, "ke": 0.2}, [{"amount": 1.0}], dt=1.0, steps=2)


def test_sizes_too_large_to_hold_raise_memory_error():
    """The result's size (the library's result_bytes) is checked against the memory a result may
    take before anything is allocated: MemoryError saying how much it needs; a grid beyond the
    library's rules stays a ValueError."""
    params = {"ka": np.full(10**4, 1.0), "ke": 0.2, "v_central": 1.0}
    big = dict(model="two_compartment", parameters=params, doses=[{"amount": 1.0}], dt=0.5,
               steps=10**9)
    message = r"simulate: the amounts and concentrations of 10000 subjects x 1000000001 " \
              r"output times need [0-9.e+]+ GiB, but only [0-9.e+]+ GiB are available"
    with pytest.raises(MemoryError, match=message):
        pkscan.simulate(**big)
    with pytest.raises(MemoryError, match=message):
        pkscan.Engine().simulate(**big)
    with pytest.raises(MemoryError, match="GridGradient: .* need"):
        pkscan.GridGradient("four_compartment", [{"amount": 1.0}], 0.5, 10**9)
    with pytest.raises(ValueError, match="steps"):
        pkscan.simulate(**dict(big, steps=10**12))
    with pytest.raises(ValueError, match="steps"):
        pkscan.GridGradient("two_compartment", [{"amount": 1.0}], 0.5, 10**12)
    # Sparse output times make the same horizon small.
    r = pkscan.simulate(**dict(big, parameters={"ka": 1.0, "ke": 0.2, "v_central": 1.0},
                               times=[0.0, 5e8]))
    assert r["amounts"].shape == (1, 2, 2)
