#!/usr/bin/env python3
"""Checks the house rules that a compiler does not:

  layers  the engine's folders include each other one way only: a file in engine/<folder>/ may
          include (by "folder/file" path) files of its own folder and of the folders below it in
          LAYERS, never of a folder above it (README.md, Layout); and none includes the CUDA-only
          files of the top-level cuda/ folder, which sit above the engine (built only with nvcc).
  sizes   no C++ or Python source or test file of the project is over MAX_LINES lines.

Usage: check_layers.py [--root DIR] [layers] [sizes]  (both when none is named). Prints every
violation, one per line, and exits 1 if there is any, 0 otherwise.
"""
import argparse
import os
import re
import sys

# Bottom to top. core: errors, threads, validation, dispatch; kernels: the arithmetic both
# compilers build; summary: per-time summaries; grid: the time-grid CPU paths; events: datasets,
# plans and the event solver; device: the device paths over Thrust's systems; api: the public entry
# points, which choose the CPU or the device path; population: virtual populations and their runs;
# estimation: population objectives on the Predictor.
LAYERS = ["core", "kernels", "summary", "grid", "events", "device", "api", "population",
          "estimation"]
MAX_LINES = 700
SOURCE_DIRS = ["engine", "models", "config", "output", "mpi", "apps", "python", "bench", "tests", "cuda"]
SOURCE_EXT = (".cpp", ".hpp", ".cu", ".cuh", ".h", ".py")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"/]+)/[^"]+"')
ANY_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def layer_violations(root):
    engine = os.path.join(root, "engine")
    rank = {name: i for i, name in enumerate(LAYERS)}
    cuda = os.path.join(root, "cuda")
    cuda_files = set(os.listdir(cuda)) if os.path.isdir(cuda) else set()
    found = []
    for name in sorted(os.listdir(engine)):
        folder = os.path.join(engine, name)
        if not os.path.isdir(folder) or name == "include":
            continue
        if name not in rank:
            found.append(f"engine/{name}/: a folder that is not in LAYERS (tests/layout/check_layers.py)")
            continue
        for dirpath, _, files in os.walk(folder):
            for f in sorted(files):
                path = os.path.join(dirpath, f)
                with open(path, encoding="utf-8", errors="replace") as fh:
                    for line_no, line in enumerate(fh, 1):
                        any_m = ANY_INCLUDE.match(line)
                        if any_m and (any_m.group(1).startswith("cuda/") or
                                      os.path.basename(any_m.group(1)) in cuda_files):
                            rel = os.path.relpath(path, root)
                            found.append(f"{rel}:{line_no}: {name}/ includes the CUDA-only "
                                         f"{any_m.group(1)} (cuda/ sits above the engine)")
                        m = INCLUDE.match(line)
                        if m and m.group(1) in rank and rank[m.group(1)] > rank[name]:
                            rel = os.path.relpath(path, root)
                            found.append(f"{rel}:{line_no}: {name}/ includes {m.group(1)}/, a layer "
                                         f"above it ({' < '.join(LAYERS)})")
    return found


def size_violations(root):
    found = []
    for top in SOURCE_DIRS:
        for dirpath, dirs, files in os.walk(os.path.join(root, top)):
            dirs[:] = [d for d in dirs if d not in ("data", "corpus", "__pycache__")]
            for f in sorted(files):
                if not f.endswith(SOURCE_EXT):
                    continue
                path = os.path.join(dirpath, f)
                with open(path, encoding="utf-8", errors="replace") as fh:
                    n = sum(1 for _ in fh)
                if n > MAX_LINES:
                    found.append(f"{os.path.relpath(path, root)}: {n} lines, over {MAX_LINES}")
    return found


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))))
    ap.add_argument("checks", nargs="*", help="layers, sizes (both when none is named)")
    args = ap.parse_args()
    checks = args.checks or ["layers", "sizes"]
    unknown = [c for c in checks if c not in ("layers", "sizes")]
    if unknown:
        ap.error("unknown check " + ", ".join(unknown) + " (layers, sizes)")
    found = []
    if "layers" in checks:
        found += layer_violations(args.root)
    if "sizes" in checks:
        found += size_violations(args.root)
    for line in found:
        print(line)
    print(f"check_layers: {', '.join(checks)}: {len(found)} violation(s)")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
