"""Summaries by group through `pkscan run`: the per-time means and percentiles of every group
(replicate, sweep point) recomputed with NumPy from the trajectories the same run writes
(numpy.percentile's default, type 7, is the documented definition), the group columns and their
order, the default grouping (every swept parameter, replicates pooled), `by: []` (one summary of
every row), the summaries-only path (the same bytes), and the HDF5 layout (a leading group axis)
holding the CSV's values."""

import itertools
import os
import subprocess

import numpy as np
import pytest

# 3 sweep points x 2 replicates x 40 subjects, 13 output times: exact percentiles (far below the
# exact-value budget), so every value must match NumPy's to rounding.
RUN = """model: two_compartment
time: {{dt: 0.5, steps: 24}}
subjects:
  population:
    count: 40
    seed: 7
    replicates: 2
    typical: {{ka: 1.0, cl: 5.0, v_central: 20}}
    iiv: {{cl: 0.09, v_central: 0.04}}
sweep:
  ka: [0.5, 1.0, 2.0]
  cl: [4, 6]
doses:
  - {{compartment: depot, time: 0, amount: 100, every: 6, repeat: 1}}
output:
  path: {path}
  times: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]
  trajectories: {trajectories}
  summaries: {summaries}
"""

COMPARTMENTS = ["depot", "central"]
PERCENTILES = [5, 50, 95]


