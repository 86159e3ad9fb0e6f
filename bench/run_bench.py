#!/usr/bin/env python3
"""Runs pkscan's CPU benchmark grid and the NumPy baseline in the same run, writes the raw JSON
lines to bench/results/cpu-<date>.json and a markdown table with ratios to docs/performance.md.

Usage (from the repository root, after `bash test.sh` or
`cmake --build build --target pkscan_bench`):
    /usr/bin/python3 bench/run_bench.py [--pkscan-bench build/bin/pkscan-bench] [--quick]

The cells run the benchmark program, build/bin/pkscan-bench by default. `--pkscan PATH` runs
another build's: a binary named `pkscan-bench` is run as it is; a binary named `pkscan` is a
build whose benchmarks are its `bench` command, run as `PATH bench ARGS` (to measure two builds
side by side on one machine, one after the other with the same arguments).

The NumPy baseline is bench/numpy_baseline.py (or $PKSCAN_NUMPY_BASELINE); it
needs python3-numpy (installed by scripts/install-deps.sh). Every ratio in the table is between
two measurements taken by this script in one run on this machine.
"""
import argparse
import datetime
import json
import os
import platform
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_json(cmd):
    print("+", " ".join(cmd), file=sys.stderr, flush=True)
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def pk(args, exe):
    return run_json(exe + [str(a) for a in args])


