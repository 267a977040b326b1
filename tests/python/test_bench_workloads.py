"""Results unchanged: every bench/ workload, at tiny sizes, gives the same output on
lazyjit (the device) and through torch.compile(backend="lazyjit") as in eager PyTorch
(torch.testing.assert_close, PyTorch's default tolerances). Uses the workload
definitions and the timing loop (run_system) of bench/run.py, so the benchmark and this
test cannot drift apart."""
import importlib.util
import sys
from pathlib import Path

import pytest
import torch

import lazyjit
from conftest import cpu_has

_RUN = Path(__file__).resolve().parents[2] / "bench" / "run.py"
_spec = importlib.util.spec_from_file_location("lazyjit_bench_run", _RUN)
bench = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = bench
_spec.loader.exec_module(bench)


def _run(wl, device, steps):
    with wl.settings():
        return _run_steps(wl, device, steps)


def _run_steps(wl, device, steps):
    fn, args = built = wl.build(device)
    ctx = torch.no_grad if wl.no_grad else torch.enable_grad
    outs = []
    for _ in range(steps):
        with ctx():
            out = fn(*args)
        if device == "lazyjit":
            lazyjit.sync()
        outs.append(bench.to_cpu(out))
    return outs, bench.to_cpu(wl.state_to_compare(built))


@pytest.mark.parametrize("key", list(bench.WORKLOADS))
def test_workload_matches_eager(key):
    wl = bench.make_workload(key, "tiny")
    # two steps: the first compiles, the second runs the cached program (and, for the
    # training step, the optimizer's second-step path with initialized state)
    want, want_state = _run(wl, "cpu", 2)
    got, got_state = _run(wl, "lazyjit", 2)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, **wl.tolerance)
    if want_state is not None:
        torch.testing.assert_close(got_state, want_state)


@pytest.mark.parametrize("key", list(bench.WORKLOADS))
def test_workload_compile_matches_eager(key):
    """torch.compile(backend="lazyjit") through the bench's own run_system: first call,
    one warm-up step and one timed step (3 steps, as eager's), outputs and (training)
    parameters equal eager's, and every graph ran as a captured lazyjit program (no
    graph run through ATen, no capture after the first steps). For e_mlp_train the
    training check compares the loss and the parameters after the warm-up step: a
    compiled optimizer.step that updated copies of the parameters (fixed in 1b87324)
    failed it."""
    wl = bench.make_workload(key, "tiny")
    _, want_first, (want_last, want_state) = bench.run_system(wl, "eager", 1, 1)
    res, got_first, (got_last, got_state) = bench.run_system(wl, "lazyjit_compile", 1, 1)
    torch.testing.assert_close(got_first, want_first, **wl.tolerance)
    torch.testing.assert_close(got_last, want_last, **wl.tolerance)
    if want_state is not None:  # the training step: parameters as the bench compares them
        torch.testing.assert_close(got_state, want_state, **bench.TRAIN_STATE_TOL)
    st = res["lazyjit_compile"]
    assert st["total"]["eager_reasons"] == [] and not st["eager_fallback"], st["total"]
    assert st["total"]["graphs"] >= 1 and st["steady"]["calls"] >= 1, st
    assert st["steady"]["captures"] == 0, st


@pytest.mark.parametrize("key", list(bench.WORKLOADS))
def test_workload_device_compile_matches_eager(key):
    """torch.compile(backend="lazyjit") on the lazyjit device (the bench's
    lazyjit_device_compile, issue 57) through run_system: outputs and (training)
    parameters equal eager's, every graph captured (none recorded op by op), the timed
    step runs captured programs on the device's data and captures nothing new."""
    wl = bench.make_workload(key, "tiny")
    _, want_first, (want_last, want_state) = bench.run_system(wl, "eager", 1, 1)
    res, got_first, (got_last, got_state) = bench.run_system(wl, "lazyjit_device_compile", 1, 1)
    torch.testing.assert_close(got_first, want_first, **wl.tolerance)
    torch.testing.assert_close(got_last, want_last, **wl.tolerance)
    if want_state is not None:
        torch.testing.assert_close(got_state, want_state, **bench.TRAIN_STATE_TOL)
    st = res["lazyjit_compile"]
    assert st["total"]["eager_reasons"] == [] and not st["eager_fallback"], st["total"]
    assert st["steady"]["device_calls"] >= 1 and not st["no_lazyjit_calls"], st
    assert st["steady"]["captures"] == 0, st
    assert res["lazyjit_per_step"]["compiles"] == 0


