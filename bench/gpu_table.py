#!/usr/bin/env python3
"""The GPU table of docs/performance.md from a bench/gpu.sh results file.

Usage: bench/gpu_table.py RESULTS.json [DOC.md]

RESULTS.json holds one JSON object per line, as bench/gpu.sh writes it: the ctest summary, then
pkscan-bench cells, each `--device cuda` cell followed by the same cell on the CPU, then the
plain-JAX scan (`jax_seed_scan`) if it ran. Prints the table and, given DOC.md, replaces the text
between <!-- gpu-table:begin --> and <!-- gpu-table:end --> with it.
"""
import json
import os
import sys


def num(x):
    m, e = f"{x:e}".split("e")
    m = m.rstrip("0").rstrip(".")
    return f"{m}e{int(e)}"


def label(c):
    if c.get("workload") in ("irregular", "regular"):
        return (f"dataset {c['workload']}, N={num(c['n'])}, {c['doses']} doses + "
                f"{c['observations']} observations (float64)")
    if c.get("workload") == "likelihood":
        return (f"Predictor log_likelihood_all, N={num(c['n'])}, {c['doses']} doses + "
                f"{c['observations']} observations (float64)")
    if c.get("workload") == "summaries":
        return f"summaries only, N={num(c['n'])}, T={num(c['t'])} ({c['precision']})"
    return f"{c['method']} {c['output']}, N={num(c['n'])}, T={num(c['t'])} ({c['precision']})"


def key(c):
    return (c.get("workload", "grid"), c.get("method"), c["n"], c.get("t"), c.get("output"),
            c.get("precision"), c.get("doses"), c.get("observations"))


def regime(c):
    if "regime" not in c:
        return "-"
    return f"{c['regime']} ({c['ceiling_over_time']:.2f} of its ceiling)"


def device_part(c):
    if "kernel_s" not in c:
        return "-"
    if "device_write_over_kernel" not in c:  # summaries, datasets: the last call's split
        part = f"kernel {c['kernel_s'] * 1e3:.3g} ms; transfer {c['transfer_s'] * 1e3:.3g} ms"
        if "host_s" in c:  # the Predictor: the host's part of the call
            part += f"; host {c['host_s'] * 1e3:.3g} ms"
        return part
    return (f"kernel {c['kernel_s'] * 1e3:.3g} ms ({c['device_write_over_kernel']:.2f} of the "
            f"device write at {c['d2d_gb_per_s']:.0f} GB/s); transfer "
            f"{c['transfer_s'] * 1e3:.3g} ms ({c['transfer_ceiling_over_transfer']:.2f} of "
            f"{c['d2h_gb_per_s']:.1f} GB/s to the host)")


def table(lines, source):
    cells = [json.loads(x) for x in lines if x.strip()]
    ctest = next((c["ctest_gpu"] for c in cells if "ctest_gpu" in c), "not run")
    memcheck = next((c["memcheck"] for c in cells if "memcheck" in c), None)
    jax = next((c["jax_seed_scan"] for c in cells if "jax_seed_scan" in c), None)
    grid = [c for c in cells if "best_s" in c and "n" in c]
    rows = ["| cell | cuda | cpu | cpu / cuda | on the device | regime (cuda) |",
            "| --- | --- | --- | --- | --- | --- |"]
    # Each cuda cell beside the next cell with the same key on the CPU (a failed cell in between
    # leaves the others paired).
    for i, g in enumerate(grid):
        if g.get("device") != "cuda":
            continue
        h = next((c for c in grid[i + 1:] if c.get("device") == "cpu" and key(c) == key(g)), None)
        if h is None and "cpu_best_s" in g:  # the CPU's call measured in the same cell
            h = {"best_s": g["cpu_best_s"], "threads": g["threads"]}
        if h is None:
            continue
        rows.append(f"| {label(g)} | {g['best_s'] * 1e3:.4g} ms | {h['best_s'] * 1e3:.4g} ms "
                    f"({h['threads']} threads) | {h['best_s'] / g['best_s']:.2f}x | "
                    f"{device_part(g)} | {regime(g)} |")
    head = f"Measured by `bench/gpu.sh`; raw JSON in `{source}`. `ctest -L gpu`: {ctest}."
    if memcheck:
        head += f" compute-sanitizer memcheck on a subset: {memcheck}."
    text = [head, "", *rows, ""]
    if isinstance(jax, dict):
        text.append(f"The plain-JAX scan on {jax['device']} (N={num(jax['n'])}, T={num(jax['t'])}, "
                    f"float64): {jax['best_s'] * 1e3:.4g} ms with the trajectories left on the "
                    f"GPU, {jax['best_to_host_s'] * 1e3:.4g} ms with them on the host.")
        text.append("")
    return "\n".join(text)


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    results = sys.argv[1]
    with open(results) as f:
        block = table(f.readlines(), os.path.relpath(results))
    print(block)
    if len(sys.argv) > 2:
        doc_path = sys.argv[2]
        doc = open(doc_path).read()
        begin, end = "<!-- gpu-table:begin -->", "<!-- gpu-table:end -->"
        if begin in doc and end in doc:
            doc = doc[:doc.index(begin) + len(begin)] + "\n" + block + doc[doc.index(end):]
            with open(doc_path, "w") as f:
                f.write(doc)


if __name__ == "__main__":
    main()