def bench_command(args):
    """The command line that runs the benchmarks, before their arguments."""
    if args.pkscan is not None and args.pkscan_bench is not None:
        sys.exit("bench/run_bench.py: give --pkscan-bench or --pkscan, not both")
    if args.pkscan is not None:
        return [args.pkscan, "bench"] if os.path.basename(args.pkscan) == "pkscan" else [args.pkscan]
    return [args.pkscan_bench or os.path.join(ROOT, "build", "bin", "pkscan-bench")]


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pkscan-bench", default=None,
                    help="the benchmark program (default: build/bin/pkscan-bench)")
    ap.add_argument("--pkscan", default=None,
                    help="another build's program: pkscan-bench, or pkscan (run as `pkscan bench`)")
    ap.add_argument("--baseline", default=os.environ.get(
        "PKSCAN_NUMPY_BASELINE", os.path.join(ROOT, "bench", "numpy_baseline.py")))
    ap.add_argument("--python", default="/usr/bin/python3", help="interpreter with NumPy for the baseline")
    ap.add_argument("--quick", action="store_true", help="smaller sizes (a smoke test, not the recorded figures)")
    ap.add_argument("--doc", default=os.path.join(ROOT, "docs", "performance.md"))
    ap.add_argument("--cells", default="cpu,dataset",
                    help="which tables to measure: cpu (the NumPy workload), dataset (dosing records), "
                         "design (virtual trials: design simulation and VPC)")
    args = ap.parse_args()
    args.exe = bench_command(args)
    cells = set(args.cells.split(","))
    if "dataset" in cells:
        dataset_table(args)
    if "design" in cells:
        design_table(args)
    if "cpu" not in cells:
        return

    n_big = 10_000 if args.quick else 100_000
    t_long = 100_000 if args.quick else 1_000_000
    exe = args.exe
    rows = []
    sources = []  # per row: the pkscan cell whose regime and ceiling ratio the row shows
    raw = {"date": datetime.date.today().isoformat(), "cpu": cpu_model(), "cores": os.cpu_count(), "cells": []}

    def record(name, res):
        raw["cells"].append({"cell": name, "result": res})
        return res

    # 1. Dense float64 output, N x 1000 steps, against the best NumPy variant.
    dense = record("batched dense f64", pk(["--n", n_big, "--t", 1000, "--method", "batched", "--device", "cpu",
                                             "--output", "dense", "--repeat", 5], exe))
    scan = record("scan dense f64", pk(["--n", n_big, "--t", 1000, "--method", "scan", "--device", "cpu",
                                         "--output", "dense", "--repeat", 2], exe))
    numpy = record("numpy baseline f64", run_json([args.python, args.baseline, "--n", str(n_big), "--t", "1000",
                                                  "--dtype", "float64", "--repeat", "2",
                                                  "--variants", "loop,einsum,matmul,unrolled,doubling"]))
    variants = numpy["variants"]
    for v in variants.values():  # the loop variant is timed on a subset: use its per-step cost
        v["total_s"] = v.get("est_total_s", v["best_s"])
    best_name = min(variants, key=lambda k: variants[k]["total_s"])
    best_np = variants[best_name]["total_s"]
    rows.append((f"batched cpu, dense f64, N={n_big:g}, T=1e3, doses every 24 steps",
                 f"{dense['best_s']:.4f} s ({dense['ns_per_subject_step']:.2f} ns/subject-step)",
                 f"NumPy best variant `{best_name}`: {best_np:.3f} s",
                 f"**{best_np / dense['best_s']:.1f}x** faster", ">= 10x"))
    sources.append(dense)
    def stream_ratio(cell):  # the non-temporal fill of the output's size over the cell's time
        return cell["output_bytes"] / cell["stream_fill_gb_per_s"] / 1e9 / cell["best_s"]
    rows.append((f"batched cpu, dense f64 output bandwidth, N={n_big:g}, T=1e3",
                 f"{dense['output_gb_per_s']:.2f} GB/s",
                 f"non-temporal fill of the same {dense['output_bytes'] / 1e9:.2f} GB: "
                 f"{dense['stream_fill_gb_per_s']:.2f} GB/s",
                 f"**{100 * stream_ratio(dense):.0f}%** of it", ">= 75%"))
    sources.append(dense)
    rows.append((f"batched cpu vs reference scan, dense f64, N={n_big:g}, T=1e3",
                 f"{dense['best_s']:.4f} s", f"scan: {scan['best_s']:.3f} s",
                 f"{scan['best_s'] / dense['best_s']:.1f}x faster", "-"))
    sources.append(dense)

    # 2. Final state only: 2 threads against 1.
    one = record("batched final 1 thread", pk(["--n", n_big, "--t", 1000, "--method", "batched", "--device", "cpu",
                                                "--output", "final", "--threads", 1, "--repeat", 7], exe))
    two = record("batched final 2 threads", pk(["--n", n_big, "--t", 1000, "--method", "batched", "--device", "cpu",
                                                 "--output", "final", "--threads", 2, "--repeat", 7], exe))
    rows.append((f"batched cpu, final state only, N={n_big:g}, T=1e3: 2 threads vs 1",
                 f"{two['best_s']:.4f} s", f"1 thread: {one['best_s']:.4f} s",
                 f"**{one['best_s'] / two['best_s']:.2f}x**", ">= 1.7x"))
    sources.append(two)
    rows.append((f"batched cpu, final state only, N={n_big:g}, T=1e3, 2 threads",
                 f"{two['best_s']:.4f} s",
                 f"probe's no-output recurrence (same subjects, threads): {two['probe_s']:.4f} s",
                 f"**{two['over_probe']:.2f}x** its time", "<= 1.3x"))
    sources.append(two)
    sp = record("batched sparse:50", pk(["--n", n_big, "--t", 1000, "--method", "batched", "--device", "cpu",
                                         "--output", "sparse:50", "--repeat", 7], exe))
    rows.append((f"batched cpu, 50 sparse outputs, N={n_big:g}, T=1e3, 2 threads",
                 f"{sp['best_s']:.4f} s",
                 f"probe's no-output recurrence: {sp['probe_s']:.4f} s",
                 f"**{sp['over_probe']:.2f}x** its time", "<= 1.3x"))
    sources.append(sp)

    # 3. Power, one subject, a long horizon, 16 sparse outputs, against the reference scan.
    pw = record("power sparse:16", pk(["--n", 1, "--t", t_long, "--method", "power", "--device", "cpu",
                                       "--output", "sparse:16", "--repeat", 50], exe))
    sc = record("scan sparse:16", pk(["--n", 1, "--t", t_long, "--method", "scan", "--device", "cpu",
                                      "--output", "sparse:16", "--repeat", 5], exe))
    rows.append((f"power cpu, N=1, T={t_long:g}, 16 sparse outputs (warm engine)",
                 f"{pw['best_s'] * 1e6:.1f} us", f"reference scan: {sc['best_s'] * 1e3:.2f} ms",
                 f"**{sc['best_s'] / pw['best_s']:.0f}x** faster", ">= 100x"))
    sources.append(pw)
    rows.append((f"power cpu, N=1, T={t_long:g}, 16 sparse outputs, first call (schedule compile included)",
                 f"{pw['first_call_s'] * 1e3:.2f} ms", f"reference scan first call: {sc['first_call_s'] * 1e3:.2f} ms",
                 f"{sc['first_call_s'] / pw['first_call_s']:.1f}x", "-"))
    sources.append(pw)

    # 4. float32 dense, for reference.
    f32 = record("batched dense f32", pk(["--n", n_big, "--t", 1000, "--method", "batched", "--device", "cpu",
                                           "--precision", "float32", "--output", "dense", "--repeat", 5], exe))
    rows.append((f"batched cpu, dense f32, N={n_big:g}, T=1e3",
                 f"{f32['best_s']:.4f} s ({f32['output_gb_per_s']:.2f} GB/s)",
                 f"non-temporal fill: {f32['stream_fill_gb_per_s']:.2f} GB/s",
                 f"**{100 * stream_ratio(f32):.0f}%** of it", ">= 75%"))
    sources.append(f32)

    # 5. Summaries only (the fused path): its parts, and its recurrence against the probe.
    n_sum = 10_240 if args.quick else 102_400  # whole blocks of 1024 subjects
    summ = record("summaries only", pk(["--n", n_sum, "--t", 1000, "--output", "summaries", "--repeat", 5], exe))
    rows.append((f"summaries only (fused: means, percentiles, metrics), N={n_sum:g}, T=1e3, 2 threads",
                 f"{summ['best_s']:.3f} s: recurrence {summ['recurrence_s']:.3f} s, sums and sketch "
                 f"{summ['sums_sketch_s']:.3f} s, metrics {summ['metrics_s']:.3f} s (each the best "
                 f"of its calls)",
                 f"probe's no-output recurrence: {summ['probe_s']:.4f} s",
                 f"recurrence **{summ['recurrence_over_probe']:.2f}x** its time", "<= 1.3x"))
    sources.append(summ)

    # 6. Few subjects, many steps (latency-bound): N=10, T=1e3 and N=100, T=1e4.
    small = record("batched dense N=10 T=1e3", pk(["--n", 10, "--t", 1000, "--output", "dense", "--repeat", 1000], exe))
    rows.append(("auto, dense f64, N=10, T=1e3 (few subjects, latency-bound)",
                 f"{small['best_s'] * 1e6:.1f} us ({small['method']}, {small['threads']} thread(s))",
                 f"probe's no-output recurrence: {small['probe_s'] * 1e6:.1f} us",
                 f"{small['over_probe']:.2f}x its time", "<= 20 us"))
    sources.append(small)
    mid = record("batched dense N=100 T=1e4", pk(["--n", 100, "--t", 10000, "--output", "dense", "--repeat", 100], exe))
    rows.append(("auto, dense f64, N=100, T=1e4",
                 f"{mid['best_s'] * 1e3:.2f} ms ({mid['method']}, {mid['threads']} thread(s))",
                 f"probe's no-output recurrence: {mid['probe_s'] * 1e3:.2f} ms; non-temporal fill of "
                 f"{mid['output_bytes'] / 1e6:.0f} MB: {mid['output_bytes'] / mid['stream_fill_gb_per_s'] / 1e6:.2f} ms",
                 f"{mid['ceiling_over_time']:.2f} of the larger", "within 2x (>= 0.5)"))
    sources.append(mid)

    os.makedirs(os.path.join(ROOT, "bench", "results"), exist_ok=True)
    raw_path = os.path.join(ROOT, "bench", "results", f"cpu-{raw['date']}{'-quick' if args.quick else ''}.json")
    with open(raw_path, "w") as f:
        json.dump(raw, f, indent=1)

    # The regime of the pkscan cell behind each row and its time against that regime's ceiling,
    # measured by pkscan-bench in the same process (docs/performance.md).
    def regime(cell):
        if "regime" not in cell:
            return "-"
        return f"{cell['regime']} ({cell['ceiling_over_time']:.2f} of its ceiling)"
    table = ["| cell | pkscan | compared with | ratio | target | regime |",
             "| --- | --- | --- | --- | --- | --- |"]
    table += ["| " + " | ".join(r) + " | " + regime(c) + " |" for r, c in zip(rows, sources)]
    block = "\n".join([
        f"Measured {raw['date']} on {raw['cpu']} ({raw['cores']} cores), by `bench/run_bench.py`"
        f"{' --quick' if args.quick else ''}; raw JSON in `{os.path.relpath(raw_path, ROOT)}`.",
        "", *table, ""])
    begin, end = "<!-- cpu-table:begin -->", "<!-- cpu-table:end -->"
    doc = open(args.doc).read() if os.path.exists(args.doc) else f"# Performance\n\n{begin}\n{end}\n"
    if begin in doc and end in doc:
        doc = doc[:doc.index(begin) + len(begin)] + "\n" + block + doc[doc.index(end):]
    with open(args.doc, "w") as f:
        f.write(doc)
    print(block)


