"""bench/gemm.py's "lazyjit ran" column is read from what ran: its probe process runs
each GEMM on the lazyjit device as a compiled program and reads the fast paths' call
counts from lazyjit.metrics()["timings"]. A column-major mat1 (g^T @ x, a weight's
gradient) is oneDNN's as a row-major one is on an AVX-512 CPU, ATen's mm without
AVX-512 (executor/gemm.cpp)."""
import importlib.util
import sys
from pathlib import Path

from conftest import cpu_has

_SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "gemm.py"
_spec = importlib.util.spec_from_file_location("lazyjit_bench_gemm", _SCRIPT)
bench = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = bench
_spec.loader.exec_module(bench)


def test_probe_reads_the_path_that_ran():
    got = bench.lazyjit_paths([[256, 512, 512, "x @ W^T"], [512, 128, 256, "g^T @ x"], [1, 64, 96, "x @ W^T"]])
    for r in got:
        assert r["compiled"] and r["max_abs_diff_vs_mm"] < 1e-3, got
        assert r["counts"]["onednn"] + r["counts"]["small"] <= 1, got
        assert r["path"] in ("oneDNN", "small GEMM", "ATen mm"), got
    assert got[1]["path"] == ("oneDNN" if got[1]["counts"]["onednn"] else "ATen mm"), got
    if cpu_has("avx512f"):  # a weight's gradient: oneDNN's too (executor/gemm.cpp)
        assert got[1]["counts"]["onednn"] == got[0]["counts"]["onednn"], got
    else:
        assert got[1]["path"] == "ATen mm", got
    assert got[0]["path"] == ("oneDNN" if got[0]["counts"]["onednn"] else "ATen mm"), got
