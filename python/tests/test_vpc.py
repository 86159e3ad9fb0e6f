"""pkscan.vpc (visual predictive checks without a run file) against independent answers:

- the table recomputed with NumPy (numpy.percentile, type 7) from the dataset's observations and
  from pkscan.simulate_design with the same arguments (the same seed: the same draws of every
  replicate): observed percentiles, each replicate's simulated percentiles and their prediction
  intervals, BLQ fractions, to 1e-12; automatic bins (one per distinct time, edges at the
  midpoints), given edges, other percentiles and interval, prediction correction (PRED from
  simulate_design without iiv, iov and residual: the population prediction at each record's
  covariates) and stratification by a dataset column;
- the same table as `pkscan vpc` on the equivalent run file (its CSV), number for number;
- bad input is a ValueError with a one-line message.
"""

import os
import shutil
import subprocess

import numpy as np
import pytest

import pkscan

REPS = 30
N = 60
TIMES = [0.5, 1, 2, 4, 8, 12]
EDGES = [0.5, 0.75, 1.5, 3, 6, 10, 12]  # automatic: one bin per distinct time, midpoints
TYPICAL = {"ka": 1.0, "cl": 5.0, "v_central": 20.0}
EFFECTS = [{"parameter": "cl", "covariate": "WT", "type": "power", "coefficient": 0.75,
            "reference": 70}]
LLOQ = 0.4
ARGS = dict(iiv={"cl": 0.09}, iov={"occasion": "OCC", "variances": {"v_central": 0.01}},
            effects=EFFECTS, residual={"additive": 0.05, "proportional": 0.1}, lloq=LLOQ,
            seed=21, replicates=REPS)


def data_text(n=N, seed=5):
    """A design whose DVs are observations of the model with a seed of its own; two occasions
    (before and after 4 h), one observation without a DV (MDV 1)."""
    rng = np.random.default_rng(seed)
    lines = ["ID,TIME,AMT,CMT,EVID,DV,MDV,WT,ARM,OCC"]
    for i in range(1, n + 1):
        wt = round(float(rng.uniform(50, 100)), 1)
        arm = "low" if i % 2 else "high"
        dose = 100 if arm == "low" else 200
        lines.append(f"{i},0,{dose},1,1,.,1,{wt},{arm},1")
        cl = 5 * (wt / 70) ** 0.75 * np.exp(rng.normal(0, 0.3))
        for t in TIMES:
            ka, v = 1.0, 20.0
            c = dose * ka / (v * (ka - cl / v)) * (np.exp(-cl / v * t) - np.exp(-ka * t))
            dv = c * (1 + 0.1 * rng.normal()) + 0.05 * rng.normal()
            mdv = 1 if t == 4 and i == 3 else 0
            lines.append(f"{i},{t},.,2,0,{dv:.6g},{mdv},{wt},{arm},{1 if t < 4 else 2}")
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def study():
    text = data_text()
    data = pkscan.parse_dataset(text, "two_compartment")
    obs = [ln.split(",") for ln in text.splitlines()[1:] if ln.split(",")[4] == "0"]
    sim = pkscan.simulate_design(data, TYPICAL, **ARGS)
    return dict(text=text, data=data, sim=sim,
                t=np.array([float(f[1]) for f in obs]),
                y=np.array([float(f[5]) if f[5] != "." else np.nan for f in obs]),
                has=np.array([f[6] == "0" for f in obs]),
                arm=np.array([f[8] for f in obs]))


def expected(s, bins, pc=None, percentiles=(5, 50, 95), interval=90):
    """The table recomputed with NumPy from the observations and simulate_design's replicates.
    bins: (stratum or None, lower, upper, last) per bin."""
    rows = len(s["t"])
    dv = s["sim"]["dv"].reshape(REPS, rows)
    blq = s["sim"]["blq"].reshape(REPS, rows)
    t, y = s["t"], s["y"]
    side = (100 - interval) / 2
    out = []
    for stratum, lower, upper, last in bins:
        inside = s["has"] & (t >= lower) & ((t < upper) | (last & (t <= upper)))
        if stratum is not None:
            inside &= s["arm"] == stratum
        f = np.ones(rows) if pc is None else np.median(pc[inside]) / pc
        yo, ys = y[inside] * f[inside], dv[:, inside] * f[inside]
        per_rep = np.percentile(ys, percentiles, axis=1)  # percentiles x REPS
        out.append(dict(
            observations=inside.sum(), time=np.median(t[inside]),
            observed=np.percentile(yo, percentiles),
            simulated=np.percentile(per_rep, [side, 50, 100 - side], axis=1).T,
            observed_blq=np.mean(y[inside] < LLOQ),
            simulated_blq=np.percentile(blq[:, inside].mean(axis=1), [side, 50, 100 - side]),
            points=np.sort(yo)))
    return out