def dataset_table(args):
    """1e5 subjects x (20 doses + 30 observations): irregular times through the exact event
    engine against the same doses and output times on a regular grid (grid engine), both on the
    batched CPU path, in one run."""
    n = 10_000 if args.quick else 100_000
    exe = args.exe
    common = ["--n", n, "--method", "batched", "--device", "cpu", "--repeat", 5, "--doses", 20, "--observations", 30]
    grid = pk(["--dataset", "grid"] + common, exe)
    irr = pk(["--dataset", "irregular"] + common, exe)
    reg = pk(["--dataset", "regular"] + common, exe)
    date = datetime.date.today().isoformat()
    raw = {"date": date, "cpu": cpu_model(), "cores": os.cpu_count(),
           "cells": [{"cell": "grid", "result": grid}, {"cell": "irregular", "result": irr},
                     {"cell": "regular dataset", "result": reg}]}
    raw_path = os.path.join(ROOT, "bench", "results", f"dataset-{date}{'-quick' if args.quick else ''}.json")
    with open(raw_path, "w") as f:
        json.dump(raw, f, indent=1)
    rows = [
        (f"irregular dataset, N={n:g}, 20 doses + 30 observations each (event engine)",
         f"{irr['best_s']:.3f} s ({irr['us_per_subject']:.2f} us/subject)",
         f"same doses and outputs on a 1 h grid (grid engine): {grid['best_s']:.3f} s",
         f"**{irr['best_s'] / grid['best_s']:.2f}x** the grid time", "<= 3x"),
        (f"regular-time dataset, N={n:g} (event engine)", f"{reg['best_s']:.3f} s",
         f"grid engine: {grid['best_s']:.3f} s", f"{reg['best_s'] / grid['best_s']:.2f}x", "-"),
    ]
    # The regime of the pkscan cell behind each row and its time against that regime's ceiling,
    # measured by pkscan-bench in the same process (docs/performance.md).
    # The dataset workloads do not measure their ceilings yet: "-" there.
    def regime(cell):
        if "regime" not in cell:
            return "-"
        return f"{cell['regime']} ({cell['ceiling_over_time']:.2f} of its ceiling)"
    sources = [irr, reg]  # per row: the pkscan cell the row is about
    table = ["| cell | pkscan | compared with | ratio | target | regime |",
             "| --- | --- | --- | --- | --- | --- |"]
    table += ["| " + " | ".join(r) + " | " + regime(c) + " |" for r, c in zip(rows, sources)]
    block = "\n".join([f"Measured {date} on {cpu_model()} ({os.cpu_count()} cores), by `bench/run_bench.py "
                       f"--cells dataset`; raw JSON in `{os.path.relpath(raw_path, ROOT)}`.", "", *table, ""])
    begin, end = "<!-- dataset-table:begin -->", "<!-- dataset-table:end -->"
    doc = open(args.doc).read()
    if begin in doc and end in doc:
        doc = doc[:doc.index(begin) + len(begin)] + "\n" + block + doc[doc.index(end):]
    with open(args.doc, "w") as f:
        f.write(doc)
    print(block)


