"""Arms with their own output times (`arms[k].times`) through `pkscan run` and `pkscan plot`:

- each arm's rows, summary and metrics are, byte for byte, those of the same trial without arm
  times and with `output.times` set to that arm's times (the same subjects: arm k has the
  population's subjects after those of the arms before it), and its values at those times are
  the values of a run at every grid time (to 1e-12: another path through the engine);
- an arm without `times` has the rows of `output.times`;
- the per-time summaries of each arm are recomputed from its written rows with NumPy (mean and
  type-7 percentiles, to 1e-12 relative) and the metrics (cmax, tmax, AUC by the linear-up /
  log-down trapezoid, cmin after the last dose) from its rows at its times;
- the summaries across replicates of each arm are at its times (NumPy's type-7 percentiles of
  the replicates' means);
- an HDF5 result has one time axis (the sorted union of the arms' times), NaN where an arm does
  not sample, /arm_sampled saying which times each arm samples, and the same values as the CSV;
- `pkscan plot` draws each arm's band over its own times (CSV and HDF5 results);
- bad `times` (unsorted, off the grid, past the end, empty, not a list, not numbers) is one line
  naming `arms[k].times[i]`, exit status 2, and nothing written; so is a summary CSV for
  `pkscan plot` whose groups of one arm have different times.
"""

import os
import stat
import subprocess

import numpy as np
import pytest

DT, STEPS = 0.5, 48  # the grid: 0, 0.5, ..., 24
ARMS = [  # name, count, times (None: output.times), dose amount
    ("low", 14, [0, 1, 2, 4, 8, 24], 50),
    ("high", 19, [0, 0.5, 3, 6, 12, 18, 24], 200),
    ("ref", 11, None, 100),
]
OUTPUT_TIMES = [0, 2, 12, 24]
PERCENTILES = [5, 50, 95]

TRIAL = """model: two_compartment
time: {{dt: {dt}, steps: {steps}}}
subjects:
  population:
    seed: 17
    typical: {{ka: 1.1, cl: 4.0, v_central: 18}}
    iiv: {{cl: 0.09, v_central: 0.04, ka: 0.1}}
{residual}arms:
{arms}output:
  path: {path}
  times: {times}
  summaries: {{percentiles: [5, 50, 95]}}
engine: {{method: scan, device: cpu}}
"""


def fmt(times):
    return "[" + ", ".join(repr(t) for t in times) + "]"


def arm_lines(with_times=True, times_override=None):
    lines = []
    for k, (name, count, times, amount) in enumerate(ARMS):
        t = ""
        if times_override is not None and k in times_override:
            t = f", times: {times_override[k]}"
        elif with_times and times is not None:
            t = f", times: {fmt(times)}"
        lines.append(f"  - {{name: {name}, count: {count}{t}, doses: [{{compartment: depot, "
                     f"time: 0, amount: {amount}, every: 8, repeat: 2}}]}}\n")
    return "".join(lines)


def trial_text(path, with_times=True, times=OUTPUT_TIMES, residual=False, override=None):
    res = "    residual: {additive: 0.05, proportional: 0.1}\n" if residual else ""
    return TRIAL.format(dt=DT, steps=STEPS, residual=res,
                        arms=arm_lines(with_times, override), path=path,
                        times=times if isinstance(times, str) else fmt(times))


def cli(tmp, *args, expect=0, env=None):
    p = subprocess.run([os.environ["PKSCAN_CLI"], *args], cwd=tmp, capture_output=True, text=True,
                       timeout=300, check=False, env=env)
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


def rows_of(path, arm):
    """The data lines of `arm` of a CSV whose `arm` column is `column`."""
    lines = path.read_text().splitlines()
    col = lines[0].split(",").index("arm")
    return [ln for ln in lines[1:] if ln.split(",")[col] == arm]


def times_of(k):
    t = ARMS[k][2]
    return OUTPUT_TIMES if t is None else t


