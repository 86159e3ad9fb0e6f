"""Runs generated cases through pkscan's surfaces: the command line (`pkscan run`), the Python
module and the C++ API program (`diff_api`). The command line is run once per case and its result
cached for the tests that compare against it.

Environment: PKSCAN_CLI (the `pkscan` binary), PKSCAN_DIFF_API (the `diff_api` program),
PYTHONPATH with the built module; PKSCAN_DIFF_GRID_CASES / PKSCAN_DIFF_DATASET_CASES change the
number of generated cases.
"""

import atexit
import csv
import functools
import io
import os
import pathlib
import shutil
import subprocess
import tempfile

import numpy as np

import generate

GRID_CASES = int(os.environ.get("PKSCAN_DIFF_GRID_CASES", "300"))
DATASET_CASES = int(os.environ.get("PKSCAN_DIFF_DATASET_CASES", "200"))
WORK = pathlib.Path(tempfile.mkdtemp(prefix="pkscan-differential-"))
atexit.register(shutil.rmtree, WORK, ignore_errors=True)


def cli_path():
    return os.environ["PKSCAN_CLI"]


@functools.lru_cache(maxsize=None)
def case(name):
    kind, i = name.rsplit("-", 1)
    return (generate.grid_case if kind == "grid" else generate.dataset_case)(int(i))


def case_names():
    return ([f"grid-{i:03d}" for i in range(GRID_CASES)]
            + [f"dataset-{i:03d}" for i in range(DATASET_CASES)])


def case_id(name):
    """Test id: the case name and its features (so failures can be counted by feature)."""
    return name + ":" + ",".join(sorted(case(name)["features"]))


@functools.lru_cache(maxsize=None)
def folder(name):
    """The case's run file (and dataset) written into a fresh folder."""
    c = case(name)
    d = WORK / name
    d.mkdir()
    (d / "run.yaml").write_text(generate.to_yaml(c["run"]))
    if c["dataset"] is not None:
        (d / "data.csv").write_text(c["dataset"])
    return d


class CliResult:
    """The CSV written by `pkscan run`: the header and the cells as written."""

    def __init__(self, returncode, stderr, text):
        self.returncode, self.stderr = returncode, stderr
        rows = list(csv.reader(io.StringIO(text))) if text else [[]]
        self.header, self.rows = rows[0], rows[1:]

    def column(self, name):
        j = self.header.index(name)
        return [r[j] for r in self.rows]

    def numbers(self, prefix, dtype=np.float64):
        """The columns whose names start with `prefix`, parsed: [rows, columns]."""
        cols = [j for j, h in enumerate(self.header) if h.startswith(prefix)]
        return np.array([[float(r[j]) for j in cols] for r in self.rows],
                        dtype=np.float64).astype(dtype)


@functools.lru_cache(maxsize=None)
def run_cli(name):
    d = folder(name)
    p = subprocess.run([cli_path(), "run", "run.yaml", "--quiet"], cwd=d, capture_output=True,
                       text=True, timeout=120, check=False)
    out = d / "out.csv"
    return CliResult(p.returncode, p.stderr, out.read_text() if out.exists() else "")


@functools.lru_cache(maxsize=None)
def api_results():
    """Every case through the C++ API program in one process: {run file: (kind, amounts) or
    ("error", message)}."""
    files = [str(folder(name) / "run.yaml") for name in case_names()]
    p = subprocess.run([os.environ["PKSCAN_DIFF_API"], *files], capture_output=True, text=True,
                       timeout=600, check=False)
    assert p.returncode == 0, p.stderr
    results, lines, i = {}, p.stdout.split("\n"), 0
    while i < len(lines) and lines[i]:
        kind, file, rest = lines[i].split(" ", 2)
        i += 1
        if kind == "error":
            results[file] = (kind, rest)
            continue
        shape = tuple(int(v) for v in rest.split())
        size = int(np.prod(shape))
        values = np.array([float(v) for v in lines[i:i + size]], dtype=np.float64)
        results[file] = (kind, values.reshape(shape))
        i += size
    return results


def run_api(name):
    """Amounts of one case from the C++ API program: (kind, values as float64)."""
    kind, value = api_results()[str(folder(name) / "run.yaml")]
    assert kind != "error", value
    return kind, value
