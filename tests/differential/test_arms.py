"""Trials with arms on a time grid (`arms`, doses per unit of a covariate and by covariate band)
through `pkscan run`:

- each arm's trajectories against a dataset run (the event solver, an independent path) of the
  same subjects: their parameters from the written parameter table and their doses written out
  per subject (AMT = amount x WT, or the band's amount), to 1e-10 relative; mixed lines (a fixed
  and a per-kg dose in one arm) add up;
- the subjects of arm k are the population's subjects after those of the arms before it (the
  etas of a one-arm population of the same seed), ids count over the whole trial;
- the summaries are grouped by arm and equal NumPy's percentiles of the arm's trajectories;
- shares split the count by largest remainders; bad input is one line with exit status 2.
"""

import os
import subprocess

import numpy as np
import pytest

N = 60


def write_covariates(path, n=N):
    rng = np.random.default_rng(3)
    path.write_text("WT\n" + "\n".join(f"{w:.1f}" for w in rng.uniform(40, 110, n)) + "\n")


POP = """model: two_compartment
time: {{dt: 1, steps: 30}}
subjects:
  population:
    seed: 8
{count}    typical: {{ka: 1.2, cl: 5.0, v_central: 20}}
    iiv: {{cl: 0.09, v_central: 0.04}}
    covariates:
      file: cov.csv
      effects: [{{parameter: cl, covariate: WT, type: power, coefficient: 0.75, reference: 70}}]
{arms}output:
  path: {path}
{output}"""

ARMS = """arms:
  - name: fixed
    count: 20
    doses: [{compartment: depot, time: 0, amount: 100, every: 12, repeat: 2}]
  - name: per_kg
    count: 20
    doses: [{compartment: depot, time: 0, amount: 1.5, per: WT, every: 12, repeat: 2}]
  - name: banded
    count: 20
    doses:
      - {compartment: depot, time: 0, every: 12, repeat: 2,
         bands: {covariate: WT, edges: [60, 90], amounts: [80, 120, 160]}}
      - {compartment: central, time: 6, amount: 10}
"""


def cli(tmp, *args, expect=0):
    p = subprocess.run([os.environ["PKSCAN_CLI"], *args], cwd=tmp, capture_output=True, text=True,
                       timeout=300, check=False)
    assert p.returncode == expect, p.stderr
    return p


def read(path):
    lines = path.read_text().splitlines()
    header = lines[0].split(",")
    cols = list(zip(*[ln.split(",") for ln in lines[1:]]))
    out = {}
    for h, c in zip(header, cols):
        try:
            out[h] = np.array([float(x) for x in c])
        except ValueError:
            out[h] = np.array(c)
    return out


@pytest.fixture()
def trial(tmp_path):
    write_covariates(tmp_path / "cov.csv")
    (tmp_path / "trial.yaml").write_text(POP.format(count="", arms=ARMS, path="trial.csv",
                                                    output="  summaries: true\n"))
    cli(tmp_path, "run", "trial.yaml", "--quiet")
    return tmp_path


def doses_of(arm, wt):
    """The dose records of one subject: (time, amount, compartment)."""
    if arm == "fixed":
        return [(t, 100.0, 1) for t in (0, 12, 24)]
    if arm == "per_kg":
        return [(t, 1.5 * wt, 1) for t in (0, 12, 24)]
    band = 80.0 if wt < 60 else (120.0 if wt < 90 else 160.0)
    return sorted([(t, band, 1) for t in (0, 12, 24)] + [(6, 10.0, 2)])