def design_table(args):
    """Virtual trials: a design simulation of 1000 subjects x 20 observations (13 doses every 6 h,
    IIV and residual error, in memory) against a grid population of the same model, subjects and
    output times, per simulated observation; and a VPC of 1000 replicates of that design with IIV,
    IOV and residual error (wall time, peak resident memory). Each cell runs three times (three
    processes); the table shows the best and the spread."""
    n = 200 if args.quick else 1000
    reps = 100 if args.quick else 1000
    exe = args.exe
    common = ["--n", n, "--doses", 13, "--observations", 20]
    sims = [pk(["--design", "simulate", "--repeat", 30] + common, exe) for _ in range(3)]
    sims10 = [pk(["--design", "simulate", "--repeat", 30, "--design-replicates", 10] + common, exe)
              for _ in range(3)]
    vpcs = [pk(["--design", "vpc", "--replicates", reps] + common, exe) for _ in range(3)]
    date = datetime.date.today().isoformat()
    raw = {"date": date, "cpu": cpu_model(), "cores": os.cpu_count(),
           "cells": [{"cell": "design simulate", "result": r} for r in sims] +
                    [{"cell": "design simulate, 10 replicates", "result": r} for r in sims10] +
                    [{"cell": "vpc", "result": r} for r in vpcs]}
    os.makedirs(os.path.join(ROOT, "bench", "results"), exist_ok=True)
    raw_path = os.path.join(ROOT, "bench", "results", f"design-{date}{'-quick' if args.quick else ''}.json")
    with open(raw_path, "w") as f:
        json.dump(raw, f, indent=1)

    def spread(values, fmt):
        return ", ".join(fmt.format(v) for v in values)
    best = min(sims, key=lambda r: r["design_over_grid"])
    ratios = [r["design_over_grid"] for r in sims]
    best10 = min(sims10, key=lambda r: r["design_over_grid"])
    ratios10 = [r["design_over_grid"] for r in sims10]
    walls = [r["wall_s"] for r in vpcs]
    mibs = [r["peak_rss_mib"] for r in vpcs]
    rows = [
        (f"design simulation, N={n}, 20 observations + 13 doses each, IIV + residual, 1 replicate",
         f"{best['design_ns_per_observation']:.0f} ns/observation ({best['design_best_s'] * 1e3:.1f} ms)",
         f"grid population, same model, subjects and 20 output times: "
         f"{best['grid_ns_per_value']:.0f} ns/value ({best['grid_best_s'] * 1e3:.1f} ms)",
         f"**{min(ratios):.2f}x** (runs: {spread(ratios, '{:.2f}')})", "<= 1.5x"),
        (f"the same, 10 replicates (both runs)",
         f"{best10['design_ns_per_observation']:.0f} ns/observation ({best10['design_best_s'] * 1e3:.1f} ms)",
         f"grid population, 10 replicates: "
         f"{best10['grid_ns_per_value']:.0f} ns/value ({best10['grid_best_s'] * 1e3:.1f} ms)",
         f"**{min(ratios10):.2f}x** (runs: {spread(ratios10, '{:.2f}')})", "<= 1.5x"),
        (f"VPC (`run_vpc`), {reps} replicates x N={n} x 20 observations, IIV + IOV + residual",
         f"**{min(walls):.2f} s** (runs: {spread(walls, '{:.2f}')})", "-", "-", "<= 10 s"),
        (f"VPC peak resident memory (getrusage)", f"**{min(mibs):.0f} MiB** (runs: {spread(mibs, '{:.0f}')})",
         "-", "-", "<= 1 GB"),
    ]
    table = ["| cell | pkscan | compared with | ratio | target |", "| --- | --- | --- | --- | --- |"]
    table += ["| " + " | ".join(r) + " |" for r in rows]
    block = "\n".join([f"Measured {date} on {cpu_model()} ({os.cpu_count()} cores, {sims[0]['threads']} threads), "
                       f"by `bench/run_bench.py --cells design`{' --quick' if args.quick else ''}; "
                       f"best of 3 runs; raw JSON in `{os.path.relpath(raw_path, ROOT)}`.", "", *table, ""])
    begin, end = "<!-- design-table:begin -->", "<!-- design-table:end -->"
    doc = open(args.doc).read()
    if begin in doc and end in doc:
        doc = doc[:doc.index(begin) + len(begin)] + "\n" + block + doc[doc.index(end):]
    with open(args.doc, "w") as f:
        f.write(doc)
    print(block)


if __name__ == "__main__":
    main()
