"""`pkscan vpc` through the command line, against NumPy on the same run's simulated observations:

- the table (observed percentiles, each replicate's simulated percentiles and their prediction
  intervals, BLQ fractions; numpy.percentile, type 7) recomputed from the dataset and from
  `pkscan run` of the same run file (the same draws: seed, replicate, subject), to 1e-12;
- automatic bins: one per distinct time, edges at the midpoints; given edges; `--bins N`;
- prediction correction (Bergstrand et al. 2011) with PRED from a design run without
  variability (`pkscan run`, the population prediction at the dataset's covariates);
- stratification by a dataset column;
- the picture looked at as a person would: a PNG of the asked size, with the blue and red bands,
  the black observed lines and grey points, not blank;
- the same table for 1 and 2 threads; bad input: one line, exit status 2, nothing written.
"""

import os
import struct
import sys
import subprocess
import zlib

import numpy as np
import pytest

REPS = 50
TIMES = [0.5, 1, 2, 4, 8, 12]


def write_data(path, n=120, seed=5):
    """A design whose DVs are observations of the model with a seed of its own."""
    rng = np.random.default_rng(seed)
    lines = ["ID,TIME,AMT,CMT,EVID,DV,MDV,WT,ARM"]
    for i in range(1, n + 1):
        wt = round(float(rng.uniform(50, 100)), 1)
        arm = "low" if i % 2 else "high"
        dose = 100 if arm == "low" else 200
        lines.append(f"{i},0,{dose},1,1,.,1,{wt},{arm}")
        cl = 5 * (wt / 70) ** 0.75 * np.exp(rng.normal(0, 0.3))
        for t in TIMES:
            ka, v = 1.0, 20.0
            c = dose * ka / (v * (ka - cl / v)) * (np.exp(-cl / v * t) - np.exp(-ka * t))
            dv = c * (1 + 0.1 * rng.normal()) + 0.05 * rng.normal()
            mdv = 1 if t == 4 and i == 3 else 0  # one observation without a DV
            lines.append(f"{i},{t},.,2,0,{dv:.6g},{mdv},{wt},{arm}")
    path.write_text("\n".join(lines) + "\n")


RUN = """model: two_compartment
subjects:
  dataset: data.csv
  population:
    seed: 21
    replicates: {reps}
    typical: {{ka: 1.0, cl: 5.0, v_central: 20}}
{variability}output:
  path: sim.csv
"""

VARIABILITY = """    iiv: {cl: 0.09}
    covariates:
      effects: [{parameter: cl, covariate: WT, type: power, coefficient: 0.75, reference: 70}]
    residual: {additive: 0.05, proportional: 0.1}
    lloq: 0.4
"""


def cli(tmp_path, *args, expect=0):
    p = subprocess.run([os.environ["PKSCAN_CLI"], *args], cwd=tmp_path, capture_output=True,
                       text=True, timeout=300, check=False)
    assert p.returncode == expect, p.stderr
    return p


def table(path):
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


def observations(tmp_path):
    """The dataset's observation records (EVID 0) in order, with whether they have a DV."""
    rows = []
    for ln in (tmp_path / "data.csv").read_text().splitlines()[1:]:
        f = ln.split(",")
        if f[4] == "0":
            rows.append((int(f[0]), float(f[1]), float(f[5]), f[6] == "0", float(f[7]), f[8]))
    return rows


@pytest.fixture()
def setup(tmp_path):
    write_data(tmp_path / "data.csv")
    (tmp_path / "run.yaml").write_text(RUN.format(reps=REPS, variability=VARIABILITY))
    return tmp_path


