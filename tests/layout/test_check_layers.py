"""check_layers.py on small trees made here: it finds an upward include and an oversized file,
and passes a tree that keeps the rules."""
import os
import subprocess
import sys

CHECK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "check_layers.py")


def run(root, *checks):
    return subprocess.run([sys.executable, CHECK, "--root", str(root), *checks],
                          capture_output=True, text=True)


def make_tree(tmp_path, files):
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def test_downward_includes_pass(tmp_path):
    root = make_tree(tmp_path, {"engine/grid/a.cpp": '#include "core/b.hpp"\n#include "grid/c.hpp"\n',
                                "engine/core/b.hpp": "#pragma once\n"})
    r = run(root, "layers")
    assert r.returncode == 0, r.stdout
    assert "0 violation(s)" in r.stdout


def test_upward_include_fails_and_names_the_line(tmp_path):
    root = make_tree(tmp_path, {"engine/core/b.hpp": '#pragma once\n#include "events/plan.hpp"\n'})
    r = run(root, "layers")
    assert r.returncode == 1
    assert "engine/core/b.hpp:2: core/ includes events/" in r.stdout


def test_unknown_folder_fails(tmp_path):
    root = make_tree(tmp_path, {"engine/misc/x.cpp": "int x;\n"})
    r = run(root, "layers")
    assert r.returncode == 1 and "engine/misc/" in r.stdout


def test_oversized_file_fails(tmp_path):
    root = make_tree(tmp_path, {"apps/big.cpp": "int x;\n" * 701, "apps/ok.cpp": "int y;\n" * 700})
    r = run(root, "sizes")
    assert r.returncode == 1
    assert "apps/big.cpp: 701 lines" in r.stdout and "ok.cpp" not in r.stdout


def test_engine_including_the_cuda_folder_fails(tmp_path):
    root = make_tree(tmp_path, {"cuda/launch_cuda.cuh": "#pragma once\n",
                                "cuda/launch_cuda.cu": '#include "launch_cuda.cuh"\n#include "device/a.hpp"\n',
                                "engine/device/a.hpp": "#pragma once\n",
                                "engine/device/b.cpp": '#include "device/a.hpp"\n#include "launch_cuda.cuh"\n'})
    r = run(root, "layers")
    assert r.returncode == 1
    assert "engine/device/b.cpp:2: device/ includes the CUDA-only launch_cuda.cuh" in r.stdout
    assert "cuda/launch_cuda.cu" not in r.stdout
