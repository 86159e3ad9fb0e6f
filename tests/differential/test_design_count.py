"""Resampled design simulations (`subjects.population.count` next to `subjects.dataset`) through
`pkscan run`:

- every virtual subject's rows are its source subject's records: the observation times and the
  covariate column read from the dataset file, and without variability its amounts and IPRED
  the same bytes as the source subject's rows in the design run without `count`;
- the sources are uniform over the dataset's subjects: a chi-square test of the frequencies of
  6000 draws (3 replicates x 2000 subjects) over 10 subjects, 9 degrees of freedom, rejected
  below p = 1e-3 (fixed seed);
- the virtual subject j has the etas of grid population subject j of the same seed;
- the same bytes for 1 and 2 threads;
- bad counts, and `count` in `pkscan vpc`: one line, exit status 2, no file.
"""

import os
import subprocess

import numpy as np
import pytest
from scipy.stats import chi2

SOURCES = 10


def write_design(path):
    """Subject i (1-based) has its own doses (100 i at 0 and 12) and i + 2 observations at
    times k + i / 100 (k = 1, 2, ...), and weight 50 + i."""
    lines = ["ID,TIME,AMT,CMT,EVID,DV,WT"]
    design = {}
    for i in range(1, SOURCES + 1):
        times = [round(k + i / 100, 2) for k in range(1, i + 3)]
        rec = [(0.0, 100 * i, 1, 1), (12.0, 100 * i, 1, 1)] + [(t, None, 2, 0) for t in times]
        rec.sort(key=lambda r: (r[0], -r[3]))
        for t, amt, cmt, evid in rec:
            lines.append(f"S{i},{t},{'.' if amt is None else amt},{cmt},{evid},"
                         f"{'.' if evid else 1},{50 + i}")
        design[f"S{i}"] = (sorted(times), float(50 + i))
    path.write_text("\n".join(lines) + "\n")
    return design


POP = """    seed: 5
    replicates: {replicates}
    typical: {{ka: 1.0, cl: 5.0, v_central: 20, q: 8, v_peripheral: 70}}
{extra}"""


def run_file(tmp_path, population, name="sim"):
    text = ("model: three_compartment\nsubjects:\n  dataset: design.csv\n"
            f"  population:\n{population}output:\n  path: {name}.csv\n")
    (tmp_path / f"{name}.yaml").write_text(text)
    return tmp_path / f"{name}.yaml"


def pkscan(tmp_path, *args, expect=0):
    p = subprocess.run([os.environ["PKSCAN_CLI"], *map(str, args)], cwd=tmp_path,
                       capture_output=True, text=True, timeout=300, check=False)
    assert p.returncode == expect, p.stderr
    return p.stderr


def rows(path):
    lines = path.read_text().splitlines()
    return lines[0].split(","), [ln.split(",") for ln in lines[1:]]


def by_subject(header, body):
    """(replicate, id) -> that virtual subject's rows, in order."""
    rep = header.index("replicate") if "replicate" in header else None
    out = {}
    for r in body:
        out.setdefault((r[rep] if rep is not None else "1", r[0]), []).append(r)
    return out