@pytest.mark.parametrize("key,count", [("f_small_ops", 30), ("f40_small_ops", 40)])
def test_small_ops_counts_its_ops(key, count):
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.append(func)
            return func(*args, **(kwargs or {}))

    fn, args = bench.make_workload(key, "tiny").build("cpu")
    with Count() as c:
        y = fn(*args)
    assert len(c.ops) == count, [str(f) for f in c.ops]
    assert count == {"f_small_ops": bench.SMALL_OPS_COUNT, "f40_small_ops": bench.SMALL_OPS_40_COUNT}[key]
    assert y.shape == (8, 8) and bool(y.isfinite().all())


def test_calls_per_sample_times_per_call():
    """A workload with several calls per timed sample reports per-call numbers."""
    wl = bench.make_workload("f_small_ops", "quick")
    assert wl.calls > 1
    res, first, (last, _) = bench.run_system(wl, "lazyjit", 0, 2)
    assert res["calls_per_sample"] == wl.calls and res["runs"] == 2
    assert len(res["times_ms"]) == 2
    assert res["measured_s"] * 1e3 == pytest.approx(sum(res["times_ms"]) * wl.calls, rel=1e-6)
    ps = res["lazyjit_per_step"]
    assert ps["syncs"] == pytest.approx(1.0) and ps["compiles"] == 0
    assert 0 < ps["ops_traced"] <= 2 * bench.SMALL_OPS_COUNT
    want = bench.small_ops(*bench.make_workload("f_small_ops", "quick").build("cpu")[1])
    torch.testing.assert_close(first, want)
    torch.testing.assert_close(last, want)


@pytest.mark.skipif(not cpu_has("avx512_bf16", "amx_bf16"), reason="the CPU has no native bfloat16")
def test_bf16_matmul_workload_runs_its_gemms_in_bf16_and_restores_the_switch():
    """d_llama_layer_bf16mm at the quick size (GEMMs big enough for oneDNN): the
    layer's 7 projections run as bf16 GEMMs, the output is within the workload's
    bf16 tolerance of eager under the same switch and visibly not float32-exact,
    and the switch is back to what it was afterwards."""
    wl = bench.make_workload("d_llama_layer_bf16mm", "quick")
    before = torch.backends.mkldnn.matmul.fp32_precision
    n0 = lazyjit.metrics()["timings"].get("onednn gemm bf16", {}).get("count", 0)
    want, _ = _run(wl, "cpu", 1)
    got, _ = _run(wl, "lazyjit", 1)
    n = lazyjit.metrics()["timings"].get("onednn gemm bf16", {}).get("count", 0) - n0
    assert torch.backends.mkldnn.matmul.fp32_precision == before
    assert n == 7, n  # q, k, v, o, gate, up, down
    torch.testing.assert_close(got[0], want[0], **wl.tolerance)
    assert (got[0] - want[0]).abs().max() > 1e-4  # bf16 ran, not float32


def test_summary_and_table_have_lazyjit_compile():
    """summarize + render_markdown on a made-up result: lazyjit_compile's ratios and
    columns, the f target checked on the system TARGETS names, a fallback shown as
    failed without ratios."""
    def sysres(ms, **kw):
        return {"median_ms": ms, "min_ms": ms, "first_call_ms": 10 * ms, "correct": True, **kw}

    results = {
        "machine": {"date": "d", "git_commit": "c", "git_dirty": False, "cpu_model": "m",
                    "cpus_available": 2, "cpu_isa": [], "torch_threads": 2,
                    "memory_gib": 1.0, "torch": "t", "transformers": "t", "python": "p"},
        "config": {"scale": "quick", "warmup": 1, "runs": 1},
        "workloads": {
            "f_small_ops": {"systems": {"eager": sysres(0.1), "lazyjit": sysres(0.05),
                                        "inductor": sysres(0.04),
                                        "lazyjit_compile": sysres(0.02)}},
            "c_mlp": {"systems": {"eager": sysres(2.0), "lazyjit": sysres(1.0),
                                  "inductor": sysres(1.5),
                                  "lazyjit_compile": sysres(1.0, failed="eager fallback: x")}},
            "g_decode": {"systems": {"eager": sysres(120.0), "lazyjit": sysres(160.0),
                                     "lazyjit_compile": sysres(90.0)}},
        },
    }
    bench.summarize(results)
    f = results["workloads"]["f_small_ops"]["summary"]
    assert f["compile_speedup_vs_eager"] == pytest.approx(5.0)
    assert f["compile_speedup_vs_inductor"] == pytest.approx(2.0)
    # f: vs_eager is the device's (2× ≥ 1.5), vs_inductor lazyjit_compile's (2× ≥ 1)
    assert f["target_checks"] == {"vs_eager": True, "vs_inductor": True, "correct": True,
                                  "correct_lazyjit_compile": True}
    c = results["workloads"]["c_mlp"]["summary"]
    assert c["lazyjit_compile_failed"] and c["compile_speedup_vs_eager"] is None
    md = bench.render_markdown(results)
    assert "| lazyjit_compile ms |" in md and "| eager/lazyjit_compile |" in md
    assert "| inductor/lazyjit_compile |" in md
    assert "**failed** (1)" in md and "FAIL (fallback)" in md
    assert "≥1× ind. (lazyjit_compile) ✓ [device ✗]" in md  # the device: 0.8× Inductor
    # g: the device misses 1.2× eager (0.75×), torch.compile meets it (1.33×); a
    # failed lazyjit_compile (c) is not shown beside the device's check.
    g = results["workloads"]["g_decode"]["summary"]
    assert g["target_checks"]["vs_eager"] is False
    assert g["target_checks_by_system"]["lazyjit_compile"] == {"vs_eager": True}
    assert "≥1.2× eager ✗ [compile ✓]" in md
    assert "≥1.3× eager ✓; ≥1× ind. ✓ |" in md


