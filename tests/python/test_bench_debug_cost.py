"""bench/debug_cost.py runs: one workload at tiny sizes, one round, the NaN checks off
and on each in a process of its own, and writes its table."""
import importlib.util
import json
import sys
from pathlib import Path

_SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "debug_cost.py"
_spec = importlib.util.spec_from_file_location("lazyjit_bench_debug_cost", _SCRIPT)
bench = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = bench
_spec.loader.exec_module(bench)


def test_uses_the_bench_workloads():
    assert "c_mlp" in bench.bench.WORKLOADS and set(bench.SCALES) >= {"full", "quick", "tiny"}


def test_one_tiny_round(tmp_path):
    stem = tmp_path / "nans"
    assert bench.main(["--scale", "tiny", "--only", "b1", "--rounds", "1", "--out", str(stem)]) == 0
    results = json.loads(stem.with_suffix(".json").read_text())
    r = results["workloads"]["b1_softmax"]
    # The switch reached each worker and acted there: after its timed steps, the
    # process that ran with the checks on raised on a NaN naming the op that made it;
    # the one with them off returned the NaN.
    off, on = r["off"][0]["nan_probe"], r["on"][0]["nan_probe"]
    assert off == {"caught": False, "nan_returned": True, "message": None}, off
    assert on["caught"] is True and "lazyjit.debug_nans" in on["message"] and "log" in on["message"], on
    assert all(x["median_ms"] > 0 and x["compiles_steady"] == 0 for x in r["off"] + r["on"])
    md = stem.with_suffix(".md").read_text()
    assert "| `b1_softmax` |" in md and "on / off" in md