def expected(tmp_path, edges_of_bins, values=None, strata=None, pc=None):
    """The table recomputed with NumPy: the observed and simulated percentiles per bin."""
    obs = observations(tmp_path)
    cli(tmp_path, "run", "run.yaml", "--quiet")
    sim = table(tmp_path / "sim.csv")
    rows_per_rep = len(obs)
    dv = sim["dv"].reshape(REPS, rows_per_rep)
    blq = sim["blq"].reshape(REPS, rows_per_rep)
    has = np.array([o[3] for o in obs])
    t = np.array([o[1] for o in obs])
    y = np.array([o[2] for o in obs])
    result = []
    for stratum, lower, upper, last in edges_of_bins:
        inside = has & (t >= lower) & ((t < upper) | (last & (t <= upper)))
        if strata is not None:
            inside &= np.array([o[5] for o in obs]) == stratum
        f = np.ones(len(obs)) if pc is None else np.median(pc[inside]) / pc
        yo, ys = y[inside] * f[inside], dv[:, inside] * f[inside]
        per_rep = np.percentile(ys, [5, 50, 95], axis=1)  # 3 x REPS
        sim_pi = np.percentile(per_rep, [5, 50, 95], axis=1)  # rows: band, cols: percentile
        result.append(dict(
            observations=inside.sum(), time=np.median(t[inside]),
            obs=np.percentile(yo, [5, 50, 95]), sim=sim_pi,
            obs_blq=np.mean(y[inside] < 0.4),
            sim_blq=np.percentile(blq[:, inside].mean(axis=1), [5, 50, 95])))
    return result


def check(vpc, want, blq=True):
    assert len(vpc["bin"]) == len(want)
    for b, w in enumerate(want):
        assert vpc["observations"][b] == w["observations"]
        assert vpc["time"][b] == w["time"]
        for j, p in enumerate(["p5", "p50", "p95"]):
            np.testing.assert_allclose(vpc[f"obs_{p}"][b], w["obs"][j], rtol=1e-12)
            got = [vpc[f"sim_{p}_{e}"][b] for e in ("lo", "median", "hi")]
            np.testing.assert_allclose(got, w["sim"][:, j], rtol=1e-12)
        if blq:
            np.testing.assert_allclose(vpc["obs_blq"][b], w["obs_blq"], rtol=1e-12)
            np.testing.assert_allclose(
                [vpc["sim_blq_lo"][b], vpc["sim_blq_median"][b], vpc["sim_blq_hi"][b]],
                w["sim_blq"], rtol=1e-12, atol=1e-15)


def test_table_against_numpy_with_automatic_bins(setup):
    tmp = setup
    p = cli(tmp, "vpc", "run.yaml", "-o", "vpc.png")
    assert "wrote vpc.png and vpc.csv (6 bins, 50 replicates)" in p.stdout
    vpc = table(tmp / "vpc.csv")
    # One bin per distinct time, edges at the midpoints.
    edges = [0.5, 0.75, 1.5, 3, 6, 10, 12]
    np.testing.assert_array_equal(vpc["lower"], edges[:-1])
    np.testing.assert_array_equal(vpc["upper"], edges[1:])
    bins = [(None, edges[i], edges[i + 1], i == 5) for i in range(6)]
    check(vpc, expected(tmp, bins))
    assert vpc["observations"].sum() == 120 * 6 - 1  # the record with MDV 1 is not observed


def test_given_edges_and_bin_counts(setup):
    tmp = setup
    cli(tmp, "vpc", "run.yaml", "-o", "vpc.png", "--bin-edges", "0,1.5,5,12", "-q")
    vpc = table(tmp / "vpc.csv")
    bins = [(None, 0, 1.5, False), (None, 1.5, 5, False), (None, 5, 12, True)]
    check(vpc, expected(tmp, bins))
    cli(tmp, "vpc", "run.yaml", "-o", "three.png", "--bins", "3", "-q")
    three = table(tmp / "three.csv")
    # Three bins of nearly equal counts (240 observations each, one less without its DV).
    assert list(three["observations"]) == [240, 239, 240]