def test_each_arm_is_the_dataset_run_of_its_subjects(trial):
    tmp = trial
    par = read(tmp / "trial.parameters.csv")
    wt = np.array([float(x) for x in (tmp / "cov.csv").read_text().split()[1:]])
    assert list(par["id"]) == list(range(1, N + 1))
    lines = ["ID,TIME,AMT,CMT,EVID,KA,CL,V_CENTRAL"]
    for i in range(N):
        p = f"{par['ka'][i]!r},{par['cl'][i]!r},{par['v_central'][i]!r}"
        recs = [(t, f"{a!r}", c, 1) for t, a, c in doses_of(par["arm"][i], wt[i])]
        recs += [(t, ".", 2, 0) for t in range(1, 31)]
        recs.sort(key=lambda r: (r[0], -r[3]))  # a dose before an observation at its time
        lines += [f"{i + 1},{t},{a},{c},{e},{p}" for t, a, c, e in recs]
    (tmp / "data.csv").write_text("\n".join(lines) + "\n")
    (tmp / "data.yaml").write_text("model: two_compartment\nsubjects:\n  dataset: data.csv\n"
                                   "output:\n  path: data.csv.out.csv\n")
    cli(tmp, "run", "data.yaml", "--quiet")
    want = read(tmp / "data.csv.out.csv")
    got = read(tmp / "trial.csv")
    at = got["time"] >= 1
    np.testing.assert_array_equal(got["id"][at], want["id"])
    np.testing.assert_allclose(got["conc_central"][at], want["conc_central"], rtol=1e-10,
                               atol=1e-12)
    np.testing.assert_allclose(got["amount_depot"][at], want["amount_depot"], rtol=1e-10,
                               atol=1e-12)


def test_arm_subjects_are_the_population_subjects_in_order(trial):
    tmp = trial
    (tmp / "one.yaml").write_text(POP.format(
        count=f"    count: {N}\n", path="one.csv", output="",
        arms="doses: [{compartment: depot, time: 0, amount: 100}]\n"))
    cli(tmp, "run", "one.yaml", "--quiet")
    arms, one = read(tmp / "trial.parameters.csv"), read(tmp / "one.parameters.csv")
    np.testing.assert_array_equal(arms["eta_cl"], one["eta_cl"])
    np.testing.assert_array_equal(arms["cl"], one["cl"])
    assert list(arms["arm"]) == ["fixed"] * 20 + ["per_kg"] * 20 + ["banded"] * 20


def test_summaries_are_by_arm_and_equal_numpys(trial):
    tmp = trial
    traj, summ = read(tmp / "trial.csv"), read(tmp / "trial.summary.csv")
    assert list(dict.fromkeys(summ["arm"])) == ["fixed", "per_kg", "banded"]
    for arm in ("fixed", "per_kg", "banded"):
        rows = traj["arm"] == arm
        conc = traj["conc_central"][rows].reshape(20, 31)
        s = summ["arm"] == arm
        np.testing.assert_allclose(summ["p50_conc_central"][s], np.percentile(conc, 50, axis=0),
                                   rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose(summ["mean_conc_central"][s], conc.mean(axis=0), rtol=1e-12,
                                   atol=1e-15)


def test_shares_split_the_count_by_largest_remainders(tmp_path):
    write_covariates(tmp_path / "cov.csv", 61)
    arms = ARMS.replace("count: 20", "share: 0.3333333333333333").replace(
        "share: 0.3333333333333333\n    doses: [{compartment: depot, time: 0, amount: 1.5",
        "share: 0.3333333333333334\n    doses: [{compartment: depot, time: 0, amount: 1.5")
    (tmp_path / "t.yaml").write_text(POP.format(count="    count: 61\n", arms=arms,
                                                path="t.csv", output=""))
    cli(tmp_path, "run", "t.yaml", "--quiet")
    par = read(tmp_path / "t.parameters.csv")
    counts = [int((par["arm"] == a).sum()) for a in ("fixed", "per_kg", "banded")]
    assert counts == [20, 21, 20]


@pytest.mark.parametrize("arms,output,where", [
    (ARMS.replace("per: WT", "per: BW"), "", "per is \"BW\", but the covariates file has"),
    (ARMS.replace("name: banded", "name: fixed"), "", "two arms are named fixed"),
    (ARMS.replace("amounts: [80, 120, 160]", "amounts: [80, 120]"), "",
     "amounts must be a list of 3 amounts"),
    (ARMS + "doses: [{compartment: depot, time: 0, amount: 1}]\n", "",
     "doses is not used with arms"),
    (ARMS, "  summaries: {by: []}\n", "must include arm"),
    (ARMS.replace("count: 20\n    doses: [{compartment: depot, time: 0, amount: 100",
                  "count: 0\n    doses: [{compartment: depot, time: 0, amount: 100"), "",
     "arms[1].count is 0"),
    (ARMS.replace("name: fixed", "name: \"a,b\""), "", "holds a comma"),
])
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, arms, output, where):
    write_covariates(tmp_path / "cov.csv")
    (tmp_path / "t.yaml").write_text(POP.format(count="", arms=arms, path="t.csv", output=output))
    p = cli(tmp_path, "run", "t.yaml", "--quiet", expect=2)
    assert where in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert not (tmp_path / "t.csv").exists()


