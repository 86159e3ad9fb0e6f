"""bench/gpu_table.py on a results file written here: the pairs, their ratio, the device parts,
the JAX line, and the text replaced between the markers of a document (and only there)."""
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
cuda = {"method": "batched", "device": "cuda", "precision": "float64", "n": 1000000, "t": 1000,
        "output": "final", "best_s": 0.05, "threads": 1, "regime": "compute",
        "ceiling_over_time": 0.04, "kernel_s": 0.002, "transfer_s": 0.004,
        "device_write_over_kernel": 0.01, "d2d_gb_per_s": 4000.0,
        "transfer_ceiling_over_transfer": 0.1, "d2h_gb_per_s": 55.0}
cpu = dict(cuda, device="cpu", best_s=0.2, threads=16)
for k in ("kernel_s", "transfer_s"):
    del cpu[k]
lone = dict(cuda, n=5)  # no CPU twin: no row
other = dict(cuda, n=150000, best_s=0.01)  # after a failed cell: still paired
other_cpu = dict(cpu, n=150000, best_s=0.03)
summ = {"workload": "summaries", "method": "batched", "device": "cuda", "precision": "float64",
        "n": 1000000, "t": 1000, "best_s": 0.1, "threads": 16, "kernel_s": 0.03, "transfer_s": 0.002}
summ_cpu = dict(summ, device="cpu", best_s=0.9)
for k in ("kernel_s", "transfer_s"):
    del summ_cpu[k]
data = {"workload": "irregular", "method": "batched", "device": "cuda", "n": 100000, "doses": 20,
        "observations": 30, "rows": 3000000, "threads": 2, "best_s": 0.2, "kernel_s": 0.01,
        "transfer_s": 0.05}
data_cpu = dict(data, device="cpu", best_s=0.5)
for k in ("kernel_s", "transfer_s"):
    del data_cpu[k]
pred = {"workload": "likelihood", "entry": "log_likelihood_all", "device": "cuda", "n": 100000,
        "doses": 20, "observations": 30, "threads": 16, "best_s": 0.004, "kernel_s": 0.001,
        "transfer_s": 0.0005, "host_s": 0.0025, "device_subjects": 100000, "cpu_best_s": 0.02}
lines = [{"ctest_gpu": "100% tests passed out of 7"},
         {"memcheck": "========= ERROR SUMMARY: 0 errors"}, cuda, cpu, lone,
         {"failed": "pkscan-bench --device cuda --n 7"}, other, other_cpu, summ, summ_cpu, data, data_cpu, pred,
         {"jax_seed_scan": {"device": "cuda:0", "n": 100000, "t": 1000, "best_s": 0.012,
                            "best_to_host_s": 1.5}}]
with tempfile.TemporaryDirectory() as d:
    results = os.path.join(d, "r.json")
    with open(results, "w") as f:
        f.write("\n".join(json.dumps(x) for x in lines) + "\n")
    doc = os.path.join(d, "doc.md")
    with open(doc, "w") as f:
        f.write("intro\n<!-- gpu-table:begin -->\nold\n<!-- gpu-table:end -->\nafter\n")
    out = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "gpu_table.py"), results, doc],
                         check=True, capture_output=True, text=True).stdout
    rows = [x for x in out.splitlines() if x.startswith("| batched")]
    assert len(rows) == 2, out
    row = rows[0]
    assert "N=1.5e5, T=1e3" in rows[1] and "| 3.00x |" in rows[1], rows[1]
    assert "N=1e6, T=1e3 (float64)" in row and "| 50 ms | 200 ms (16 threads) | 4.00x |" in row, row
    assert "kernel 2 ms" in row and "transfer 4 ms" in row and "compute (0.04 of its ceiling)" in row
    srow = [x for x in out.splitlines() if x.startswith("| summaries only")]
    assert len(srow) == 1 and "| 9.00x |" in srow[0], out
    assert "kernel 30 ms; transfer 2 ms" in srow[0], srow[0]
    drow = [x for x in out.splitlines() if x.startswith("| dataset irregular")]
    assert len(drow) == 1 and "N=1e5, 20 doses + 30 observations (float64)" in drow[0], out
    assert "| 2.50x |" in drow[0] and "kernel 10 ms; transfer 50 ms" in drow[0], drow[0]
    prow = [x for x in out.splitlines() if x.startswith("| Predictor log_likelihood_all")]
    assert len(prow) == 1 and "N=1e5, 20 doses + 30 observations" in prow[0], out
    assert "| 4 ms | 20 ms (16 threads) | 5.00x |" in prow[0], prow[0]
    assert "kernel 1 ms; transfer 0.5 ms; host 2.5 ms" in prow[0], prow[0]
    assert "memcheck on a subset: ========= ERROR SUMMARY: 0 errors." in out, out
    assert "100% tests passed out of 7" in out and "12 ms with the trajectories left" in out, out
    text = open(doc).read()
    assert text.startswith("intro\n<!-- gpu-table:begin -->\nMeasured by") and "old" not in text
    assert text.endswith("<!-- gpu-table:end -->\nafter\n"), text
print("gpu table ok")