def check(v, want):
    assert list(v["bin"]) == list(range(1, len(want) + 1))
    for b, w in enumerate(want):
        assert v["observations"][b] == w["observations"]
        assert v["time"][b] == w["time"]
        np.testing.assert_allclose(v["observed"][b], w["observed"], rtol=1e-12)
        np.testing.assert_allclose(v["simulated"][b], w["simulated"], rtol=1e-12)
        np.testing.assert_allclose(v["observed_blq"][b], w["observed_blq"], rtol=1e-12)
        np.testing.assert_allclose(v["simulated_blq"][b], w["simulated_blq"], rtol=1e-12,
                                   atol=1e-15)
    # The observations as compared, bin by bin.
    counts = np.cumsum([0] + [w["observations"] for w in want])
    assert len(v["observation_value"]) == counts[-1]
    for b, w in enumerate(want):
        part = slice(counts[b], counts[b + 1])
        np.testing.assert_allclose(np.sort(v["observation_value"][part]), w["points"],
                                   rtol=1e-12)
        assert np.all(v["observation_time"][part] >= v["lower"][b])
        assert np.all(v["observation_time"][part] <= v["upper"][b])


def test_table_against_numpy_with_automatic_bins(study):
    v = pkscan.vpc(study["data"], TYPICAL, **ARGS)
    np.testing.assert_array_equal(v["lower"], EDGES[:-1])
    np.testing.assert_array_equal(v["upper"], EDGES[1:])
    check(v, expected(study, [(None, EDGES[i], EDGES[i + 1], i == 5) for i in range(6)]))
    assert v["observations"].sum() == N * 6 - 1  # the record with MDV 1 is not observed
    assert v["observed"].shape == (6, 3) and v["simulated"].shape == (6, 3, 3)
    assert v["simulated_blq"].shape == (6, 3)
    assert "stratum" not in v and v["stratify"] is None and v["strata"] == [""]
    assert np.all(v["observation_stratum"] == 0)
    np.testing.assert_array_equal(v["percentiles"], [5, 50, 95])
    assert v["interval"] == 90 and v["replicates"] == REPS and v["prediction_corrected"] is False
    # The same table for any number of threads.
    one = pkscan.vpc(study["data"], TYPICAL, threads=1, **ARGS)
    np.testing.assert_array_equal(one["simulated"], v["simulated"])


def test_given_edges_percentiles_interval_and_bin_counts(study):
    edges = [0, 1.5, 5, 12]
    v = pkscan.vpc(study["data"], TYPICAL, bin_edges=edges, percentiles=(10, 50, 75, 90),
                   interval=80, **ARGS)
    np.testing.assert_array_equal(v["lower"], edges[:-1])
    want = expected(study, [(None, 0, 1.5, False), (None, 1.5, 5, False), (None, 5, 12, True)],
                    percentiles=(10, 50, 75, 90), interval=80)
    check(v, want)
    assert v["simulated"].shape == (3, 4, 3) and v["interval"] == 80
    # Three automatic bins of nearly equal counts (120 observations each, one without its DV).
    three = pkscan.vpc(study["data"], TYPICAL, bins=3, **ARGS)
    assert list(three["observations"]) == [120, 119, 120]


def test_prediction_corrected_vpc_uses_the_population_prediction(study):
    v = pkscan.vpc(study["data"], TYPICAL, prediction_corrected=True, **ARGS)
    assert v["prediction_corrected"] is True
    # PRED: the design without iiv, iov and residual error, at each record's weight.
    pred = pkscan.simulate_design(study["data"], TYPICAL, effects=EFFECTS)["ipred"]
    want = expected(study, [(None, EDGES[i], EDGES[i + 1], i == 5) for i in range(6)], pc=pred)
    check(v, want)


def test_stratified_by_a_dataset_column(study):
    v = pkscan.vpc(study["data"], TYPICAL, stratify="ARM", **ARGS)
    assert v["stratum"] == ["low"] * 6 + ["high"] * 6 and v["strata"] == ["low", "high"]
    assert v["stratify"] == "ARM"
    bins = [(s, EDGES[i], EDGES[i + 1], i == 5) for s in ("low", "high") for i in range(6)]
    check(v, expected(study, bins))
    counts = np.cumsum([0] + list(v["observations"]))
    np.testing.assert_array_equal(v["observation_stratum"][:counts[6]], 0)
    np.testing.assert_array_equal(v["observation_stratum"][counts[6]:], 1)


