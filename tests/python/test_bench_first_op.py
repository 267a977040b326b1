"""bench/first_op.py's op lines give on lazyjit what they give in eager PyTorch (its worker's
inputs, in this process), and its worker runs: the bench and this test share OPS and WORKER,
so they cannot drift apart."""
import importlib.util
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F  # noqa: F401 - the op lines use it
from torch.testing import assert_close

from conftest import DEV, lazyjit  # noqa: F401

_SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "first_op.py"
_spec = importlib.util.spec_from_file_location("lazyjit_bench_first_op", _SCRIPT)
bench = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = bench
_spec.loader.exec_module(bench)


def _inputs(dev):
    g = torch.Generator().manual_seed(0)
    return {"x": torch.randn(8, 16, generator=g).to(dev), "q": torch.randn(1, 2, 4, 8, generator=g).to(dev),
            "i": torch.tensor([1, 3]).to(dev), "t": torch.randint(0, 16, (8,), generator=g).to(dev),
            "torch": torch, "F": F}


@pytest.mark.parametrize("name", list(bench.OPS))
def test_op_line_matches_eager(name):
    line = bench.OPS[name]
    want = eval(line, _inputs("cpu"))
    got = eval(line, _inputs(DEV))
    assert got.device.type == "lazyjit"
    assert_close(got.cpu(), want)


def test_worker_reports_first_call_and_imports():
    r = bench.one("lazyjit", bench.OPS["cumsum"])
    assert r["ms"] > 0 and r["sympy"] is False and r["dynamo"] is False, r


def test_worker_first_step_and_cold_compile():
    """The two lazyjit columns: the first step (background compile, the default) runs
    the graph op by op; the cold compile (LAZYJIT_BACKGROUND_COMPILE=off) compiles in
    the sync. Both count the compile: the worker reads the counters after
    wait_for_compiles()."""
    first = bench.one("lazyjit", bench.OPS["mul"])
    cold = bench.one("lazyjit_cold", bench.OPS["mul"])
    assert first["background_syncs"] == 1 and first["llvm_compiles"] >= 1, first
    assert cold["background_syncs"] == 0 and cold["waited_for"] == 0, cold
    assert cold["llvm_compiles"] == first["llvm_compiles"] and cold["compile_ms"] > 0, (first, cold)