@pytest.fixture(scope="module")
def trial(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("armtimes")
    (tmp / "trial.yaml").write_text(trial_text("trial.csv"))
    cli(tmp, "run", "trial.yaml", "--quiet")
    return tmp


def test_each_arm_is_the_trial_at_its_times_byte_for_byte(trial):
    tmp = trial
    for k, (name, count, _, _) in enumerate(ARMS):
        (tmp / f"ref{k}.yaml").write_text(trial_text(f"ref{k}.csv", with_times=False,
                                                     times=times_of(k)))
        cli(tmp, "run", f"ref{k}.yaml", "--quiet")
        for suffix in (".csv", ".summary.csv", ".metrics.csv", ".parameters.csv"):
            mine = rows_of(tmp / f"trial{suffix}", name)
            want = rows_of(tmp / f"ref{k}{suffix}", name)
            assert mine == want, (name, suffix)
        times = read(tmp / "trial.csv")
        rows = times["arm"] == name
        assert rows.sum() == count * len(times_of(k))
        np.testing.assert_array_equal(times["time"][rows].reshape(count, -1)[0], times_of(k))


def test_arm_rows_are_the_values_at_every_grid_time(trial):
    tmp = trial
    (tmp / "all.yaml").write_text(trial_text("all.csv", with_times=False, times="all"))
    cli(tmp, "run", "all.yaml", "--quiet")
    got, full = read(tmp / "trial.csv"), read(tmp / "all.csv")
    for k, (name, count, _, _) in enumerate(ARMS):
        mine = got["arm"] == name
        at = (full["arm"] == name) & np.isin(full["time"], times_of(k))
        np.testing.assert_array_equal(got["id"][mine], full["id"][at])
        np.testing.assert_array_equal(got["time"][mine], full["time"][at])
        for c in ("amount_depot", "amount_central", "conc_depot", "conc_central"):
            np.testing.assert_allclose(got[c][mine], full[c][at], rtol=1e-12, atol=1e-300)


def test_summaries_and_metrics_per_arm_equal_numpys(trial):
    tmp = trial
    traj, summ = read(tmp / "trial.csv"), read(tmp / "trial.summary.csv")
    met = read(tmp / "trial.metrics.csv")
    assert list(dict.fromkeys(summ["arm"])) == [a[0] for a in ARMS]
    for k, (name, count, _, _) in enumerate(ARMS):
        t = np.array(times_of(k), dtype=float)
        rows = traj["arm"] == name
        s = summ["arm"] == name
        np.testing.assert_array_equal(summ["time"][s], t)
        for c in ("depot", "central"):
            conc = traj[f"conc_{c}"][rows].reshape(count, len(t))
            np.testing.assert_allclose(summ[f"mean_conc_{c}"][s], conc.mean(axis=0), rtol=1e-12,
                                       atol=1e-300)
            for q in PERCENTILES:  # NumPy's default ("linear") is Hyndman & Fan type 7
                np.testing.assert_allclose(summ[f"p{q}_conc_{c}"][s],
                                           np.percentile(conc, q, axis=0), rtol=1e-12,
                                           atol=1e-300)
        conc = traj["conc_central"][rows].reshape(count, len(t))
        m = met["arm"] == name
        np.testing.assert_allclose(met["cmax"][m], conc.max(axis=1), rtol=1e-15)
        np.testing.assert_array_equal(met["tmax"][m], t[conc.argmax(axis=1)])
        auc = np.zeros(count)
        for i in range(1, len(t)):
            a, b, h = conc[:, i - 1], conc[:, i], t[i] - t[i - 1]
            down = (a > b) & (b > 0)
            with np.errstate(divide="ignore", invalid="ignore"):
                log_piece = (a - b) * h / np.log(a / b)
            auc += np.where(down, log_piece, (a + b) * h / 2)
        np.testing.assert_allclose(met["auc"][m], auc, rtol=1e-12)
        after = t >= 16  # the last dose is at 16
        np.testing.assert_allclose(met["cmin"][m], conc[:, after].min(axis=1), rtol=1e-15)


def test_hdf5_has_the_union_of_times_nan_padding_and_arm_sampled(trial):
    h5py = pytest.importorskip("h5py")
    tmp = trial
    (tmp / "trial_h5.yaml").write_text(trial_text("trial.h5", residual=True))
    cli(tmp, "run", "trial_h5.yaml", "--quiet")
    (tmp / "res.yaml").write_text(trial_text("res.csv", residual=True))
    cli(tmp, "run", "res.yaml", "--quiet")
    union = sorted(set().union(*[times_of(k) for k in range(len(ARMS))]))
    csv = read(tmp / "res.csv")
    summ = read(tmp / "res.summary.csv")
    with h5py.File(tmp / "trial.h5", "r") as f:
        time = f["time"][...]
        np.testing.assert_array_equal(time, union)
        sampled = f["arm_sampled"][...]
        assert sampled.shape == (len(ARMS), len(union))
        assert [n if isinstance(n, str) else n.decode() for n in f["arm_sampled"].attrs[
            "arm_names"]] == [a[0] for a in ARMS]
        conc, amount = f["concentration"][...], f["amount"][...]
        ipred, dv = f["ipred"][...], f["dv"][...]
        arm_col = f["extra"][:, 0]
        mean, quant = f["summary/mean"][...], f["summary/quantiles"][...]
        groups = f["summary/groups"][...]
        ids = f["id"][...]
    for k, (name, count, _, _) in enumerate(ARMS):
        want = np.isin(union, times_of(k)).astype(np.int8)
        np.testing.assert_array_equal(sampled[k], want)
        on, off = want == 1, want == 0
        rows = arm_col == k + 1
        assert rows.sum() == count
        mine = csv["arm"] == name
        np.testing.assert_array_equal(ids[rows], csv["id"][mine].reshape(count, -1)[:, 0])
        for c, ci in (("depot", 0), ("central", 1)):
            np.testing.assert_array_equal(conc[rows][:, on, ci],
                                          csv[f"conc_{c}"][mine].reshape(count, -1))
            np.testing.assert_array_equal(amount[rows][:, on, ci],
                                          csv[f"amount_{c}"][mine].reshape(count, -1))
            assert np.isnan(conc[rows][:, off, ci]).all()
            assert np.isnan(amount[rows][:, off, ci]).all()
        np.testing.assert_array_equal(ipred[rows][:, on], csv["ipred"][mine].reshape(count, -1))
        np.testing.assert_array_equal(dv[rows][:, on], csv["dv"][mine].reshape(count, -1))
        assert np.isnan(ipred[rows][:, off]).all() and np.isnan(dv[rows][:, off]).all()
        g = np.flatnonzero(groups[:, 0] == k + 1)
        assert len(g) == 1
        s = summ["arm"] == name
        np.testing.assert_array_equal(mean[g[0]][on, 1], summ["mean_conc_central"][s])
        for qi, q in enumerate(PERCENTILES):
            np.testing.assert_array_equal(quant[g[0]][on, 1, qi], summ[f"p{q}_conc_central"][s])
        assert np.isnan(mean[g[0]][off]).all() and np.isnan(quant[g[0]][off]).all()


def kept_script(tmp, result):
    """Runs `pkscan plot` with a gnuplot that keeps its script; returns {block: rows}."""
    wrapper = tmp / "keep-gnuplot"
    real = subprocess.run(["sh", "-c", "command -v gnuplot"], capture_output=True, text=True,
                          check=False).stdout.strip()
    if not real:
        pytest.skip("gnuplot is not installed")
    wrapper.write_text(f"#!/bin/sh\ncp plot.gp '{tmp}/kept.gp' && exec '{real}' \"$@\"\n")
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    env = dict(os.environ, PKSCAN_GNUPLOT=str(wrapper))
    cli(tmp, "plot", result, "-o", "plot.png", env=env)
    blocks, name = {}, None
    for line in (tmp / "kept.gp").read_text().splitlines():
        if name is None and line.startswith("$") and line.endswith(" << EOD"):
            name = line[:-7]
            blocks[name] = []
        elif name is not None and line == "EOD":
            name = None
        elif name is not None:
            blocks[name].append([float(x) for x in line.split()])
    return blocks


@pytest.mark.parametrize("result", ["trial.csv", "trial.h5"])
def test_plot_draws_each_arm_over_its_own_times(trial, result):
    tmp = trial
    if result.endswith(".h5") and not (tmp / result).exists():
        (tmp / "trial_h5.yaml").write_text(trial_text("trial.h5", residual=True))
        cli(tmp, "run", "trial_h5.yaml", "--quiet")
    blocks = kept_script(tmp, result)
    for k in range(len(ARMS)):
        # Every concentration of the central compartment is finite: each of the arm's times is
        # drawn, and no other.
        center = np.array(blocks[f"$center{k + 1}"])
        band = np.array(blocks[f"$band{k + 1}"])
        np.testing.assert_array_equal(center[:, 0], times_of(k))
        np.testing.assert_array_equal(band[:, 0], times_of(k))


BAD = [
    ({0: "[0, 4, 2]"}, "arms[1].times[3]"),
    ({1: "[0, 0.3, 1]"}, "arms[2].times[2]"),
    ({1: "[0, 1, 25]"}, "arms[2].times[3]"),
    ({0: "[]"}, "arms[1].times"),
    ({1: "every"}, "arms[2].times"),
    ({0: "{a: 1}"}, "arms[1].times"),
    ({1: "[0, x]"}, "arms[2].times[2]"),
    ({0: "[0, -1]"}, "arms[1].times[2]"),
    ({2: "[1, 1]"}, "arms[3].times[2]"),
]


@pytest.mark.parametrize("override,where", BAD)
def test_bad_arm_times_are_one_line_and_write_nothing(tmp_path, override, where):
    (tmp_path / "t.yaml").write_text(trial_text("t.csv", override=override))
    for command in (["run", "t.yaml", "--quiet"], ["validate", "t.yaml"]):
        p = cli(tmp_path, *command, expect=2)
        lines = p.stderr.strip().splitlines()
        assert len(lines) == 1 and where in lines[0], p.stderr
        assert (where + "[") not in lines[0] or where.endswith("]"), p.stderr
        assert not list(tmp_path.glob("t.*csv")), list(tmp_path.iterdir())


@pytest.mark.parametrize("rows,where", [
    ("a,1,0,1\na,1,1,2\na,2,0,1\na,2,2,2\n",
     "group arm = a, ka = 2 (from line 4) has other times than group arm = a, ka = 1; the groups "
     "of one arm must have the same times"),
    ("a,1,0,1\na,1,2,2\na,1,1,2\n",
     "line 4: group arm = a, ka = 1 has time 1 after 2; a group's times must increase"),
])
def test_plot_refuses_arm_groups_with_bad_times(tmp_path, rows, where):
    (tmp_path / "s.summary.csv").write_text("arm,ka,time,mean_conc_central\n" + rows)
    p = cli(tmp_path, "plot", "s.summary.csv", "-o", "s.png", expect=2)
    assert where in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert not (tmp_path / "s.png").exists()


REPLICATES = """model: two_compartment
time: {dt: 0.5, steps: 48}
subjects:
  population:
    seed: 17
    replicates: 3
    typical: {ka: 1.1, cl: 4.0, v_central: 18}
    iiv: {cl: 0.09}
arms:
  - {name: low, count: 4, times: [0, 1, 24], doses: [{compartment: depot, time: 0, amount: 50}]}
  - {name: high, count: 5, doses: [{compartment: depot, time: 0, amount: 100}]}
output:
  path: PATH
  times: [0, 2]
  summaries: {replicates: true}
"""


def test_summaries_across_replicates_are_at_each_arms_times(tmp_path):
    """Per arm and time, the percentiles across replicates of each replicate's mean (NumPy, type
    7) in STEM.replicates.csv at the arm's times; in HDF5 NaN at the others."""
    h5py = pytest.importorskip("h5py")
    times = {"low": [0, 1, 24], "high": [0, 2]}
    for path in ("r.csv", "r.h5"):
        (tmp_path / f"{path}.yaml").write_text(REPLICATES.replace("PATH", path))
        cli(tmp_path, "run", f"{path}.yaml", "--quiet")
    summ, rep = read(tmp_path / "r.summary.csv"), read(tmp_path / "r.replicates.csv")
    with h5py.File(tmp_path / "r.h5", "r") as f:
        np.testing.assert_array_equal(f["time"][...], [0, 1, 2, 24])
        values = f["replicates/values"][...]  # (G, T, C, S, R)
        stats = [s if isinstance(s, str) else s.decode()
                 for s in f["replicates/values"].attrs["statistics"]]
    for g, (arm, t) in enumerate(times.items()):
        r = rep["arm"] == arm
        np.testing.assert_array_equal(rep["time"][r], t)
        s = summ["arm"] == arm
        means = summ["mean_conc_central"][s].reshape(3, len(t))  # replicates x times
        for qi, q in enumerate([5, 50, 95]):
            want = np.percentile(means, q, axis=0)
            np.testing.assert_allclose(rep[f"mean_conc_central_q{q}"][r], want, rtol=1e-12,
                                       atol=1e-300)
            on = np.isin([0, 1, 2, 24], t)
            got = values[g, :, 1, stats.index("mean"), qi]
            np.testing.assert_array_equal(got[on], rep[f"mean_conc_central_q{q}"][r])
            assert np.isnan(got[~on]).all()
