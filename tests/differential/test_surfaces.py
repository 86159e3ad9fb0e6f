"""The generated problems through the Python module and the C++ API give the same bits as the
command line (which writes 17 significant digits for float64 and 9 for float32: enough to read
every value back exactly)."""

import numpy as np
import pytest

import harness
import pkscan


def python_model(run):
    model = run.get("model", "three_compartment")
    return model if isinstance(model, str) else model["linear"]


def python_parameters(subjects):
    """subjects.parameters as the module takes them (lists as arrays). A run file with `count`
    and no list gives every subject the same values: one of them becomes an array."""
    params = {k: (np.array(v) if isinstance(v, list) else v)
              for k, v in subjects["parameters"].items()}
    count = subjects.get("count", 1)
    if count > 1 and not any(isinstance(v, list) for v in subjects["parameters"].values()):
        first = next(iter(params))
        params[first] = np.full(count, params[first])
    return params


def python_amounts(run, folder):
    """Amounts from the module, flattened as the CLI writes them: [rows, compartments]."""
    engine = run.get("engine", {})
    method, device = engine.get("method", "auto"), engine.get("device", "auto")
    if "dataset" in run["subjects"]:
        r = pkscan.simulate_dataset(str(folder / run["subjects"]["dataset"]),
                                    model=python_model(run),
                                    parameters=python_parameters(run["subjects"]),
                                    method=method, device=device)
        return np.asarray(r["amounts"])
    times = run.get("output", {}).get("times", "all")
    r = pkscan.simulate(python_model(run), python_parameters(run["subjects"]),
                        run.get("doses", []), dt=run["time"]["dt"], steps=run["time"]["steps"],
                        times=None if times == "all" else times, method=method, device=device,
                        precision=run.get("precision", "float64"),
                        discretization=run.get("discretization", "exact"))
    a = np.asarray(r["amounts"])
    return a.reshape(-1, a.shape[-1])


def cli_amounts(name, run):
    out = harness.run_cli(name)
    assert out.returncode == 0, out.stderr
    return out.numbers("amount_", np.float32 if run.get("precision") == "float32" else np.float64)


def assert_same_bits(what, got, cli):
    assert got.shape == cli.shape, f"{what}: shape {got.shape}, command line {cli.shape}"
    differ = np.flatnonzero(got.ravel() != cli.ravel())
    assert differ.size == 0, (
        f"{what}: {differ.size} of {cli.size} amounts differ from the command line's, first at "
        f"flat index {differ[0]}: {got.ravel()[differ[0]]!r} vs {cli.ravel()[differ[0]]!r}")


@pytest.mark.parametrize("name", harness.case_names(), ids=harness.case_id)
def test_python_module_gives_the_command_lines_bits(name):
    run = harness.case(name)["run"]
    cli = cli_amounts(name, run)
    got = python_amounts(run, harness.folder(name))
    assert got.dtype == cli.dtype
    assert_same_bits("pkscan (Python)", got, cli)


@pytest.mark.parametrize("name", harness.case_names(), ids=harness.case_id)
def test_cpp_api_gives_the_command_lines_bits(name):
    run = harness.case(name)["run"]
    cli = cli_amounts(name, run)
    kind, values = harness.run_api(name)
    assert kind == ("dataset" if "dataset" in run["subjects"] else "grid")
    assert_same_bits("C++ API", values.reshape(-1, values.shape[-1]).astype(cli.dtype), cli)
