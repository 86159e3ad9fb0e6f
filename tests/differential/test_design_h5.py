"""Design simulations written as HDF5 (`output.path` ending in .h5 / .hdf5, docs/output.md,
"Design simulations"), through `pkscan run`:

- the same run file and seed written once to .csv and once to .h5: every CSV column is the 1-D
  HDF5 dataset of its name (root, or /covariates for the dataset's own columns), of one entry per
  CSV row, equal to the CSV's value exactly (the CSV prints round-trip digits, so a float64 read
  back from the text is the value written), integer IDs as int64 and text IDs or text columns as
  the strings written; /parameters holds STEM.parameters.csv column by column, and no
  STEM.parameters.csv is written; the root and group attributes are the documented ones;
- a failed run (a missing directory before the run, a parameter out of its domain while it
  runs, SIGINT while it writes) leaves no file and no temporary file, and an earlier result at
  the path stays as it was.

The CSV side is parsed with Python's csv module and NumPy only; nothing here reuses pkscan's
readers.
"""

import csv
import os
import signal
import subprocess
import time

import h5py
import numpy as np
import pytest

TIMES = [0.5, 1, 2, 4, 8, 12]


def write_design(path, n, ids=None, site=False, wt_of=None):
    """A design of n subjects: doses at 0 and 24, six observations after each, WT, OCC (and a
    text column SITE). ids: the IDs as written (default 1..n)."""
    rng = np.random.default_rng(3)
    ids = ids or [str(i) for i in range(1, n + 1)]
    lines = ["ID,TIME,AMT,CMT,EVID,DV,WT,OCC" + (",SITE" if site else "")]
    for k, i in enumerate(ids):
        wt = wt_of(k) if wt_of else round(float(rng.uniform(50, 100)), 1)
        s = ("," + ("north" if k % 3 else "south east")) if site else ""
        lines.append(f"{i},0,100,1,1,.,{wt},1{s}")
        lines += [f"{i},{t},.,2,0,1,{wt},1{s}" for t in TIMES]
        lines.append(f"{i},24,100,1,1,.,{wt},2{s}")
        lines += [f"{i},{24 + t},.,2,0,1,{wt},2{s}" for t in TIMES]
    path.write_text("\n".join(lines) + "\n")


POPULATION = """    seed: 5
    replicates: {replicates}
    typical: {{ka: 1.0, cl: 5.0, v_central: 20, q: 8, v_peripheral: 70}}
    iiv: {{cl: 0.09, v_central: 0.04}}
{iov}    covariates:
      effects: [{{parameter: cl, covariate: WT, type: {effect}, coefficient: {coef}, reference: 70}}]
    residual: {{additive: 0.05, proportional: 0.1}}
    lloq: 0.5
"""
IOV = "    iov: {occasion: OCC, variances: {cl: 0.0225}}\n"


def run_file(tmp, replicates=2, iov=IOV, effect="power", coef=0.75, extra="", path="sim.csv"):
    text = (f"model: three_compartment\nsubjects:\n  dataset: design.csv\n  population:\n"
            + POPULATION.format(replicates=replicates, iov=iov, effect=effect, coef=coef)
            + f"output:\n  path: {path}\n{extra}")
    (tmp / "sim.yaml").write_text(text)
    return tmp / "sim.yaml"


def pkscan(tmp, yaml, *args, expect=0):
    p = subprocess.run([os.environ["PKSCAN_CLI"], "run", str(yaml), "--quiet", *args],
                       cwd=tmp, capture_output=True, text=True, timeout=300, check=False)
    assert p.returncode == expect, p.stderr
    return p.stderr


