"""pkscan.simulate_population with arms and per-subject doses (covariates, `per`, `bands`)
against independent answers:

- every subject's amounts against pkscan.simulate_dataset (the event solver, an independent
  path) of the same subjects: their parameters from the returned table and their doses written
  out per subject (amount x WT, or the band's amount), to 1e-10 relative; mixed lines (a band
  and a fixed dose) add up; with arms and with plain doses;
- the subjects of arm k are the population's subjects after those of the arms before it (the
  etas and parameters of a one-arm population of the same seed);
- the summaries are grouped by arm (first group column) and equal NumPy's mean and percentiles
  of each arm's concentrations, to 1e-12;
- shares split the count by largest remainders; the same numbers as `pkscan run` on the
  equivalent run file; bad input is a ValueError with a one-line message.
"""

import os
import subprocess

import numpy as np
import pytest

import pkscan

N = 60
STEPS = 30
TYPICAL = {"ka": 1.2, "cl": 5.0, "v_central": 20.0}
IIV = {"cl": 0.09, "v_central": 0.04}
EFFECTS = [{"parameter": "cl", "covariate": "WT", "type": "power", "coefficient": 0.75,
            "reference": 70}]
FIXED = [{"compartment": "depot", "time": 0, "amount": 100, "every": 12, "repeat": 2}]
PER_KG = [{"compartment": "depot", "time": 0, "amount": 1.5, "per": "WT", "every": 12,
           "repeat": 2}]
BANDED = [{"compartment": "depot", "time": 0, "every": 12, "repeat": 2,
           "bands": {"covariate": "WT", "edges": [60, 90], "amounts": [80, 120, 160]}},
          {"compartment": "central", "time": 6, "amount": 10}]
ARMS = [{"name": "fixed", "count": 20, "doses": FIXED},
        {"name": "per_kg", "count": 20, "doses": PER_KG},
        {"name": "banded", "count": 20, "doses": BANDED}]


def weights(n=N):
    return np.round(np.random.default_rng(3).uniform(40, 110, n), 1)


def run(**kwargs):
    args = dict(dt=1, steps=STEPS, seed=8, iiv=IIV, covariates={"WT": weights()},
                effects=EFFECTS, trajectories=True)
    args.update(kwargs)
    return pkscan.simulate_population("two_compartment", TYPICAL, **args)


@pytest.fixture(scope="module")
def trial():
    return run(arms=ARMS)


def doses_of(kind, wt):
    """One subject's dose records (time, amount, CMT 1-based), written out by hand."""
    if kind == "fixed":
        return [(t, 100.0, 1) for t in (0, 12, 24)]
    if kind == "per_kg":
        return [(t, 1.5 * wt, 1) for t in (0, 12, 24)]
    band = 80.0 if wt < 60 else (120.0 if wt < 90 else 160.0)
    return [(t, band, 1) for t in (0, 12, 24)] + [(6, 10.0, 2)]


def dataset_amounts(r, kinds):
    """simulate_dataset of the rows' subjects (parameters from r, doses from doses_of): the
    amounts at t = 1..STEPS, [subjects, times, compartments]."""
    p = dict(zip(pkscan.Model("two_compartment").parameters, r["parameters"].T))
    wt = weights()
    lines = ["ID,TIME,AMT,CMT,EVID,KA,CL,V_CENTRAL"]
    for i, kind in enumerate(kinds):
        par = f"{p['ka'][i]!r},{p['cl'][i]!r},{p['v_central'][i]!r}"
        recs = [(t, repr(a), c, 1) for t, a, c in doses_of(kind, wt[i])]
        recs += [(t, ".", 2, 0) for t in range(1, STEPS + 1)]
        recs.sort(key=lambda x: (x[0], -x[3]))  # a dose before an observation at its time
        lines += [f"{i + 1},{t},{a},{c},{e},{par}" for t, a, c, e in recs]
    data = pkscan.parse_dataset("\n".join(lines) + "\n", "two_compartment")
    want = pkscan.simulate_dataset(data)
    return want["amounts"].reshape(len(kinds), STEPS, 2)


