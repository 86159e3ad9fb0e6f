"""Summaries stratified by a covariate through `pkscan run`: `output.summaries.by` naming a column
of the population's covariates file splits every group by the column's distinct values. Each
stratum's per-time means and percentiles are recomputed with NumPy (type 7) from the
trajectories the same run writes, the subjects' values taken from the covariates file; the
metrics do not depend on the grouping; percentiles stay exact beyond the summaries' budget; and
the covariates file may serve doses and strata without any covariate effect."""

import os
import subprocess

import numpy as np
import pytest

RUN = """model: two_compartment
time: {{dt: 1, steps: 12}}
subjects:
  population:
    seed: 3
    replicates: 2
    typical: {{ka: 1.0, cl: 5.0, v_central: 20}}
    iiv: {{cl: 0.09, v_central: 0.04}}
    covariates:
      file: cov.csv
arms:
  - {{name: low, count: {count}, doses: [{{compartment: depot, time: 0, amount: 100}}]}}
  - {{name: high, count: {count}, doses: [{{compartment: depot, time: 0, amount: 2.5, per: WT}}]}}
output:
  path: {path}
  trajectories: {trajectories}
  summaries: {summaries}
"""
PERCENTILES = [5, 50, 95]


def write_covariates(tmp_path, n, seed=1, groups=(1, 2, 3)):
    rng = np.random.default_rng(seed)
    wt = np.round(rng.uniform(50, 100, n), 1)
    group = rng.choice(groups, n)
    with open(tmp_path / "cov.csv", "w") as f:
        f.write("WT,GROUP\n")
        for w, g in zip(wt, group):
            f.write(f"{w},{g}\n")
    return wt, group


