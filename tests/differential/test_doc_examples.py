"""Every ```yaml example of README.md and docs/*.md is a run file that `pkscan validate` accepts
and `pkscan run` runs (or a fit file, with an `estimation` key, that `pkscan fit` runs), so a
documented example that breaks fails the tests.

Examples that show one part of a run file (a `model:` block, a `subjects:` block, a `sweep:`)
are completed, not skipped: the missing top-level keys come from COMPLETION below, and files
they name that do not exist (a dataset, a covariates file) are written next to the run file.
No example is skipped.
"""

import os
import pathlib
import re
import subprocess

import pytest
import yaml

SOURCE = pathlib.Path(os.environ.get("PKSCAN_SOURCE_DIR", pathlib.Path(__file__).parents[2]))
DOCS = [SOURCE / "README.md"] + sorted((SOURCE / "docs").glob("*.md"))

# What a partial example is completed with (only keys the example does not have).
COMPLETION = {
    "time": {"dt": 0.5, "steps": 48},
    "subjects": {"parameters": {"ka": 1.0, "cl": 5.0, "q": 8.0, "v_central": 20.0,
                                "v_peripheral": 70.0}},
    "doses": [{"compartment": "depot", "time": 0, "amount": 100, "every": 12, "repeat": 1}],
}

# A dataset for examples that name one that does not exist: two doses and observations per
# subject, with the parameters an example may leave to dataset columns (q and the volumes).
DATASET_HEADER = "ID,TIME,AMT,CMT,EVID,DV,Q,V_CENTRAL,V_PERIPHERAL"


def examples():
    found = []
    for doc in DOCS:
        text = doc.read_text()
        for m in re.finditer(r"```ya?ml\n(.*?)```", text, re.S):
            line = text[:m.start()].count("\n") + 1
            found.append(pytest.param(m.group(1), id=f"{doc.relative_to(SOURCE)}:{line}"))
    return found


def complete(doc, folder):
    """The example as a whole run file, writing the files it needs into `folder`."""
    run = dict(doc)
    subjects = run.get("subjects", {})
    dataset = subjects.get("dataset")
    if "subjects" not in run:
        model = run.get("model")
        if isinstance(model, dict):          # a linear model: every rate 0.2, first dose in
            lin = model["linear"]
            rates = [f["rate"] for f in lin.get("flows", [])] + [
                e["rate"] for e in lin.get("eliminations", [])]
            run["subjects"] = {"parameters": {r: 0.2 for r in rates}}
            run.setdefault("doses", [{"compartment": lin["compartments"][0], "time": 0,
                                      "amount": 100}])
        elif "arms" in run:  # arms split a population (with the weights of per: WT)
            run["subjects"] = {"population": {
                "seed": 1, "typical": COMPLETION["subjects"]["parameters"],
                "covariates": {"file": "covariates.csv", "effects": [
                    {"parameter": "cl", "covariate": "WT", "type": "power",
                     "coefficient": 0.75, "reference": 70}]}}}
        else:
            run["subjects"] = COMPLETION["subjects"]
    if dataset is None:
        run.setdefault("time", COMPLETION["time"])
        if "arms" not in run:  # each arm has its doses
            run.setdefault("doses", COMPLETION["doses"])
    elif not (folder / dataset).exists() and "population" in subjects:
        # A design simulation: the covariates and occasions its effects and iov name.
        rows = ["ID,TIME,AMT,CMT,EVID,DV,WT,OCC"]
        for s in range(1, 9):
            wt = 50 + 7 * s
            rows += [f"{s},0,100,1,1,.,{wt},1", f"{s},1,.,2,0,1.5,{wt},1",
                     f"{s},12,100,1,1,.,{wt},2", f"{s},14,.,2,0,2.5,{wt},2"]
        (folder / dataset).write_text("\n".join(rows) + "\n")
    elif not (folder / dataset).exists():
        lists = [len(v) for v in subjects.get("parameters", {}).values() if isinstance(v, list)]
        rows = [DATASET_HEADER]
        for s in range(1, (lists[0] if lists else 2) + 1):
            rows += [f"{s},0,100,1,1,.,8,20,70", f"{s},1,.,2,0,1.5,8,20,70",
                     f"{s},12,100,1,1,.,8,20,70", f"{s},14,.,2,0,2.5,8,20,70"]
        (folder / dataset).write_text("\n".join(rows) + "\n")
    population = run["subjects"].get("population", {})
    covariates = population.get("covariates", {}).get("file")
    if covariates and not (folder / covariates).exists():
        count = population.get("count") or sum(a["count"] for a in run.get("arms", []))
        names = sorted({e["covariate"] for e in population["covariates"]["effects"]})
        lines = [",".join(names)] + [",".join(f"{50 + (37 * i) % 50}" for _ in names)
                                     for i in range(count)]
        (folder / covariates).write_text("\n".join(lines) + "\n")
    return run


def run_fit_file(text, doc, tmp_path):
    """A fit file (`estimation` key): `pkscan fit` writes its estimates and subjects files. Its
    dataset is the example's of config/examples/estimation."""
    dataset = SOURCE / "config" / "examples" / "estimation" / doc["dataset"]
    (tmp_path / doc["dataset"]).write_text(dataset.read_text())
    (tmp_path / "fit.yaml").write_text(text)
    r = subprocess.run([os.environ["PKSCAN_CLI"], "fit", "fit.yaml"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 0, r.stderr
    main = tmp_path / doc["output"]["path"]
    assert main.read_text().splitlines()[0] == "name,estimate,se,rse,fixed,cv,shrinkage"
    for companion in (".subjects.csv", ".table.csv", ".ext"):
        assert main.with_name(main.stem + companion).exists()


@pytest.mark.parametrize("text", examples())
def test_documented_example_validates_and_runs(text, tmp_path):
    doc = yaml.safe_load(text)
    assert isinstance(doc, dict), "a YAML example must be a mapping"
    if "estimation" in doc:
        run_fit_file(text, doc, tmp_path)
        return
    run = complete(doc, tmp_path)
    written = text if run == doc else yaml.safe_dump(run, sort_keys=False)
    (tmp_path / "run.yaml").write_text(written)
    cli = os.environ["PKSCAN_CLI"]
    v = subprocess.run([cli, "validate", "run.yaml"], cwd=tmp_path, capture_output=True,
                       text=True, timeout=120, check=False)
    assert v.returncode == 0, v.stderr
    r = subprocess.run([cli, "run", "run.yaml", "--quiet", "--output", "example.csv"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False)
    assert r.returncode == 0, r.stderr
    lines = (tmp_path / "example.csv").read_text().splitlines()
    assert lines[0].startswith("id,time,amount_")
    assert len(lines) > 1