@pytest.mark.parametrize("how", ["arms", "doses"])
def test_each_subject_is_the_dataset_run_of_its_doses(trial, how):
    if how == "arms":
        r, kinds = trial, ["fixed"] * 20 + ["per_kg"] * 20 + ["banded"] * 20
    else:  # per-subject doses without arms: every subject gets the band and its fixed line
        r, kinds = run(count=N, doses=BANDED), ["banded"] * N
    want = dataset_amounts(r, kinds)
    np.testing.assert_allclose(r["amounts"][:, 1:, :], want, rtol=1e-10, atol=1e-12)
    # The per-kg doses are not all the same: the check would not see a dose left unscaled.
    assert np.ptp(want[20:40, 0, 0] if how == "arms" else want[:, 0, 0]) > 1


def test_per_kg_doses_without_arms():
    r = run(count=N, doses=PER_KG + [{"compartment": "central", "time": 6, "amount": 10}])
    p = dict(zip(pkscan.Model("two_compartment").parameters, r["parameters"].T))
    wt = weights()
    lines = ["ID,TIME,AMT,CMT,EVID,KA,CL,V_CENTRAL"]
    for i in range(N):
        par = f"{p['ka'][i]!r},{p['cl'][i]!r},{p['v_central'][i]!r}"
        recs = [(t, repr(1.5 * wt[i]), 1, 1) for t in (0, 12, 24)] + [(6, "10.0", 2, 1)]
        recs += [(t, ".", 2, 0) for t in range(1, STEPS + 1)]
        recs.sort(key=lambda x: (x[0], -x[3]))
        lines += [f"{i + 1},{t},{a},{c},{e},{par}" for t, a, c, e in recs]
    want = pkscan.simulate_dataset(pkscan.parse_dataset("\n".join(lines) + "\n",
                                                        "two_compartment"))
    np.testing.assert_allclose(r["amounts"][:, 1:, :], want["amounts"].reshape(N, STEPS, 2),
                               rtol=1e-10, atol=1e-12)
    assert "arm" not in r and "arm_names" not in r and r["extra_columns"] == []


def test_arm_subjects_are_the_population_subjects_in_order(trial):
    one = run(count=N, doses=FIXED)
    np.testing.assert_array_equal(trial["etas"], one["etas"])
    np.testing.assert_array_equal(trial["parameters"], one["parameters"])
    np.testing.assert_array_equal(trial["arm"], np.repeat([1, 2, 3], 20))
    assert trial["arm_names"] == ["fixed", "per_kg", "banded"]
    assert trial["extra_columns"] == ["arm"]
    np.testing.assert_array_equal(trial["extra"][:, 0], trial["arm"])
    np.testing.assert_array_equal(trial["ids"], np.arange(1, N + 1))
    # The fixed arm is the one-arm population's first 20 subjects, amount for amount.
    np.testing.assert_array_equal(trial["amounts"][:20], one["amounts"][:20])