def test_prediction_corrected_vpc_uses_the_population_prediction(setup):
    tmp = setup
    cli(tmp, "vpc", "run.yaml", "-o", "pc.png", "--prediction-corrected", "-q")
    vpc = table(tmp / "pc.csv")
    # PRED: the design without variability and residual error, at each subject's weight.
    (tmp / "pred.yaml").write_text(RUN.format(reps=1, variability="""    covariates:
      effects: [{parameter: cl, covariate: WT, type: power, coefficient: 0.75, reference: 70}]
""").replace("path: sim.csv", "path: pred.csv"))
    cli(tmp, "run", "pred.yaml", "--quiet")
    pred = table(tmp / "pred.csv")["ipred"]
    edges = [0.5, 0.75, 1.5, 3, 6, 10, 12]
    want = expected(tmp, [(None, edges[i], edges[i + 1], i == 5) for i in range(6)], pc=pred)
    check(vpc, want, blq=True)


def test_stratified_by_a_dataset_column(setup):
    tmp = setup
    cli(tmp, "vpc", "run.yaml", "-o", "arm.png", "--stratify", "ARM", "-q")
    vpc = table(tmp / "arm.csv")
    assert list(vpc["stratum"]) == ["low"] * 6 + ["high"] * 6
    edges = [0.5, 0.75, 1.5, 3, 6, 10, 12]
    bins = [(s, edges[i], edges[i + 1], i == 5) for s in ("low", "high") for i in range(6)]
    check(vpc, expected(tmp, bins, strata=True))


def png_pixels(path):
    """(width, height, rows of RGB tuples) of an 8-bit PNG (truecolour, with or without alpha,
    or palette), non-interlaced: the five scanline filters of the PNG specification."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, palette = 8, b"", None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and interlace == 0
        elif kind == b"PLTE":
            palette = [tuple(body[i:i + 3]) for i in range(0, len(body), 3)]
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    bpp = {2: 3, 6: 4, 3: 1, 0: 1, 4: 2}[colour]
    raw = zlib.decompress(idat)
    stride = width * bpp
    prev = bytearray(stride)
    rows = []
    for y in range(height):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
                pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                line[i] = (line[i] + pred) & 255
        prev = line
        if colour == 3:
            rows.append([palette[v] for v in line])
        elif colour in (0, 4):
            rows.append([(line[i],) * 3 for i in range(0, stride, bpp)])
        else:
            rows.append([tuple(line[i:i + 3]) for i in range(0, stride, bpp)])
    return width, height, rows


def test_the_picture_has_the_bands_lines_and_points(setup):
    tmp = setup
    cli(tmp, "vpc", "run.yaml", "-o", "vpc.png", "--width", "700", "-q")
    width, height, rows = png_pixels(tmp / "vpc.png")
    assert (width, height) == (700, 900)  # two panels of 450: the VPC and the BLQ fraction
    counts = {"blue": 0, "red": 0, "black": 0, "grey": 0}
    for row in rows:
        for r, g, b in row:
            if b > r + 30 and b > 180 and g > r:  # the blue bands (#1f77b4 over white)
                counts["blue"] += 1
            elif r > g + 40 and r > b + 40:  # the red band of the median (#d62728)
                counts["red"] += 1
            elif r < 40 and g < 40 and b < 40:  # the observed percentiles (and text)
                counts["black"] += 1
            elif abs(r - 127) < 20 and abs(g - 127) < 20 and abs(b - 127) < 20:
                counts["grey"] += 1
    total = width * height
    assert counts["blue"] > 0.005 * total, counts
    assert counts["red"] > 0.001 * total, counts
    assert counts["black"] > 0.002 * total, counts
    assert counts["grey"] > 100, counts


def test_the_same_table_for_one_and_two_threads(setup):
    tmp = setup
    cli(tmp, "vpc", "run.yaml", "-o", "one.png", "-j", "1", "-q")
    cli(tmp, "vpc", "run.yaml", "-o", "two.png", "-j", "2", "-q")
    assert (tmp / "one.csv").read_bytes() == (tmp / "two.csv").read_bytes()


@pytest.mark.parametrize("variability,args,where", [
    (VARIABILITY.replace("    residual: {additive: 0.05, proportional: 0.1}\n    lloq: 0.4\n", ""),
     [], "needs a residual error"),
    (VARIABILITY, ["--bin-edges", "1,12"], "data.csv:3: the observation at time 0.5 lies outside"),
    (VARIABILITY, ["--stratify", "DOSE"], "stratification column DOSE is not a column"),
    (VARIABILITY, ["--percentiles", "50,5"], "percentiles must be ascending"),
    (VARIABILITY, ["--interval", "100"], "interval is 100, but must be in (0, 100)"),
])
def test_bad_input_is_one_line_and_writes_nothing(setup, variability, args, where):
    tmp = setup
    (tmp / "run.yaml").write_text(RUN.format(reps=REPS, variability=variability))
    p = cli(tmp, "vpc", "run.yaml", "-o", "vpc.png", *args, expect=2)
    assert where in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert not (tmp / "vpc.png").exists() and not (tmp / "vpc.csv").exists()


def test_a_bad_record_is_reported_at_its_dataset_line(setup):
    """The design's checks of every record, made by the run itself: `vpc`, `run` and `validate`
    give the same line, naming the dataset's line and column."""
    tmp = setup
    lines = (tmp / "data.csv").read_text().splitlines()
    wt = lines[0].split(",").index("WT")
    cells = lines[2].split(",")
    cells[wt] = "-70"
    lines[2] = ",".join(cells)
    (tmp / "data.csv").write_text("\n".join(lines) + "\n")
    errors = [cli(tmp, *args, expect=2).stderr
              for args in (["vpc", "run.yaml", "-o", "vpc.png"], ["run", "run.yaml", "-q"],
                           ["validate", "run.yaml"])]
    assert errors[0] == errors[1] == errors[2], errors
    assert f"data.csv:3:{wt + 1}: covariate column WT is \"-70\", but must be a number > 0" in errors[0], \
        errors[0]
    assert len(errors[0].strip().splitlines()) == 1, errors[0]
    assert not (tmp / "vpc.png").exists() and not (tmp / "sim.csv").exists()


