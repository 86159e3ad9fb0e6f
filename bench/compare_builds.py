#!/usr/bin/env python3
"""Times two builds of pkscan side by side on one machine: the same benchmark cells, run by each
build in turn (old, new, old, new, ...), so that both see the same machine state. Prints one table
(best time of each build over its rounds, and new / old) and writes the raw JSON lines.

Usage (from the repository root):
    /usr/bin/python3 bench/compare_builds.py OLD NEW [--rounds 3] [--quick] [--raw FILE]

OLD and NEW are benchmark programs: a `pkscan-bench`, or a `pkscan` whose benchmarks are its
`bench` command (run as `pkscan bench ARGS`). A restructuring is "the same speed" when every
cell's ratio is within the rounds' own spread (shown as the old build's worst/best).
"""
import argparse
import json
import os
import subprocess
import sys


def command(exe):
    return [exe, "bench"] if os.path.basename(exe) == "pkscan" else [exe]


def cells(quick):
    n = 10_000 if quick else 100_000
    grid = ["--n", n, "--t", 1000, "--device", "cpu"]
    ds = ["--n", 2_000 if quick else 20_000, "--doses", 10, "--observations", 20, "--device", "cpu"]
    return [
        ("batched dense f64", grid + ["--method", "batched", "--output", "dense", "--repeat", 5]),
        ("batched dense f32", grid + ["--method", "batched", "--output", "dense", "--precision",
                                      "float32", "--repeat", 5]),
        ("batched final, 1 thread", grid + ["--method", "batched", "--output", "final",
                                            "--threads", 1, "--repeat", 7]),
        ("batched final, 2 threads", grid + ["--method", "batched", "--output", "final",
                                             "--threads", 2, "--repeat", 7]),
        ("batched sparse:50", grid + ["--method", "batched", "--output", "sparse:50", "--repeat", 7]),
        ("batched summaries", grid + ["--method", "batched", "--output", "summaries", "--repeat", 3]),
        ("power final", grid + ["--method", "power", "--output", "final", "--repeat", 5]),
        ("scan dense f64", grid + ["--method", "scan", "--output", "dense", "--repeat", 2]),
        ("dataset irregular", ds + ["--dataset", "irregular", "--repeat", 5]),
        ("dataset regular", ds + ["--dataset", "regular", "--repeat", 5]),
        ("dataset likelihood", ds + ["--dataset", "likelihood", "--repeat", 5]),
    ]


def run(exe, args):
    out = subprocess.run(command(exe) + [str(a) for a in args], check=True, capture_output=True,
                         text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def best(res):
    for key in ("best_s", "call_best_s", "best_call_s"):
        if key in res:
            return res[key]
    raise KeyError("no best time in " + json.dumps(res))


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--raw", default=None, help="file for the raw JSON lines")
    args = ap.parse_args()
    raw = open(args.raw, "w") if args.raw else None
    print("| cell | old best (s) | new best (s) | new / old | old worst / best |")
    print("| --- | ---: | ---: | ---: | ---: |")
    worst = 0.0
    for name, cell in cells(args.quick):
        times = {"old": [], "new": []}
        for _ in range(args.rounds):
            for which in ("old", "new"):
                res = run(getattr(args, which), cell)
                times[which].append(best(res))
                if raw:
                    raw.write(json.dumps({"cell": name, "build": which, "result": res}) + "\n")
        o, n = min(times["old"]), min(times["new"])
        worst = max(worst, n / o)
        print(f"| {name} | {o:.5f} | {n:.5f} | {n / o:.3f} | {max(times['old']) / o:.3f} |",
              flush=True)
    print(f"\nlargest new / old: {worst:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