def test_summaries_are_by_arm_and_equal_numpys(trial):
    r = trial
    assert r["summary_columns"] == ["arm"]
    np.testing.assert_array_equal(r["groups"][:, 0], [1, 2, 3])
    v = r["parameters"][:, pkscan.Model("two_compartment").parameters.index("v_central")]
    conc = r["amounts"][:, :, 1] / v[:, None]
    for k in range(3):
        c = conc[r["arm"] == k + 1]
        np.testing.assert_allclose(r["mean"][k, :, 1], c.mean(axis=0), rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose(r["quantiles"][k, :, 1, :],
                                   np.percentile(c, [5, 50, 95], axis=0).T, rtol=1e-12,
                                   atol=1e-15)
        assert r["count"][k] == 20
    # By arm and replicate: the arm first.
    two = run(arms=ARMS, replicates=2, summary_by=["arm", "replicate"], trajectories=False)
    assert two["summary_columns"] == ["arm", "replicate"]
    np.testing.assert_array_equal(two["groups"], [[1, 1], [1, 2], [2, 1], [2, 2], [3, 1],
                                                  [3, 2]])
    np.testing.assert_array_equal(two["arm"], np.repeat([1, 2, 3], 40))


def test_shares_split_the_count_by_largest_remainders():
    arms = [dict(a, share=s) for a, s in zip(ARMS, [1 / 3, 1 / 3 + 1e-12, 1 / 3 - 1e-12])]
    for a in arms:
        del a["count"]
    r = run(arms=arms, count=61, covariates={"WT": weights(61)}, trajectories=False)
    assert [int((r["arm"] == k).sum()) for k in (1, 2, 3)] == [20, 21, 20]


def test_the_same_run_as_the_run_file_gives_the_same_numbers(tmp_path, trial):
    cli = os.environ.get("PKSCAN_CLI")
    if not cli:
        pytest.skip("PKSCAN_CLI is not set")
    (tmp_path / "cov.csv").write_text("WT\n" + "\n".join(repr(w) for w in weights()) + "\n")
    (tmp_path / "trial.yaml").write_text("""model: two_compartment
time: {dt: 1, steps: 30}
subjects:
  population:
    seed: 8
    typical: {ka: 1.2, cl: 5.0, v_central: 20}
    iiv: {cl: 0.09, v_central: 0.04}
    covariates:
      file: cov.csv
      effects: [{parameter: cl, covariate: WT, type: power, coefficient: 0.75, reference: 70}]
arms:
  - {name: fixed, count: 20, doses: [{compartment: depot, time: 0, amount: 100, every: 12, repeat: 2}]}
  - {name: per_kg, count: 20, doses: [{compartment: depot, time: 0, amount: 1.5, per: WT, every: 12, repeat: 2}]}
  - name: banded
    count: 20
    doses:
      - {compartment: depot, time: 0, every: 12, repeat: 2,
         bands: {covariate: WT, edges: [60, 90], amounts: [80, 120, 160]}}
      - {compartment: central, time: 6, amount: 10}
output:
  path: trial.csv
""")
    subprocess.run([cli, "run", "trial.yaml", "--quiet"], cwd=tmp_path, check=True, timeout=300)
    lines = (tmp_path / "trial.csv").read_text().splitlines()
    header = lines[0].split(",")
    rows = [ln.split(",") for ln in lines[1:]]
    col = {h: [r[k] for r in rows] for k, h in enumerate(header)}
    assert col["arm"] == [n for n in trial["arm_names"] for _ in range(20 * (STEPS + 1))]
    np.testing.assert_array_equal(np.array(col["amount_central"], float),
                                  trial["amounts"][:, :, 1].ravel())
    np.testing.assert_array_equal(np.array(col["id"], float),
                                  np.repeat(trial["ids"], STEPS + 1))


def test_bad_input_is_a_value_error_with_one_line():
    bad_band = [dict(BANDED[0], bands=dict(BANDED[0]["bands"], amounts=[80, 120])), BANDED[1]]
    bad = [
        (dict(count=N, doses=[dict(PER_KG[0], per="BW")]),
         r"doses\[0\]\.per is 'BW', but the covariates are WT"),
        (dict(count=N, doses=PER_KG, covariates=None, effects=None),
         r"doses\[0\]\.per is 'WT', but no covariates were given"),
        (dict(arms=[ARMS[0], dict(ARMS[2], doses=bad_band)]),
         r"arms\[1\]\.doses\[0\]\.bands\.amounts has 2 amounts, but must have 3"),
        (dict(arms=ARMS, doses=FIXED), "doses is not used with arms"),
        (dict(count=N, doses=[dict(PER_KG[0], bands=BANDED[0]["bands"])]),
         "gives both per and bands"),
        (dict(count=N, doses=[dict(BANDED[0], amount=5)]), "gives both amount and bands"),
        (dict(count=N, doses=FIXED, covariates={"WT": weights(N - 1)}),
         r"covariates\['WT'\] has 59 values, but the population has 60 subjects"),
        (dict(count=N, doses=FIXED, effects=[dict(EFFECTS[0], covariate="AGE")]),
         r"effects\[0\]\.covariate is 'AGE', but the covariates are WT"),
        (dict(arms=[dict(ARMS[0], name="per_kg"), ARMS[1], ARMS[2]]), "two arms are named per_kg"),
        (dict(arms=[dict(a, doses=FIXED) for a in ARMS], count=50, covariates=None,
              effects=None), "the arms have 60 subjects, but the population has 50"),
        (dict(arms=ARMS, summary_by=[]), "add arm to the groups"),
        (dict(arms=[{"name": "a", "share": 0.5}, {"name": "b", "share": 0.4}], count=N),
         "the shares add up to 0.9, but must add up to 1"),
        (dict(arms=[{"name": "a", "share": 0.5}, {"name": "b", "count": 30}], count=N),
         "count for some arms and share for others"),
        (dict(arms=[{"name": "a", "count": 60, "dose": FIXED}]), r"arms\[0\]: unknown key 'dose'"),
        (dict(arms=[{"count": 60, "doses": FIXED}]), r"arms\[0\]: missing key 'name'"),
        (dict(arms=[{"name": "a", "share": "half"}], count=N), r"arms\[0\]\.share must be a number"),
        (dict(count=-1), "count is -1, but must be >= 1"),
        (dict(arms=[]), "arms must be a non-empty list"),
        (dict(doses=FIXED), "give count"),
    ]
    for kwargs, match in bad:
        with pytest.raises(ValueError, match=match) as e:
            run(**kwargs)
        assert "\n" not in str(e.value), str(e.value)
    # A per-subject dose line is refused where doses do not depend on subjects.
    with pytest.raises(ValueError, match=r"unknown key 'per'"):
        pkscan.simulate("two_compartment", dict(TYPICAL), PER_KG, dt=1, steps=4)


def test_summaries_stratified_by_a_covariate_are_numpys():
    # summary_by=["arm", "SEX"]: every arm's subjects split by SEX (0 and 1), each stratum's
    # mean and percentiles equal to NumPy's over the subjects with that value, to 1e-12; a
    # covariate without effects serves the strata.
    sex = np.random.default_rng(4).integers(0, 2, N).astype(float)
    r = run(arms=ARMS, covariates={"WT": weights(), "SEX": sex}, summary_by=["arm", "SEX"])
    assert r["summary_columns"] == ["arm", "SEX"]
    np.testing.assert_array_equal(r["groups"], [[a, s] for a in (1, 2, 3) for s in (0, 1)])
    volume = r["parameters"][:, pkscan.Model("two_compartment").parameters.index("v_central")]
    conc = r["amounts"][:, :, 1] / volume[:, None]
    subject_sex = sex[r["ids"] - 1]
    for g, (arm, s) in enumerate(r["groups"]):
        rows = conc[(r["arm"] == arm) & (subject_sex == s)]
        assert r["count"][g] == len(rows) > 0
        np.testing.assert_allclose(r["mean"][g, :, 1], rows.mean(axis=0), rtol=1e-12)
        np.testing.assert_allclose(r["quantiles"][g, :, 1, :],
                                   np.percentile(rows, [5, 50, 95], axis=0).T, rtol=1e-12)
    with pytest.raises(ValueError, match="two covariates"):
        run(arms=ARMS, covariates={"WT": weights(), "SEX": sex}, summary_by=["arm", "SEX", "WT"])


def test_arms_with_their_own_times():
    # Arm 'fixed' samples 0, 2, ..., 30 and arm 'per_kg' 1, 5, 30: 'times' is their union, each
    # arm's values are those of the same trial sampled at every step (to 1e-12) and NaN where
    # it does not sample; its summaries are NumPy's over its rows at its times.
    own = [dict(ARMS[0], times=list(range(0, STEPS + 1, 2))), dict(ARMS[1], times=[1, 5, 30])]
    wt = {"WT": weights(40)}
    every = run(arms=ARMS[:2], covariates=wt)
    r = run(arms=own, covariates=wt)
    want_times = sorted(set(range(0, STEPS + 1, 2)) | {1, 5, 30})
    np.testing.assert_array_equal(r["times"], want_times)
    sampled = np.isin(r["times"], own[0]["times"]), np.isin(r["times"], own[1]["times"])
    np.testing.assert_array_equal(r["arm_sampled"], np.stack(sampled))
    volume = r["parameters"][:, pkscan.Model("two_compartment").parameters.index("v_central")]
    for k in (1, 2):
        rows = r["arm"] == k
        at = np.searchsorted(every["times"], r["times"][sampled[k - 1]])
        np.testing.assert_allclose(r["amounts"][rows][:, sampled[k - 1]],
                                   every["amounts"][rows][:, at], rtol=1e-12, atol=0)
        assert np.isnan(r["amounts"][rows][:, ~sampled[k - 1]]).all()
        g = list(r["groups"][:, 0]).index(k)
        conc = r["amounts"][rows][:, sampled[k - 1], 1] / volume[rows, None]
        np.testing.assert_allclose(r["quantiles"][g][sampled[k - 1], 1, :],
                                   np.percentile(conc, [5, 50, 95], axis=0).T, rtol=1e-12)
        assert np.isnan(r["mean"][g][~sampled[k - 1]]).all()
    with pytest.raises(ValueError, match="arms\\[1\\].times"):
        run(arms=[own[0], dict(own[1], times=[1.5])], covariates=wt)