def test_one_replicate_or_a_grid_run_is_refused(setup):
    tmp = setup
    (tmp / "run.yaml").write_text(RUN.format(reps=1, variability=VARIABILITY))
    p = cli(tmp, "vpc", "run.yaml", "-o", "vpc.png", expect=2)
    assert "at least 2" in p.stderr
    (tmp / "grid.yaml").write_text(
        "model: two_compartment\ntime: {dt: 1, steps: 4}\nsubjects:\n  parameters: "
        "{ka: 1, cl: 5, v_central: 20}\ndoses: [{compartment: depot, time: 0, amount: 1}]\n")
    p = cli(tmp, "vpc", "grid.yaml", "-o", "vpc.png", expect=2)
    assert "needs subjects.dataset with subjects.population" in p.stderr


def test_the_bundled_trial_examples_run(tmp_path):
    """config/examples/trial as the README runs it: the trial with arms and its plot, the VPC of
    the study by arm; make_study.py makes study.csv again, byte for byte."""
    import shutil
    src = os.path.join(os.environ.get("PKSCAN_SOURCE_DIR", os.path.join(
        os.path.dirname(__file__), "..", "..")), "config", "examples", "trial")
    for name in ("trial.yaml", "covariates.csv", "vpc.yaml", "study.csv", "study_truth.yaml",
                 "make_study.py"):
        shutil.copy(os.path.join(src, name), tmp_path / name)
    cli(tmp_path, "run", "trial.yaml", "-q")
    summary = table(tmp_path / "trial.summary.csv")
    assert list(dict.fromkeys(summary["arm"])) == ["100 mg", "2.5 mg/kg"]
    p = cli(tmp_path, "vpc", "vpc.yaml", "-o", "vpc.png", "--stratify", "ARM")
    assert "500 replicates" in p.stdout
    vpc = table(tmp_path / "vpc.csv")
    assert set(vpc["stratum"]) == {"low", "high"} and vpc["observations"].sum() == 60 * 13
    (tmp_path / "study.csv").rename(tmp_path / "study.orig.csv")
    subprocess.run([sys.executable, "make_study.py", os.environ["PKSCAN_CLI"]], cwd=tmp_path,
                   check=True, timeout=120)
    assert (tmp_path / "study.csv").read_bytes() == (tmp_path / "study.orig.csv").read_bytes()