def run(tmp_path, count=300, path="out.csv", trajectories="true",
        summaries="{by: [arm, replicate, GROUP]}", expect=0):
    (tmp_path / "run.yaml").write_text(RUN.format(count=count, path=path,
                                                  trajectories=trajectories, summaries=summaries))
    p = subprocess.run([os.environ["PKSCAN_CLI"], "run", "run.yaml", "--quiet"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=600, check=False)
    assert p.returncode == expect, p.stderr
    return p.stderr


def read_csv(path):
    lines = path.read_text().splitlines()
    header = lines[0].split(",")
    return header, [ln.split(",") for ln in lines[1:]]


def test_each_stratum_is_numpys_summary_of_its_subjects(tmp_path):
    _, group = write_covariates(tmp_path, 600)
    run(tmp_path)
    header, rows = read_csv(tmp_path / "out.csv")
    col = {n: header.index(n) for n in header}
    arm = np.array([r[col["arm"]] for r in rows])
    num = np.array([[float(r[i]) for i in range(len(header)) if header[i] != "arm"] for r in rows])
    ncol = {n: i for i, n in enumerate(h for h in header if h != "arm")}
    ids = num[:, ncol["id"]].astype(int)
    stratum = group[ids - 1]  # id counts the trial's subjects: its covariates row
    sh, srows = read_csv(tmp_path / "out.summary.csv")
    assert sh[:4] == ["arm", "replicate", "GROUP", "time"]
    # Groups in order: arm, replicate, then the strata ascending; every stratum present.
    keys = list(dict.fromkeys((r[0], r[1], r[2]) for r in srows))
    assert keys == [(a, str(rep), str(g)) for a in ("low", "high") for rep in (1, 2)
                    for g in (1, 2, 3)]
    conc = [ncol["conc_depot"], ncol["conc_central"]]
    checked = 0
    for a, rep, g in keys:
        sel = (arm == a) & (num[:, ncol["replicate"]] == int(rep)) & (stratum == int(g))
        assert sel.any()
        table = np.array([[float(x) for x in r[3:]] for r in srows if (r[0], r[1], r[2]) ==
                          (a, rep, g)])
        times = np.unique(num[sel, ncol["time"]])
        np.testing.assert_array_equal(table[:, 0], times)
        for i, t in enumerate(times):
            at = num[sel & (num[:, ncol["time"]] == t)][:, conc]
            np.testing.assert_allclose(table[i, 1:3], at.mean(axis=0), rtol=1e-12, atol=1e-300)
            want = np.percentile(at, PERCENTILES, axis=0)  # [Q, C]
            np.testing.assert_allclose(table[i, 3:9], want.reshape(-1), rtol=1e-12, atol=1e-300)
            checked += 1
    assert checked == 12 * 13
    # The metrics are the rows', whatever the grouping; the summaries-only run writes the same
    # summary.
    metrics = (tmp_path / "out.metrics.csv").read_bytes()
    summary = (tmp_path / "out.summary.csv").read_bytes()
    run(tmp_path, summaries="{by: [arm, replicate]}")
    assert (tmp_path / "out.metrics.csv").read_bytes() == metrics
    run(tmp_path, trajectories="false")
    assert (tmp_path / "out.summary.csv").read_bytes() == summary


def test_strata_stay_exact_beyond_the_budget(tmp_path):
    h5py = pytest.importorskip("h5py")
    # By arm and stratum (replicates pooled), an arm at a time: 2 strata kept at once, each
    # with about 6000 subjects x 2 replicates x 97 times x 2 compartments = 2.3e6 values,
    # above its share of the summaries' budget (4e6 / 2): made exact by passes (without them,
    # the estimates).
    _, group = write_covariates(tmp_path, 24000, seed=2, groups=(1, 2))
    for exact in ("false", "true"):
        (tmp_path / "run.yaml").write_text(
            RUN.format(count=12000, path="out.h5", trajectories="true",
                       summaries="{by: [arm, GROUP], exact: %s}" % exact)
            .replace("steps: 12", "steps: 96"))
        p = subprocess.run([os.environ["PKSCAN_CLI"], "run", "run.yaml", "--quiet"], cwd=tmp_path,
                           capture_output=True, text=True, timeout=600, check=False)
        assert p.returncode == 0, p.stderr
        with h5py.File(tmp_path / "out.h5", "r") as f:
            s = f["summary"]
            assert s.attrs["exact"] == (exact == "true")
            assert [c if isinstance(c, str) else c.decode()
                    for c in s["groups"].attrs["columns"]] == ["arm", "GROUP"]
            if exact == "false":
                continue
            conc = f["concentration"][...]
            extra = f["extra"][...]
            stratum = group[f["id"][...] - 1]
            for (a, g), q, count in zip(s["groups"][...], s["quantiles"][...], s["count"][...]):
                sel = (extra[:, 0] == a) & (stratum == g)
                assert count == sel.sum() > 0
                np.testing.assert_allclose(q, np.percentile(conc[sel], PERCENTILES, axis=0)
                                           .transpose(1, 2, 0), rtol=1e-12, atol=1e-300)


@pytest.mark.parametrize("summaries,words,where", [
    ("{by: [arm, WT]}", "WT, which has 600 distinct values, but a stratification covariate may "
     "have at most 1000", None),
    ("{by: [arm, GROUP, WT]}", "the summaries are already stratified by GROUP", "run.yaml:17:"),
    ("{by: [arm, HEIGHT]}", "HEIGHT", "run.yaml:17:"),
])
def test_bad_strata_are_one_line(tmp_path, summaries, words, where):
    write_covariates(tmp_path, 600)
    if "at most" in words:  # more distinct values than allowed
        rng = np.random.default_rng(5)
        with open(tmp_path / "cov.csv", "w") as f:
            f.write("WT,GROUP\n")
            for w in rng.uniform(50, 100, 2400):
                f.write(f"{w:.6f},1\n")
        words = "which has 2400 distinct values, but a stratification covariate may have at most 1000"
        err = run(tmp_path, count=1200, summaries=summaries, expect=2)
    else:
        err = run(tmp_path, summaries=summaries, expect=2)
    assert words in err and err.count("\n") == 1, err
    if where:
        assert where in err, err
    assert sorted(f.name for f in tmp_path.iterdir()) == ["cov.csv", "run.yaml"]


def test_a_covariates_file_used_by_nothing_is_refused(tmp_path):
    write_covariates(tmp_path, 600)
    (tmp_path / "run.yaml").write_text(RUN.format(count=300, path="out.csv", trajectories="true",
                                                  summaries="{by: [arm]}")
                                       .replace("amount: 2.5, per: WT", "amount: 200"))
    p = subprocess.run([os.environ["PKSCAN_CLI"], "run", "run.yaml", "--quiet"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=60, check=False)
    assert p.returncode == 2
    assert "has no effects, and no dose (per, bands) or output.summaries.by uses it" in p.stderr
    assert sorted(f.name for f in tmp_path.iterdir()) == ["cov.csv", "run.yaml"]