RUN = """model: two_compartment
subjects:
  dataset: data.csv
  population:
    seed: 21
    replicates: 30
    typical: {ka: 1.0, cl: 5.0, v_central: 20}
    iiv: {cl: 0.09}
    iov: {occasion: OCC, variances: {v_central: 0.01}}
    covariates:
      effects: [{parameter: cl, covariate: WT, type: power, coefficient: 0.75, reference: 70}]
    residual: {additive: 0.05, proportional: 0.1}
    lloq: 0.4
"""


def read_csv(path):
    lines = path.read_text().splitlines()
    cols = list(zip(*[ln.split(",") for ln in lines[1:]]))
    out = {}
    for h, c in zip(lines[0].split(","), cols):
        try:
            out[h] = np.array([float(x) for x in c])
        except ValueError:
            out[h] = list(c)
    return out


@pytest.mark.parametrize("flags,kwargs", [
    ([], {}),
    (["--prediction-corrected", "--stratify", "ARM", "--bin-edges", "0,1.5,5,12",
      "--percentiles", "10,50,90", "--interval", "80"],
     dict(prediction_corrected=True, stratify="ARM", bin_edges=[0, 1.5, 5, 12],
          percentiles=[10, 50, 90], interval=80)),
])
def test_the_same_table_as_pkscan_vpc(study, tmp_path, flags, kwargs):
    cli = os.environ.get("PKSCAN_CLI")
    if not cli:
        pytest.skip("PKSCAN_CLI is not set")
    if not shutil.which(os.environ.get("PKSCAN_GNUPLOT", "gnuplot")):
        pytest.skip("pkscan vpc needs gnuplot")
    (tmp_path / "data.csv").write_text(study["text"])
    (tmp_path / "run.yaml").write_text(RUN)
    subprocess.run([cli, "vpc", "run.yaml", "-o", "vpc.png", "-q", *flags], cwd=tmp_path,
                   check=True, timeout=300)
    want = read_csv(tmp_path / "vpc.csv")
    v = pkscan.vpc(pkscan.read_dataset(str(tmp_path / "data.csv"), "two_compartment"), TYPICAL,
                   **ARGS, **kwargs)
    names = ["p" + format(p, "g") for p in v["percentiles"]]
    expect = {"bin": v["bin"], "lower": v["lower"], "upper": v["upper"], "time": v["time"],
              "observations": v["observations"], "obs_blq": v["observed_blq"]}
    for j, p in enumerate(names):
        expect[f"obs_{p}"] = v["observed"][:, j]
        for k, end in enumerate(["lo", "median", "hi"]):
            expect[f"sim_{p}_{end}"] = v["simulated"][:, j, k]
    for k, end in enumerate(["lo", "median", "hi"]):
        expect[f"sim_blq_{end}"] = v["simulated_blq"][:, k]
    if "stratify" in kwargs:
        expect["stratum"] = v["stratum"]
    assert set(want) == set(expect)
    for name, got in expect.items():
        if name == "stratum":
            assert want[name] == got
        else:
            np.testing.assert_array_equal(want[name], got, err_msg=name)


def test_bad_input_is_a_value_error_with_one_line(study):
    data = study["data"]
    no_residual = {k: v for k, v in ARGS.items() if k not in ("residual", "lloq")}
    bad = [
        (no_residual, {}, "needs a residual error"),
        (dict(ARGS, replicates=1), {}, "at least 2"),
        (ARGS, dict(bin_edges=[1, 12]), "the observation at time 0.5 lies outside"),
        (ARGS, dict(bin_edges=[5, 1]), "ascending"),
        (ARGS, dict(stratify="DOSE"), "stratification column DOSE is not a column"),
        (ARGS, dict(stratify=""), "stratify is empty"),
        (ARGS, dict(percentiles=[50, 5]), "percentiles must be ascending"),
        (ARGS, dict(percentiles=[]), "no percentiles"),
        (ARGS, dict(interval=100), r"interval is 100, but must be in \(0, 100\)"),
        (ARGS, dict(bins=-1), "bins is -1"),
        (dict(ARGS, effects=[dict(EFFECTS[0], covariate="AGE")]), {}, "AGE is not a column"),
    ]
    for args, kwargs, match in bad:
        with pytest.raises(ValueError, match=match) as e:
            pkscan.vpc(data, TYPICAL, **args, **kwargs)
        assert "\n" not in str(e.value), str(e.value)