def run(tmp_path, summaries, path="out.csv", trajectories="true"):
    (tmp_path / "run.yaml").write_text(
        RUN.format(path=path, trajectories=trajectories, summaries=summaries))
    p = subprocess.run([os.environ["PKSCAN_CLI"], "run", "run.yaml", "--quiet"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=120, check=False)
    assert p.returncode == 0, p.stderr


def read_csv(path):
    lines = path.read_text().splitlines()
    header = lines[0].split(",")
    return header, np.array([[float(x) for x in ln.split(",")] for ln in lines[1:]])


def expected(tmp_path, keys):
    """{group values: (times, mean [T, C], percentiles [T, C, Q])} from the trajectories."""
    header, rows = read_csv(tmp_path / "out.csv")
    col = {n: header.index(n) for n in header}
    conc = [col["conc_" + c] for c in COMPARTMENTS]
    groups = {}
    # Groups in order of first appearance among the rows: the documented group order.
    for key in dict.fromkeys(tuple(r[col[k]] for k in keys) for r in rows):
        sel = np.ones(len(rows), bool)
        for k, v in zip(keys, key):
            sel &= rows[:, col[k]] == v
        g = rows[sel]
        times = np.unique(g[:, col["time"]])
        mean = np.empty((len(times), len(conc)))
        pct = np.empty((len(times), len(conc), len(PERCENTILES)))
        for i, t in enumerate(times):
            at = g[g[:, col["time"]] == t][:, conc]
            mean[i] = at.mean(axis=0)
            pct[i] = np.percentile(at, PERCENTILES, axis=0).T
        groups[key] = (times, mean, pct)
    return groups


def check_summary(tmp_path, keys):
    header, table = read_csv(tmp_path / "out.summary.csv")
    assert header[:len(keys) + 1] == keys + ["time"]
    assert header[len(keys) + 1:] == (
        ["mean_conc_" + c for c in COMPARTMENTS] +
        [f"p{q}_conc_{c}" for q in PERCENTILES for c in COMPARTMENTS])
    want = expected(tmp_path, keys)
    nt = len(next(iter(want.values()))[0])
    assert len(table) == len(want) * nt
    nc = len(COMPARTMENTS)
    for i, (key, (times, mean, pct)) in enumerate(want.items()):  # groups in row order
        block = table[i * nt:(i + 1) * nt]
        np.testing.assert_array_equal(block[:, :len(keys)], np.tile(key, (nt, 1)))
        np.testing.assert_array_equal(block[:, len(keys)], times)
        got_mean = block[:, len(keys) + 1:len(keys) + 1 + nc]
        got_pct = block[:, len(keys) + 1 + nc:].reshape(nt, len(PERCENTILES), nc)
        np.testing.assert_allclose(got_mean, mean, rtol=1e-12, atol=1e-300)
        np.testing.assert_allclose(got_pct, pct.transpose(0, 2, 1), rtol=1e-12, atol=1e-300)
    return want


@pytest.mark.parametrize("by,keys", [
    ("{by: [replicate, ka, cl]}", ["replicate", "ka", "cl"]),
    ("{by: [cl, replicate]}", ["replicate", "cl"]),   # columns in row order, whatever the list's
    ("{by: [ka]}", ["ka"]),
    ("{by: [replicate]}", ["replicate"]),
    ("{by: []}", []),
    ("true", ["ka", "cl"]),                            # the default: every swept parameter
])
def test_each_group_is_summarised_as_numpy_summarises_its_rows(tmp_path, by, keys):
    run(tmp_path, by)
    want = check_summary(tmp_path, keys)
    sizes = {"replicate": 2, "ka": 3, "cl": 2}
    assert len(want) == int(np.prod([sizes[k] for k in keys]))
    # The groups come in row order: replicate, then the sweep point, first parameter slowest.
    assert list(want) == sorted(want) or keys == []


def test_summaries_only_gives_the_same_summary_bytes(tmp_path):
    for by in ["{by: [replicate, ka]}", "true"]:
        run(tmp_path, by)
        with_trajectories = (tmp_path / "out.summary.csv").read_bytes()
        run(tmp_path, by, trajectories="false")
        assert not (tmp_path / "out.csv").exists()
        assert (tmp_path / "out.summary.csv").read_bytes() == with_trajectories


def test_a_group_is_summarised_as_a_run_of_its_own(tmp_path):
    # The same subjects (draws depend on seed, replicate and subject only) at one sweep point:
    # the group's rows of the full run and the one-point run's summary are the same bits.
    run(tmp_path, "{by: [replicate, ka, cl]}")
    header, full = read_csv(tmp_path / "out.summary.csv")
    one = tmp_path / "one"
    one.mkdir()
    (one / "run.yaml").write_text(
        (tmp_path / "run.yaml").read_text().replace("ka: [0.5, 1.0, 2.0]", "ka: [1.0]"))
    p = subprocess.run([os.environ["PKSCAN_CLI"], "run", "run.yaml", "--quiet"], cwd=one,
                       capture_output=True, text=True, timeout=120, check=False)
    assert p.returncode == 0, p.stderr
    _, part = read_csv(one / "out.summary.csv")
    sel = full[:, 1] == 1.0
    np.testing.assert_array_equal(full[sel], part)


def test_hdf5_holds_the_groups_on_a_leading_axis(tmp_path):
    h5py = pytest.importorskip("h5py")
    run(tmp_path, "{by: [replicate, ka]}")
    _, table = read_csv(tmp_path / "out.summary.csv")
    run(tmp_path, "{by: [replicate, ka]}", path="out.h5")
    with h5py.File(tmp_path / "out.h5", "r") as f:
        s = f["summary"]
        groups = s["groups"][...]
        assert [c if isinstance(c, str) else c.decode() for c in s["groups"].attrs["columns"]] == \
            ["replicate", "ka"]
        np.testing.assert_array_equal(groups, [[r, k] for r, k in itertools.product(
            [1, 2], [0.5, 1.0, 2.0])])
        nt = 13
        assert s["mean"].shape == (6, nt, 2) and s["quantiles"].shape == (6, nt, 2, 3)
        assert list(s["count"][...]) == [80] * 6 and list(s["excluded"][...]) == [0] * 6
        assert s.attrs["exact"] == 1
        np.testing.assert_array_equal(s["mean"][...].reshape(-1, 2), table[:, 3:5])
        np.testing.assert_array_equal(
            s["quantiles"][...].transpose(0, 1, 3, 2).reshape(-1, 6), table[:, 5:])


def test_without_a_sweep_or_groups_the_summary_keeps_its_layout(tmp_path):
    # A population without a sweep: one summary, `time` first, as before grouping existed.
    (tmp_path / "run.yaml").write_text(RUN.format(path="out.csv", trajectories="true",
                                                  summaries="true").split("sweep:")[0] +
                                       "doses:\n  - {compartment: depot, time: 0, amount: 100}\n"
                                       "output: {path: out.csv, summaries: true}\n")
    p = subprocess.run([os.environ["PKSCAN_CLI"], "run", "run.yaml", "--quiet"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
    assert p.returncode == 0, p.stderr
    header, table = read_csv(tmp_path / "out.summary.csv")
    assert header[0] == "time" and len(table) == 25


def test_groups_that_cannot_be_held_are_refused_before_anything_is_written(tmp_path):
    # 10^4 sweep points of 3 x 10^6 output values each: ~5e14 bytes of summaries kept at once.
    values = "[" + ", ".join(str(1 + i / 100) for i in range(100)) + "]"
    text = RUN.format(path="out.csv", trajectories="false", summaries="true") \
        .replace("steps: 24", "steps: 1000000").replace("ka: [0.5, 1.0, 2.0]", "ka: " + values) \
        .replace("cl: [4, 6]", "cl: " + values).replace(
            "  times: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]\n", "")
    (tmp_path / "run.yaml").write_text(text)
    for command in [["validate"], ["run", "--quiet"]]:
        p = subprocess.run([os.environ["PKSCAN_CLI"], command[0], "run.yaml"] + command[1:],
                           cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
        assert p.returncode == 2, p.stderr
        assert "summaries of 10000 groups kept at once need" in p.stderr, p.stderr
        assert "run.yaml:10:1:" in p.stderr and p.stderr.count("\n") == 1, p.stderr
    assert sorted(f.name for f in tmp_path.iterdir()) == ["run.yaml"]


REPLICATES = """model: two_compartment
time: {{dt: 1, steps: 6}}
subjects:
  population:
    count: 50
    seed: 2
    replicates: {replicates}
    typical: {{ka: 1.0, cl: 5.0, v_central: 20}}
    iiv: {{cl: 0.09}}
sweep:
  ka: [0.5, 2]
doses:
  - {{compartment: depot, time: 0, amount: 100}}
output:
  path: {path}
  trajectories: false
  summaries: {{percentiles: [5, 50, 95], {by}replicates: {{percentiles: [10, 50, 90]}}}}
"""


def run_replicates(tmp_path, replicates=20, by="", path="rep.csv", expect=0):
    (tmp_path / "run.yaml").write_text(REPLICATES.format(replicates=replicates, by=by, path=path))
    p = subprocess.run([os.environ["PKSCAN_CLI"], "run", "run.yaml", "--quiet"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=120, check=False)
    assert p.returncode == expect, p.stderr
    return p.stderr


def test_summaries_across_replicates_are_numpys_percentiles_of_each_replicates_statistics(
        tmp_path):
    run_replicates(tmp_path)
    header, per_rep = read_csv(tmp_path / "rep.summary.csv")
    assert header[:3] == ["replicate", "ka", "time"]  # grouped by replicate as well (default)
    rheader, across = read_csv(tmp_path / "rep.replicates.csv")
    stats = ["mean", "p5", "p50", "p95"]
    assert rheader == ["ka", "time"] + [f"{s}_conc_{c}_q{q}" for s in stats for q in (10, 50, 90)
                                        for c in COMPARTMENTS]
    nt = 7
    assert len(across) == 2 * nt
    for g, ka in enumerate([0.5, 2.0]):
        rows = per_rep[per_rep[:, 1] == ka]          # 20 replicates x 7 times
        assert len(rows) == 20 * nt
        values = rows[:, 3:].reshape(20, nt, len(stats), len(COMPARTMENTS))
        want = np.percentile(values, [10, 50, 90], axis=0)  # (q, t, s, c)
        block = across[g * nt:(g + 1) * nt]
        np.testing.assert_array_equal(block[:, 0], ka)
        got = block[:, 2:].reshape(nt, len(stats), 3, len(COMPARTMENTS))  # (t, s, q, c)
        np.testing.assert_allclose(got, want.transpose(1, 2, 0, 3), rtol=1e-13, atol=1e-300)


def test_summaries_across_replicates_in_hdf5(tmp_path):
    h5py = pytest.importorskip("h5py")
    run_replicates(tmp_path)
    _, across = read_csv(tmp_path / "rep.replicates.csv")
    run_replicates(tmp_path, path="rep.h5")
    with h5py.File(tmp_path / "rep.h5", "r") as f:
        r = f["replicates"]
        assert r["values"].shape == (2, 7, 2, 4, 3)  # groups, times, compartments, stats, q
        assert list(r["percentiles"][...]) == [10, 50, 90] and r["replicates"][()] == 20
        np.testing.assert_array_equal(r["groups"][...], [[0.5], [2.0]])
        got = r["values"][...].transpose(0, 1, 3, 4, 2).reshape(14, -1)  # (g t), (s q c)
        np.testing.assert_array_equal(got, across[:, 2:])


@pytest.mark.parametrize("replicates,by,words", [
    (20, "by: [ka], ", "need the summaries grouped by replicate"),
    (1, "", "at least 2 replicates"),
])
def test_summaries_across_replicates_need_replicates(tmp_path, replicates, by, words):
    err = run_replicates(tmp_path, replicates=replicates, by=by, expect=2)
    assert words in err and err.count("\n") == 1, err
    assert sorted(f.name for f in tmp_path.iterdir()) == ["run.yaml"]


def test_the_csv_says_which_percentiles_are_estimates(tmp_path):
    """With `exact: false`, a group with more values (subjects x times x compartments) than its
    share of the exact budget (4e6 values over the groups kept at once) keeps the sketch's
    estimates: the summary then
    ends in a column `exact`, 0 on that group's rows and 1 on the rows of a group within the
    budget; a run whose groups all stay within it has no such column. Here the arms are
    summarised one after the other (one group kept at once): 200 x 20 x 2 values are exact,
    110000 x 20 x 2 = 4.4e6 are not."""
    run = """model: two_compartment
time: {{dt: 1, steps: 19}}
subjects:
  population:
    seed: 5
    typical: {{ka: 1.0, cl: 5.0, v_central: 20}}
    iiv: {{cl: 0.09}}
arms:
  - {{name: small, count: 200, doses: [{{compartment: depot, time: 0, amount: 100}}]}}
  - {{name: large, count: {large}, doses: [{{compartment: depot, time: 0, amount: 100}}]}}
output:
  path: out.csv
  trajectories: false
  summaries: {{exact: false}}
"""
    def summary(large):
        (tmp_path / "run.yaml").write_text(run.format(large=large))
        subprocess.run([os.environ["PKSCAN_CLI"], "run", "run.yaml", "--quiet"], cwd=tmp_path,
                       check=True, timeout=300)
        return [ln.split(",") for ln in (tmp_path / "out.summary.csv").read_text().splitlines()]

    lines = summary(110000)
    assert lines[0][-1] == "exact"
    flags = {arm: {ln[-1] for ln in lines[1:] if ln[0] == arm} for arm in ("small", "large")}
    assert flags == {"small": {"1"}, "large": {"0"}}
    # pkscan plot reads the column.
    p = subprocess.run([os.environ["PKSCAN_CLI"], "plot", "out.summary.csv", "-o", "p.png"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=120, check=False)
    assert p.returncode in (0, 3), p.stderr  # 3: no gnuplot on this machine
    assert summary(300)[0][-1] != "exact"