def read_csv(path):
    """Header and columns (lists of the fields as written)."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    header = rows[0]
    assert all(len(r) == len(header) for r in rows[1:])
    return header, {h: [r[j] for r in rows[1:]] for j, h in enumerate(header)}


def assert_column_equal(dset, texts, name):
    """An HDF5 column against the CSV's fields: numbers exactly (round-trip digits), strings as
    written."""
    values = dset[...]
    assert values.shape == (len(texts),), name
    if dset.dtype.kind in "iu":
        np.testing.assert_array_equal(values, np.array([int(t) for t in texts]), err_msg=name)
    elif dset.dtype.kind == "f":
        assert dset.dtype == np.float64, name
        want = np.array([float(t) for t in texts])
        np.testing.assert_array_equal(values, want, err_msg=name)  # NaN equals NaN
    else:
        got = [v.decode() if isinstance(v, bytes) else v for v in values]
        assert got == texts, name


def temp_files(tmp):
    return sorted(p.name for p in tmp.iterdir() if ".pkscan-tmp." in p.name
                  or p.name.endswith(".pkscan-commit"))


def compare(tmp, stem_csv, stem_h5, yaml_text, run_file_arg, covariate_columns):
    header, cols = read_csv(tmp / f"{stem_csv}.csv")
    ph, pcols = read_csv(tmp / f"{stem_csv}.parameters.csv")
    with h5py.File(tmp / f"{stem_h5}.h5", "r") as f:
        result = [h for h in header if h not in covariate_columns]
        assert list(f.attrs["columns"]) == result
        assert header == result + covariate_columns  # the dataset's columns come last
        for h in result:
            assert_column_equal(f[h], cols[h], h)
        if covariate_columns:
            assert list(f["covariates"].attrs["columns"]) == covariate_columns
            for h in covariate_columns:
                assert_column_equal(f["covariates"][h], cols[h], h)
        else:
            assert "covariates" not in f
        assert list(f["parameters"].attrs["columns"]) == ph
        assert set(f["parameters"].keys()) == set(ph)
        for h in ph:
            assert_column_equal(f["parameters"][h], pcols[h], "parameters/" + h)
        # Types as documented.
        for h in result:
            want = {"replicate": np.int64, "blq": np.int8}.get(h, np.float64)
            if h not in ("id", "source_id"):
                assert f[h].dtype == want, h
        assert f["parameters/id"].dtype == f["id"].dtype
        # Root attributes: the grid runs' provenance.
        assert f.attrs["run_file"] == run_file_arg
        assert f.attrs["run_text"] == yaml_text
        assert f.attrs["model"] == "three_compartment"
        assert list(f.attrs["compartments"]) == ["depot", "central", "peripheral"]
        assert isinstance(f.attrs["pkscan_version"], str) and f.attrs["pkscan_version"]
        return {k: f[k].dtype for k in f.keys() if isinstance(f[k], h5py.Dataset)}


def test_every_column_and_the_parameter_table_equal_the_csv(tmp_path):
    write_design(tmp_path / "design.csv", n=60)
    yaml = run_file(tmp_path)
    pkscan(tmp_path, yaml, "--output", "a.csv")
    pkscan(tmp_path, yaml, "--output", "b.h5")
    dtypes = compare(tmp_path, "a", "b", yaml.read_text(), str(yaml),
                     ["WT", "OCC"])
    assert dtypes["id"] == np.int64
    with h5py.File(tmp_path / "b.h5", "r") as f:
        n = 60 * 12 * 2  # subjects x observations x replicates
        assert all(f[h].shape == (n,) for h in f.attrs["columns"])
        assert list(f["parameters"].attrs["columns"])[:3] == ["id", "replicate", "occasion"]
        assert f["parameters/occasion"].shape == (60 * 2 * 2,)
        assert f["blq"][...].sum() > 0  # the flag is exercised
    # The parameters live in the file: no STEM.parameters.csv beside it, nor a temporary file.
    assert not (tmp_path / "b.parameters.csv").exists()
    assert temp_files(tmp_path) == []


def test_text_ids_and_a_text_column_one_replicate_hdf5_suffix(tmp_path):
    ids = [f"S-{i:03d}" for i in range(1, 21)]
    write_design(tmp_path / "design.csv", n=20, ids=ids, site=True)
    yaml = run_file(tmp_path, replicates=1, iov="")
    pkscan(tmp_path, yaml, "--output", "a.csv")
    pkscan(tmp_path, yaml, "--output", "b.hdf5")
    os.rename(tmp_path / "b.hdf5", tmp_path / "b.h5")
    dtypes = compare(tmp_path, "a", "b", yaml.read_text(), str(yaml),
                     ["WT", "OCC", "SITE"])
    assert dtypes["id"].kind == "O"  # variable-length strings
    with h5py.File(tmp_path / "b.h5", "r") as f:
        assert "replicate" not in f and "occasion" not in f["parameters"]
        assert f["covariates/SITE"].dtype.kind == "O"
        assert f["covariates/WT"].dtype == np.float64
        assert f["id"].asstr()[0] == "S-001"


def test_a_resampled_design_writes_the_virtual_and_source_ids(tmp_path):
    # count: id is the virtual subject's number (int64), source_id the dataset ID it copies
    # (text IDs here); the replicates' rows differ in number, every column still equals the CSV.
    ids = [f"S-{i:03d}" for i in range(1, 21)]
    write_design(tmp_path / "design.csv", n=20, ids=ids)
    yaml = run_file(tmp_path, extra="", iov="").read_text().replace(
        "  population:\n", "  population:\n    count: 33\n")
    (tmp_path / "sim.yaml").write_text(yaml)
    pkscan(tmp_path, tmp_path / "sim.yaml", "--output", "a.csv")
    pkscan(tmp_path, tmp_path / "sim.yaml", "--output", "b.h5")
    compare(tmp_path, "a", "b", yaml, str(tmp_path / "sim.yaml"), ["WT", "OCC"])
    with h5py.File(tmp_path / "b.h5", "r") as f:
        assert list(f.attrs["columns"])[:2] == ["id", "source_id"]
        assert f["id"].dtype == np.int64 and f["source_id"].dtype.kind == "O"
        assert set(f["id"][...]) == set(range(1, 34))
        assert set(f["source_id"].asstr()[...]) <= set(ids)
        assert list(f["parameters"].attrs["columns"])[:2] == ["id", "source_id"]
    assert temp_files(tmp_path) == []


def test_without_the_parameter_table_there_is_no_parameters_group(tmp_path):
    write_design(tmp_path / "design.csv", n=5)
    yaml = run_file(tmp_path, extra="  parameters: false\n", path="b.h5")  # the run file's path
    pkscan(tmp_path, yaml)
    with h5py.File(tmp_path / "b.h5", "r") as f:
        assert "parameters" not in f and "ipred" in f


def test_the_same_seed_writes_the_same_bytes(tmp_path):
    write_design(tmp_path / "design.csv", n=30)
    yaml = run_file(tmp_path)
    pkscan(tmp_path, yaml, "--output", "one.h5", "--threads", "1")
    pkscan(tmp_path, yaml, "--output", "two.h5", "--threads", "2")
    assert (tmp_path / "one.h5").read_bytes() == (tmp_path / "two.h5").read_bytes()


def test_a_column_name_hdf5_cannot_hold_is_bad_input_and_writes_nothing(tmp_path):
    (tmp_path / "design.csv").write_text(
        "ID,TIME,AMT,CMT,EVID,DV,WT,OCC,W/T\n1,0,100,1,1,.,70,1,7\n1,1,.,2,0,1,70,1,7\n")
    err = pkscan(tmp_path, run_file(tmp_path, path="sim.h5"), expect=2)
    assert len(err.strip().splitlines()) == 1 and "W/T" in err and "column 9" in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["design.csv", "sim.yaml"]
    # The same dataset as CSV is fine (the name is only a CSV header there).
    pkscan(tmp_path, run_file(tmp_path))


def test_a_missing_directory_is_bad_input_and_writes_nothing(tmp_path):
    write_design(tmp_path / "design.csv", n=5)
    err = pkscan(tmp_path, run_file(tmp_path), "--output", "missing/b.h5", expect=2)
    assert len(err.strip().splitlines()) == 1 and "missing/b.h5" in err, err
    assert not (tmp_path / "missing").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["design.csv", "sim.yaml"]


def test_an_error_while_running_leaves_the_earlier_result_and_no_temporary_file(tmp_path):
    # The last subject's weight makes exp(coefficient * (WT - 70)) overflow: the drawn clearance
    # is out of its domain, found while the design runs, after the file was created.
    write_design(tmp_path / "design.csv", n=40, wt_of=lambda k: 1000.0 if k == 39 else 70.0)
    yaml = run_file(tmp_path, effect="exponential", coef=1.0)
    (tmp_path / "b.h5").write_bytes(b"an earlier result")
    err = pkscan(tmp_path, yaml, "--output", "b.h5", expect=2)
    assert len(err.strip().splitlines()) == 1, err
    assert (tmp_path / "b.h5").read_bytes() == b"an earlier result"
    assert temp_files(tmp_path) == []
    assert not (tmp_path / "b.parameters.csv").exists()


def test_sigint_while_writing_leaves_no_file(tmp_path):
    write_design(tmp_path / "design.csv", n=400)
    yaml = run_file(tmp_path, replicates=150)
    p = subprocess.Popen([os.environ["PKSCAN_CLI"], "run", str(yaml), "--quiet", "--output",
                          "b.h5"], cwd=tmp_path, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not temp_files(tmp_path) and p.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    time.sleep(0.3)  # well into the replicates (the whole run takes several seconds)
    assert p.poll() is None, "the run ended before it could be interrupted"
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 130, err
    assert not (tmp_path / "b.h5").exists()
    assert temp_files(tmp_path) == []


def test_the_documented_h5py_example_runs(tmp_path, monkeypatch):
    doc = (os.path.join(os.environ.get("PKSCAN_SOURCE_DIR", "."), "docs", "output.md"))
    text = open(doc).read()
    section = text[text.index("#### Design simulations in HDF5"):]
    code = section[section.index("```python\n") + 10:]
    code = code[:code.index("```")]
    write_design(tmp_path / "design.csv", n=4)
    pkscan(tmp_path, run_file(tmp_path), "--output", "sim.h5")
    monkeypatch.chdir(tmp_path)
    names = {}
    exec(compile(code, doc, "exec"), names)  # the documentation's own example
    assert names["columns"][:2] == ["id", "time"]
    assert len(names["ids"]) == len(names["ipred"]) == len(names["wt"]) == 4 * 12 * 2
    assert len(names["cl"]) == 4 * 2 * 2  # subjects x occasions x replicates
