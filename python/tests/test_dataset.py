"""pkscan.read_dataset / parse_dataset / simulate_dataset against the CSV text, closed forms and
the `pkscan run` command line."""

import csv
import subprocess

import numpy as np
import pytest

import pkscan
from conftest import bateman, releases_gil

# Parameters of config/examples/datasets/population.yaml (KA is a dataset column).
POPULATION_PARAMETERS = {
    "ka": 0.9,
    "ke": [0.2, 0.15, 0.25],
    "k12": 0.4,
    "k21": 0.11,
    "v_central": 20.0,
    "v_peripheral": 70.0,
}


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(line for line in f if not line.startswith("#")))


def test_read_dataset_matches_the_csv(source_dir):
    path = source_dir / "config/examples/datasets/population.csv"
    d = pkscan.read_dataset(str(path), "three_compartment")
    rows = read_csv(path)
    assert d.ids == ["101", "102", "103"]
    assert len(d) == d.subjects == 3
    assert d.parameter_columns == ["ka"]
    assert d.covariate_columns == ["WT"]
    assert d.record_count == len(rows)
    assert d.observation_count == sum(r["EVID"] == "0" for r in rows)
    rec = d.records()
    ids = [r["ID"] for r in rows]
    np.testing.assert_array_equal(rec["subject"], [d.ids.index(i) for i in ids])
    np.testing.assert_array_equal(rec["time"], [float(r["TIME"]) for r in rows])
    np.testing.assert_array_equal(rec["evid"], [int(r["EVID"]) for r in rows])
    np.testing.assert_array_equal(rec["amt"], [float(r["AMT"]) if r["AMT"] != "." else 0.0 for r in rows])
    dv = np.array([float(r["DV"]) if r["DV"] != "." else np.nan for r in rows])
    np.testing.assert_array_equal(rec["dv"], dv)
    ka = np.array([float(r["KA"]) if r["KA"] != "." else np.nan for r in rows])
    np.testing.assert_array_equal(rec["parameters"][:, 0], ka)
    assert d.model.name == "three_compartment"


def test_simulate_dataset_equals_pkscan_run(source_dir, cli, tmp_path):
    data = source_dir / "config/examples/datasets/population.csv"
    run = tmp_path / "run.yaml"
    out = tmp_path / "out.csv"
    run.write_text(
        "model: three_compartment\n"
        f"subjects:\n  dataset: {data}\n  parameters:\n"
        "    ka: 0.9\n    ke: [0.2, 0.15, 0.25]\n    k12: 0.4\n    k21: 0.11\n"
        "    v_central: 20\n    v_peripheral: 70\n"
        f"output:\n  path: {out}\n"
        "engine: {method: auto, device: cpu}\n"
    )
    subprocess.run([cli, "run", str(run), "--quiet"], check=True)
    rows = read_csv(out)

    r = pkscan.simulate_dataset(str(data), "three_compartment", POPULATION_PARAMETERS, device="cpu")
    assert len(r["time"]) == len(rows)
    assert [r["ids"][s] for s in r["subject"]] == [row["id"] for row in rows]
    np.testing.assert_allclose(r["time"], [float(row["time"]) for row in rows], rtol=0, atol=0)
    for c, name in enumerate(["depot", "central", "peripheral"]):
        np.testing.assert_allclose(
            r["amounts"][:, c], [float(row[f"amount_{name}"]) for row in rows], rtol=1e-14, atol=0
        )
        np.testing.assert_allclose(
            r["concentrations"][:, c], [float(row[f"conc_{name}"]) for row in rows], rtol=1e-14, atol=0
        )
    np.testing.assert_allclose(r["prediction"], [float(row["pred"]) for row in rows], rtol=1e-14, atol=0)
    dv = [float(row["dv"]) if row["dv"] else np.nan for row in rows]
    np.testing.assert_array_equal(r["dv"], dv)
    assert r["ok"].all()

    # The same through a Dataset object and through the CSV text.
    d = pkscan.read_dataset(str(data), "three_compartment")
    r2 = pkscan.simulate_dataset(d, parameters=POPULATION_PARAMETERS, method="scan")
    np.testing.assert_array_equal(r2["prediction"], r["prediction"])
    r3 = pkscan.simulate_dataset(data.read_text(), "three_compartment", POPULATION_PARAMETERS)
    np.testing.assert_array_equal(r3["prediction"], r["prediction"])