@pytest.fixture(scope="module")
def resampled(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("count")
    design = write_design(tmp / "design.csv")
    yaml = run_file(tmp, POP.format(replicates=3, extra="    count: 2000\n"
                                    "    iiv: {cl: 0.09, v_central: 0.04}\n"
                                    "    residual: {additive: 0.05, proportional: 0.1}\n"))
    pkscan(tmp, "run", yaml, "--quiet")
    return tmp, design


def test_rows_are_the_source_subjects_records(resampled):
    tmp, design = resampled
    header, body = rows(tmp / "sim.csv")
    assert header[:3] == ["id", "source_id", "time"], header
    subjects = by_subject(header, body)
    assert len(subjects) == 3 * 2000
    for (_, vid), rs in subjects.items():
        assert 1 <= int(vid) <= 2000
        source = {r[1] for r in rs}
        assert len(source) == 1, rs
        times, wt = design[source.pop()]
        assert [float(r[2]) for r in rs] == times
        assert all(float(r[header.index("WT")]) == wt for r in rs)
    # The parameter table: one row per virtual subject and replicate, with the same source.
    th, tb = rows(tmp / "sim.parameters.csv")
    assert th[:3] == ["id", "source_id", "replicate"], th
    assert len(tb) == 3 * 2000
    src = {(r[2], r[0]): r[1] for r in tb}
    assert all(src[k] == rs[0][1] for k, rs in subjects.items())


def test_sources_are_uniform_chi_square(resampled):
    tmp, _ = resampled
    th, tb = rows(tmp / "sim.parameters.csv")
    counts = np.array([sum(r[1] == f"S{i}" for r in tb) for i in range(1, SOURCES + 1)])
    expected = len(tb) / SOURCES
    stat = float(((counts - expected) ** 2 / expected).sum())
    assert chi2.sf(stat, SOURCES - 1) > 1e-3, (counts, stat)
    # The three replicates draw different sources for the same virtual subject.
    per_rep = {}
    for r in tb:
        per_rep.setdefault(r[0], []).append(r[1])
    assert sum(len(set(v)) > 1 for v in per_rep.values()) > 1000


def test_without_variability_a_virtual_subject_is_its_source_bit_for_bit(tmp_path):
    write_design(tmp_path / "design.csv")
    pkscan(tmp_path, "run", run_file(tmp_path, POP.format(replicates=2, extra="    count: 50\n"),
                                     "virtual"), "--quiet")
    pkscan(tmp_path, "run", run_file(tmp_path, POP.format(replicates=1, extra=""), "plain"),
           "--quiet")
    vh, vb = rows(tmp_path / "virtual.csv")
    ph, pb = rows(tmp_path / "plain.csv")
    plain = by_subject(ph, pb)
    cols = ["amount_depot", "amount_central", "amount_peripheral", "conc_central", "ipred"]
    for (_, vid), rs in by_subject(vh, vb).items():
        src = plain[("1", rs[0][1])]
        assert [[r[vh.index(c)] for c in cols] for r in rs] == \
            [[r[ph.index(c)] for c in cols] for r in src], vid


def test_virtual_subject_j_has_the_etas_of_grid_subject_j(tmp_path):
    write_design(tmp_path / "design.csv")
    iiv = "    iiv: {cl: 0.09, v_central: 0.04}\n"
    pkscan(tmp_path, "run", run_file(tmp_path, POP.format(replicates=1, extra="    count: 40\n"
                                                          + iiv)), "--quiet")
    (tmp_path / "grid.yaml").write_text(
        "model: three_compartment\ntime: {dt: 1, steps: 2}\nsubjects:\n  population:\n"
        "    count: 40\n" + POP.format(replicates=1, extra=iiv)
        + "doses: [{compartment: depot, time: 0, amount: 100}]\noutput:\n  path: grid.csv\n")
    pkscan(tmp_path, "run", tmp_path / "grid.yaml", "--quiet")
    dh, db = rows(tmp_path / "sim.parameters.csv")
    gh, gb = rows(tmp_path / "grid.parameters.csv")
    assert [r[dh.index("eta_cl")] for r in db] == [r[gh.index("eta_cl")] for r in gb]
    assert [r[dh.index("eta_v_central")] for r in db] == [r[gh.index("eta_v_central")] for r in gb]


def test_the_same_bytes_for_one_and_two_threads(tmp_path):
    write_design(tmp_path / "design.csv")
    yaml = run_file(tmp_path, POP.format(replicates=2, extra="    count: 3000\n"
                                         "    iiv: {cl: 0.09}\n"
                                         "    residual: {additive: 0.05, proportional: 0.1}\n"))
    pkscan(tmp_path, "run", yaml, "--quiet", "--threads", "1", "--output", "one.csv")
    pkscan(tmp_path, "run", yaml, "--quiet", "--threads", "2", "--output", "two.csv")
    for suffix in (".csv", ".parameters.csv"):
        assert (tmp_path / f"one{suffix}").read_bytes() == (tmp_path / f"two{suffix}").read_bytes()


@pytest.mark.parametrize("count,words", [
    ("0", "subjects.population.count"), ("-3", "subjects.population.count"),
    ("1.5", "subjects.population.count"), ("many", "subjects.population.count"),
    ("2000000000", "subjects.population.count"),
])
def test_bad_counts_are_one_line_and_write_nothing(tmp_path, count, words):
    write_design(tmp_path / "design.csv")
    err = pkscan(tmp_path, "run", run_file(tmp_path, POP.format(
        replicates=1, extra=f"    count: {count}\n")), "--quiet", expect=2)
    assert words in err and "sim.yaml:" in err, err
    assert len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "sim.csv").exists()


def test_vpc_refuses_count_in_one_line(tmp_path):
    write_design(tmp_path / "design.csv")
    yaml = run_file(tmp_path, POP.format(replicates=20, extra="    count: 30\n"
                                         "    residual: {additive: 0.05}\n"))
    err = pkscan(tmp_path, "vpc", yaml, "--output", "vpc.png", "--quiet", expect=2)
    assert "count" in err and "VPC replicates the observed design" in err, err
    assert len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "vpc.png").exists() and not (tmp_path / "vpc.csv").exists()