def test_summary_and_table_have_lazyjit_device_compile():
    """lazyjit_device_compile on a made-up result: its ratios, issue 57's targets (g
    against lazyjit_compile, f against eager) and its counters in a table of its own;
    no such table when the system did not run."""
    def sysres(ms, **kw):
        return {"median_ms": ms, "min_ms": ms, "first_call_ms": 10 * ms, "correct": True, **kw}

    def ldc(ms, device_calls, ops):
        st = {"graphs": 3, "captures": 5, "eager_graphs": 0, "compiles": 5, "llvm_compiles": 24,
              "compile_ms": 900.0}
        return sysres(ms, dynamo={"graph_breaks": 0}, lazyjit_compile={
            "total": st, "steady": {**st, "captures": 0},
            "steady_device_calls_per_call": device_calls},
            lazyjit_per_step={"ops_traced": ops, "syncs": 9.0, "graphs_executed": 41.0})

    machine = {"date": "d", "git_commit": "c", "git_dirty": False, "cpu_model": "m",
               "cpus_available": 2, "cpu_isa": [], "torch_threads": 2, "memory_gib": 1.0,
               "torch": "t", "transformers": "t", "python": "p"}
    results = {
        "machine": machine, "config": {"scale": "quick", "warmup": 1, "runs": 1},
        "workloads": {
            "f_small_ops": {"systems": {"eager": sysres(0.05), "lazyjit": sysres(0.05),
                                        "lazyjit_compile": sysres(0.01),
                                        "lazyjit_device_compile": ldc(0.02, 1, 0)}},
            "g_decode": {"systems": {"eager": sysres(60.0), "lazyjit": sysres(60.0),
                                     "lazyjit_compile": sysres(24.0),
                                     "lazyjit_device_compile": ldc(20.0, 32, 1776)}},
        },
    }
    bench.summarize(results)
    f, g = (results["workloads"][k]["summary"] for k in ("f_small_ops", "g_decode"))
    assert f["device_compile_speedup_vs_eager"] == pytest.approx(2.5)
    assert f["device_compile_target_checks"] == {"vs_eager": False}  # 2.5× < 5×
    assert g["device_compile_speedup_vs_lazyjit_compile"] == pytest.approx(1.2)
    assert g["device_compile_target_checks"] == {"vs_lazyjit_compile": True}
    md = bench.render_markdown(results)
    assert "| lazyjit_device_compile ms |" in md and "| lazyjit_compile/ldc |" in md
    assert "| 2.50× | 2.50× | 0.50× |" in md and "≥5× eager ✗ |" in md
    assert "| 3.00× | 3.00× | 1.20× |" in md and "≥1× lazyjit_compile ✓ |" in md
    assert "| g_decode | 3 | 5 (0) | 0 | 32 | 1776 | 9 | 41 | 5 | 24 | 900.0 | 0 |" in md
    del results["workloads"]["g_decode"]["systems"]["lazyjit_device_compile"]
    del results["workloads"]["f_small_ops"]["systems"]["lazyjit_device_compile"]
    bench.summarize(results)
    assert "lazyjit_device_compile ms" not in bench.render_markdown(results)


def test_compare_helper_reports_mismatch_without_raising():
    a = torch.zeros(4)
    assert bench.compare(a, a)["ok"]
    bad = bench.compare(a + 1, a)
    assert not bad["ok"] and "Mismatched elements" in bad["error"]