TEXT = """ID,TIME,AMT,CMT,EVID,II,ADDL,DV
1,0,100,1,1,8,2,.
1,1,.,2,0,.,.,1.5
1,7.5,.,2,0,.,.,2.5
1,9.25,.,2,0,.,.,3.5
1,30,.,2,0,.,.,.
2,0,50,1,1,.,.,.
2,0.5,.,2,0,.,.,0.7
2,4,.,2,0,.,.,0.9
"""


def test_dataset_predictions_match_bateman_with_addl():
    ka = np.array([1.1, 0.6])
    ke = np.array([0.12, 0.3])
    d = pkscan.parse_dataset(TEXT, "two_compartment", file="inline.csv")
    assert d.file == "inline.csv"
    r = pkscan.simulate_dataset(d, parameters={"ka": ka, "ke": ke, "v_central": 4.0})
    t = r["time"]
    s = r["subject"]
    np.testing.assert_array_equal(s, [0, 0, 0, 0, 1, 1])
    np.testing.assert_array_equal(t, [1, 7.5, 9.25, 30, 0.5, 4])
    # Subject 1: 100 at t = 0, 8, 16 (ADDL 2, II 8); subject 2: 50 at t = 0.
    expected = np.empty(6)
    for i in range(6):
        if s[i] == 0:
            expected[i] = sum(bateman(t[i] - td, 100.0, ka[0], ke[0]) for td in (0, 8, 16))
        else:
            expected[i] = bateman(t[i], 50.0, ka[1], ke[1])
    np.testing.assert_allclose(r["amounts"][:, 1], expected, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(r["prediction"], expected / 4.0, rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(r["compartment"], np.ones(6))
    np.testing.assert_array_equal(r["dv"], [1.5, 2.5, 3.5, np.nan, 0.7, 0.9])


def test_gil_is_released_while_simulating_a_dataset():
    d = pkscan.parse_dataset(TEXT, "two_compartment")
    params = {"ka": 1.0, "ke": 0.1, "v_central": 1.0}
    assert releases_gil(lambda: pkscan.simulate_dataset(d, parameters=params))


def test_dataset_errors():
    with pytest.raises(ValueError, match="missing parameter 'v_central'"):
        pkscan.simulate_dataset(TEXT, "two_compartment", {"ka": 1.0, "ke": 0.1})
    with pytest.raises(ValueError, match="3 values"):
        pkscan.simulate_dataset(TEXT, "two_compartment", {"ka": [1.0, 2.0, 3.0], "ke": 0.1, "v_central": 1})
    with pytest.raises(ValueError, match="ke"):
        pkscan.simulate_dataset(TEXT, "two_compartment", {"ka": 1.0, "ke": -0.1, "v_central": 1})
    with pytest.raises(ValueError, match="bad.csv:3"):
        pkscan.parse_dataset("ID,TIME,AMT,EVID\n1,0,10,1\n1,-1,.,0\n", "two_compartment", file="bad.csv")
    with pytest.raises(ValueError):
        pkscan.read_dataset("/nonexistent/data.csv", "two_compartment")
    with pytest.raises(ValueError, match="model"):
        pkscan.simulate_dataset(TEXT)  # a path or text needs a model
    d = pkscan.parse_dataset(TEXT, "two_compartment")
    with pytest.raises(ValueError, match="read it again"):
        pkscan.simulate_dataset(d, "three_compartment", {"ka": 1.0})
    # Device cuda: without a GPU, BackendUnavailable -> RuntimeError naming the device; with one,
    # the CPU's predictions (within CUDA's exp: 1e-10 relative).
    params = {"ka": 1.0, "ke": 0.1, "v_central": 1}
    try:
        on_device = pkscan.simulate_dataset(d, parameters=params, device="cuda")
    except RuntimeError as e:
        assert "device 'cuda' is not available" in str(e)
    else:
        on_cpu = pkscan.simulate_dataset(d, parameters=params)
        scale = np.max(np.abs(on_cpu["prediction"]))
        np.testing.assert_allclose(on_device["prediction"], on_cpu["prediction"], rtol=1e-10,
                                   atol=1e-13 * scale)
