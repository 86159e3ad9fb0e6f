"""pkscan-bench as its users call it (docs/cli.md): --help, a small grid cell with the fields the
docs list, and bad arguments, each a one-line error with the documented exit status.

Usage: pkscan_bench_check.py PATH/TO/pkscan-bench"""
import json
import re
import subprocess
import sys
import tempfile

EXE = sys.argv[1]


def run(*args):
    return subprocess.run([EXE, *args], capture_output=True, text=True, timeout=300)


def describe(r):
    return f"status {r.returncode}\nstdout: {r.stdout!r}\nstderr: {r.stderr!r}"


def one_line_error(r, status, *words):
    assert r.returncode == status, describe(r)
    assert r.stdout == "", describe(r)
    assert r.stderr.startswith("pkscan-bench: error: "), describe(r)
    assert r.stderr.count("\n") == 1 and r.stderr.endswith("\n"), describe(r)
    for w in words:
        assert w in r.stderr, (w, describe(r))


# --help: the usage line, the exit statuses, and nothing outside the project.
r = run("--help")
assert r.returncode == 0 and r.stderr == "", describe(r)
assert "Usage: pkscan-bench [OPTIONS]" in r.stdout, r.stdout
statuses = r.stdout[r.stdout.index("Exit status"):]
for code in "0123":
    assert re.search(rf"\b{code}\b", statuses), (code, statuses)
assert "bad input" in statuses and "not available" in statuses, statuses
assert "shared/" not in r.stdout and "../" not in r.stdout, r.stdout
for option in ("--n", "--t", "--method", "--device", "--precision", "--output", "--threads",
               "--repeat", "--seed", "--dataset", "--write", "--doses", "--observations",
               "--design", "--replicates"):
    assert option in r.stdout, (option, r.stdout)

# A grid cell: one JSON line with the fields of docs/cli.md.
r = run("--n", "16", "--t", "30", "--method", "batched", "--device", "cpu", "--output", "sparse:3",
        "--repeat", "1")
assert r.returncode == 0 and r.stderr == "", describe(r)
assert r.stdout.count("\n") == 1, describe(r)
d = json.loads(r.stdout)
fields = ("method", "device", "precision", "n", "t", "output", "threads", "best_s", "median_s",
          "first_call_s", "ns_per_subject_step", "output_gb_per_s", "fill_gb_per_s",
          "output_over_fill", "stream_fill_gb_per_s", "compute_s", "probe_s", "over_probe",
          "overhead_s", "regime", "ceiling_over_time")
assert all(f in d for f in fields), ([f for f in fields if f not in d], d)
assert (d["method"], d["device"], d["n"], d["t"], d["output"], d["output_times"]) == \
    ("batched", "cpu", 16, 30, "sparse:3", 3), d

# Bad arguments: exit status 2 and one line naming what is wrong.
one_line_error(run("--n", "0"), 2, "--n")
one_line_error(run("--frobnicate"), 2, "--frobnicate")
one_line_error(run("--method", "fastest"), 2, "--method")
one_line_error(run("--n", "4", "--t", "4", "--repeat", "1", "--output", "sparse:9"), 2,
               "sparse:K needs 1 <= K <= --t")
with tempfile.TemporaryDirectory() as folder:
    one_line_error(run("--n", "4", "--t", "4", "--dataset", "grid", "--write", folder), 2,
                   "--write and --dataset")
one_line_error(run("--write", "/nonexistent/folder"), 2, "--write")
one_line_error(run("bench", "--n", "4"), 2, "bench")

# Device 'cuda': measured where there is one, exit status 3 where there is none.
r = run("--device", "cuda", "--method", "batched", "--n", "1", "--t", "1", "--repeat", "1")
if r.returncode == 0:
    assert json.loads(r.stdout)["device"] == "cuda", describe(r)
else:
    one_line_error(r, 3, "device 'cuda' is not available")
print("pkscan-bench ok")