SWEEP = """model: two_compartment
time: {{dt: 1, steps: 48}}
subjects:
  population:
    count: 30
    seed: 3
    typical: {{ka: 1.0, cl: 5.0, v_central: 20}}
    iiv: {{cl: 0.09}}
doses:
  - {{compartment: depot, time: 0, amount: {amount}, every: {every}, repeat: 3}}
  - {{compartment: central, time: 2, amount: 5, duration: {duration}}}
{sweep}output:
  path: {path}
  summaries: true
"""


def test_a_dose_sweep_point_is_the_run_of_its_doses_bit_for_bit(tmp_path):
    """Each point of a sweep of dose amount, interval and infusion duration is the one-point run
    of the same subjects with those doses: the same bytes for its rows, summary and metrics."""
    (tmp_path / "s.yaml").write_text(SWEEP.format(
        amount=1, every=12, duration=1, path="s.csv",
        sweep="sweep:\n  doses[1].amount: [50, 200]\n  doses[1].every: [12, 24]\n"
              "  doses[2].duration: [1, 4]\n"))
    cli(tmp_path, "run", "s.yaml", "--quiet")
    rows = (tmp_path / "s.csv").read_text().splitlines()
    summary = (tmp_path / "s.summary.csv").read_text().splitlines()
    metrics = (tmp_path / "s.metrics.csv").read_text().splitlines()
    assert rows[0].endswith(",dose1_amount,dose1_every,dose2_duration")
    point = 0
    for amount in (50, 200):
        for every in (12, 24):
            for duration in (1, 4):
                (tmp_path / "p.yaml").write_text(SWEEP.format(
                    amount=amount, every=every, duration=duration, path="p.csv", sweep=""))
                cli(tmp_path, "run", "p.yaml", "--quiet")
                one = (tmp_path / "p.csv").read_text().splitlines()[1:]
                mine = rows[1 + point * 30 * 49:1 + (point + 1) * 30 * 49]
                tail = f",{amount},{every},{duration}"
                assert all(r.endswith(tail) for r in mine)
                # The rows without the sweep columns; the ids count over the sweep points.
                strip = [",".join(r.split(",")[1:-3]) for r in mine]
                assert strip == [",".join(r.split(",")[1:]) for r in one]
                psum = (tmp_path / "p.summary.csv").read_text().splitlines()[1:]
                assert summary[1 + point * 49:1 + (point + 1) * 49] == [
                    f"{amount},{every},{duration}," + r for r in psum]
                pmet = (tmp_path / "p.metrics.csv").read_text().splitlines()[1:]
                assert [",".join(r.split(",")[4:]) for r in metrics[1 + point * 30:
                                                                    1 + (point + 1) * 30]] == \
                    [",".join(r.split(",")[1:]) for r in pmet]
                point += 1


@pytest.mark.parametrize("sweep,where", [
    ("sweep:\n  doses[3].amount: [1, 2]\n", "has 2 dose lines"),
    ("sweep:\n  doses[1].amount: [-1, 2]\n", "is -1, but must be finite and >= 0"),
    ("sweep:\n  doses[1].repeat: [1.5]\n", "must be a whole number"),
    ("sweep:\n  doses[1].every: [1.5]\n", "every"),
    ("sweep:\n  doses[1].interval: [12]\n", "is not a dose property"),
])
def test_bad_dose_sweeps_are_one_line(tmp_path, sweep, where):
    (tmp_path / "s.yaml").write_text(SWEEP.format(amount=1, every=12, duration=1, path="s.csv",
                                                  sweep=sweep))
    p = cli(tmp_path, "run", "s.yaml", "--quiet", expect=2)
    assert where in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert not (tmp_path / "s.csv").exists()
