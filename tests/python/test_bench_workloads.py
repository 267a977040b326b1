"""Results unchanged: every bench/ workload, at tiny sizes, gives the same output on
lazyjit as in eager PyTorch (torch.testing.assert_close, PyTorch's default tolerances).
Uses the workload definitions of bench/run.py, so the benchmark and this test cannot
drift apart."""
import importlib.util
import sys
from pathlib import Path

import pytest
import torch

import lazyjit

_RUN = Path(__file__).resolve().parents[2] / "bench" / "run.py"
_spec = importlib.util.spec_from_file_location("lazyjit_bench_run", _RUN)
bench = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = bench
_spec.loader.exec_module(bench)


def _run(wl, device, steps):
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
        torch.testing.assert_close(g, w)
    if want_state is not None:
        torch.testing.assert_close(got_state, want_state)


def test_compare_helper_reports_mismatch_without_raising():
    a = torch.zeros(4)
    assert bench.compare(a, a)["ok"]
    bad = bench.compare(a + 1, a)
    assert not bad["ok"] and "Mismatched elements" in bad["error"]
