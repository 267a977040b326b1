"""bench/gpu_bench.py's logic, checked here without a GPU through its dry run
(--dry-run: the same workers, schedule, comparison and report on the CPU, tiny
sizes, wall timers): the markdown and JSON it writes hold a row per system with
real times and a match against eager, the time budget skips what does not fit
and says so, a mismatch shows in its row, and the run order puts the issue's
done-when pairs first. The numbers themselves come from a GPU run only."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "gpu_bench.py"
sys.path.insert(0, str(ROOT / "bench"))

import gpu_report  # noqa: E402
import gpu_workloads  # noqa: E402


def _row(md: str, key: str, system: str) -> str:
    """The table row of `system` in the markdown's section of workload `key`."""
    section = md.split(f"\n## {key}\n", 1)[1].split("\n## ", 1)[0]
    return next(l for l in section.splitlines() if l.startswith(f"| {system} |"))


def _dry_run(tmp_path, *extra, timeout=150):
    stem = tmp_path / "gpu"
    env = dict(os.environ, PYTHONPATH=str(ROOT / "python"))
    p = subprocess.run([sys.executable, str(SCRIPT), "--dry-run", "--out", str(stem), *extra],
                       env=env, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return json.loads(stem.with_suffix(".json").read_text()), stem.with_suffix(".md").read_text(), p


def test_dry_run_writes_a_row_per_system_that_matches_eager(tmp_path):
    systems = ["eager", "lazyjit", "lazyjit_compile"]
    res, md, p = _dry_run(tmp_path, "--only", "a_gelu,f_small_ops", "--systems",
                          ",".join(systems + ["inductor_ro"]))
    assert res["device"] == "cpu" and res["timer"] == "wall"
    assert list(res["workloads"]) == ["a_gelu", "f_small_ops"]
    assert any("not run: inductor_ro (needs CUDA" in n for n in res["notes"]), res["notes"]
    for key, r in res["workloads"].items():
        assert sorted(r["systems"]) == sorted(systems), (key, r["systems"].keys())
        for name, sr in r["systems"].items():
            assert "error" not in sr and "skipped" not in sr, (key, name, sr)
            assert sr["median_wall_ms"] > 0 and "median_gpu_ms" not in sr, sr  # no CUDA events here
            assert sr["first_call_ms"] > 0
            if name != "eager":
                assert sr["match"] is True, (key, name, sr.get("match_error"))
                assert sr["vs_eager"] > 0
        for name in systems[1:]:
            assert "| yes (max abs diff" in _row(md, key, name)
    a = res["workloads"]["a_gelu"]
    assert a["copy"]["gbps"] > 0 and a["systems"]["lazyjit"]["copy_fraction"] > 0
    checks = {(c["workload"], c["system"], c["measure"]) for c in res["done_when"]}
    assert ("f_small_ops", "lazyjit_compile", "vs_inductor_ro") in checks
    assert "## Done when (issue 43)" in md and "**dry run on the CPU**" in md
    assert md.strip() in p.stdout  # printed too


def test_time_budget_skips_what_does_not_fit_and_says_so(tmp_path):
    # a budget the workers' start-up alone spends: every pair is skipped, none runs
    res, md, _ = _dry_run(tmp_path, "--only", "a_gelu", "--systems", "eager,lazyjit",
                          "--budget", "1")
    for sr in res["workloads"]["a_gelu"]["systems"].values():
        assert sr["skipped"] == "time budget", sr
    assert md.count("| skipped: time budget |") == 2, md


def test_dry_run_refuses_to_write_gpu_results(tmp_path):
    p = subprocess.run([sys.executable, str(SCRIPT), "--dry-run", "--out",
                        str(ROOT / "bench" / "results" / "gpu")],
                       env=dict(os.environ, PYTHONPATH=str(ROOT / "python")),
                       capture_output=True, text=True, timeout=60)
    assert p.returncode != 0 and "does not write into bench/results" in p.stderr, p.stderr


def test_mismatch_and_error_show_in_their_rows():
    """summarize + render_markdown on hand-made results: a wrong output is a NO in its
    row, fails its done-when, and is listed with its message at the end."""
    fast = {"median_wall_ms": 0.1, "first_call_ms": 5.0}
    res = {"meta": {"date": "d", "cpu_model": "cpu", "cpus_available": 2}, "device": "cpu",
           "scale": "tiny", "timer": "wall", "budget_s": 10, "total_wall_s": 1, "notes": [],
           "config": {"warmup": 1, "runs": 3, "max_runs": 3, "min_time_s": 0},
           "workloads": {"g_decode": {"description": "decode", "bytes_moved": None, "systems": {
               "eager": {"median_wall_ms": 1.0, "first_call_ms": 1.0},
               "lazyjit": dict(fast, match=False, max_abs_diff=3.0, match_error="out: 7 != 9"),
               "lazyjit_compile": {"error": "RuntimeError: boom"}}}}}
    gpu_report.summarize(res)
    md = gpu_report.render_markdown(res)
    row = _row(md, "g_decode", "lazyjit")
    assert "**NO** (max abs diff 3)" in row and "10.00×" in row, row
    assert "| lazyjit_compile |" in md and "**error**" in md
    c = next(c for c in res["done_when"] if c["system"] == "lazyjit")
    assert c["value"] == pytest.approx(10.0) and c["met"] is False and c["note"] == "wrong result"
    assert "mismatch: `out: 7 != 9`" in md and "`RuntimeError: boom`" in md


def test_bf16_tolerance_passes_rounding_and_fails_a_wrong_value():
    want = torch.linspace(-3, 3, 101).to(torch.bfloat16)
    ulp_off = (want.float() * (1 + 2 ** -8)).to(torch.bfloat16)  # one rounding apart
    assert gpu_workloads.compare_outputs(ulp_off, want)["ok"]
    wrong = want.clone()
    wrong[7] += 0.25
    r = gpu_workloads.compare_outputs(wrong, want)
    assert not r["ok"] and r["max_abs_diff"] == pytest.approx(0.25, abs=0.02)
    ids = torch.tensor([[5, 6, 7]])
    assert not gpu_workloads.compare_outputs(ids + torch.tensor([[0, 0, 1]]), ids)["ok"]  # exact


def test_schedule_runs_done_when_pairs_first_and_eager_before_its_workload():
    keys = list(gpu_workloads.GPU_WORKLOADS)
    pairs = gpu_workloads.schedule(keys, list(gpu_workloads.SYSTEMS))
    assert sorted(pairs) == sorted((k, s) for k in keys for s in gpu_workloads.SYSTEMS)
    for k in keys:
        assert min(i for i, p in enumerate(pairs) if p[0] == k) == pairs.index((k, "eager"))
    needed = [i for i, (k, s) in enumerate(pairs)
              if any(w == k and (s == x or s == gpu_workloads.MEASURE_SYSTEM.get(m) or s == "eager")
                     for w, x, m, _ in gpu_workloads.DONE_WHEN)]
    assert needed == list(range(len(needed))), "a pair the done-when needs runs after one it does not"
    assert pairs.index(("f_small_ops", "inductor_ro")) < pairs.index(("a_gelu", "inductor_ro"))
    assert pairs[-1][0] == "d_llama_layer"


@pytest.mark.parametrize("key", list(gpu_workloads.GPU_WORKLOADS))
def test_every_workload_has_the_gpu_and_dry_run_sizes(key):
    """The GPU run's sizes exist (the dry run only builds the tiny ones); a and b's
    working sets are past the H200's 50 MB L2."""
    for scale in ("gpu", "tiny"):
        wl = gpu_workloads.make_gpu_workload(key, scale)
        assert wl.describe() and wl.calls >= 1
    wl = gpu_workloads.make_gpu_workload(key, "gpu")
    if key[:2] in ("a_", "b1", "b2"):
        assert wl.bytes_moved() > 4 * 50e6
