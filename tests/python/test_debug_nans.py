"""NaN/Inf pinned to the op that made them (lazyjit.debug_nans, LAZYJIT_DEBUG_NANS=1).

With checks on, a sync whose outputs hold a NaN or Inf re-runs its graph op by op
and raises naming the first op that made one, the user's line that recorded it,
and its inputs' statistics; the tensors keep the values eager computes."""
import inspect
import json
import subprocess
import sys

import pytest
import torch

import lazyjit
from conftest import DEV, PYTHON_DIR, ROOT


@pytest.fixture
def nans():
    lazyjit.debug_nans(True)
    yield
    lazyjit.debug_nans(False)


def line_after():
    return inspect.currentframe().f_back.f_lineno + 1


def test_log_of_a_negative_value_inside_a_fused_chain_after_a_matmul(nans):
    torch.manual_seed(0)
    w, x = torch.randn(8, 8), torch.randn(4, 8)
    wl, xl = w.to(DEV), x.to(DEV)
    h = torch.tanh(xl @ wl) * 2
    at = line_after()
    y = torch.log(h - 0.5) + 1
    z = (y * 3).sum(-1)
    with pytest.raises(RuntimeError) as e:
        z.cpu()
    msg = str(e.value)
    assert "lazyjit.debug_nans" in msg and f"log (op #" in msg and f"test_debug_nans.py:{at}" in msg, msg
    # The op's input is finite, its result is not: both described.
    assert "its inputs: [4, 8] Float" in msg and " 0 NaN, 0 Inf" in msg.split("its inputs:")[1], msg
    # Nothing is lost: the values are eager's, NaN included.
    want = (torch.log(torch.tanh(x @ w) * 2 - 0.5) + 1) * 3
    torch.testing.assert_close(z.cpu(), want.sum(-1), equal_nan=True)


def test_a_library_op_that_makes_an_inf_is_named(nans):
    x = torch.tensor([[1.0, 0.0], [2.0, 3.0]])
    xl = x.to(DEV)
    at = line_after()
    d = torch.div(torch.ones(2, 2).to(DEV), xl @ torch.zeros(2, 2).to(DEV))  # 1 / 0 after a matmul
    with pytest.raises(RuntimeError) as e:
        d.cpu()
    msg = str(e.value)
    assert "div" in msg and f"test_debug_nans.py:{at}" in msg and "4 Inf" in msg, msg


def test_an_input_that_already_holds_a_nan_is_said_to(nans):
    x = torch.tensor([1.0, float("nan")])
    with pytest.raises(RuntimeError, match="graph input 0 already holds one"):
        (x.to(DEV) * 2).cpu()


def test_finite_results_raise_nothing_and_checks_can_be_turned_off(nans):
    x = torch.randn(16, 16)
    torch.testing.assert_close((torch.tanh(x.to(DEV)) @ x.to(DEV)).cpu(), torch.tanh(x) @ x)
    lazyjit.debug_nans(False)
    y = (torch.zeros(3).to(DEV) / 0).cpu()
    assert torch.isnan(y).all()


def test_env_switch_turns_checks_on():
    code = """
import torch, lazyjit
try:
    (torch.zeros(3).to("lazyjit") / 0).cpu()
    print("no error")
except RuntimeError as e:
    print(str(e).splitlines()[0])
"""
    env = {"PYTHONPATH": str(PYTHON_DIR), "LAZYJIT_CACHE": "off", "LAZYJIT_BACKGROUND_COMPILE": "off", "LAZYJIT_DEBUG_NANS": "1", "PATH": "/usr/bin:/bin"}
    p = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "lazyjit.debug_nans" in p.stdout and "div" in p.stdout and "3 NaN" in p.stdout, p.stdout


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
@pytest.mark.parametrize("n", [5, 100003])  # the check's vector loop and its tail, one thread and several
def test_the_check_finds_one_bad_element_of_every_float_dtype(nans, dtype, bad, n):
    # Made in the graph: the sync's output is scanned, its last element bad.
    x = torch.ones(n, dtype=dtype)
    x[-1] = 0
    xl = x.to(DEV)
    # 1 everywhere but there: log(0) * 0 is NaN, 1 / 0 is Inf.
    y = xl.log() * 0 if bad != bad else xl.reciprocal() * (1 if bad > 0 else -1)
    assert torch.isfinite((x.log() * 0 if bad != bad else x.reciprocal())[:-1]).all()
    with pytest.raises(RuntimeError, match="lazyjit.debug_nans"):
        y.cpu()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_finite_extremes_are_not_flagged(nans, dtype):
    info = torch.finfo(dtype)
    x = torch.tensor([info.max, info.min, info.tiny, -0.0, 0.0] * 40, dtype=dtype).to(DEV)
    torch.testing.assert_close((x * 1).cpu(), x.cpu())


def test_a_nan_no_output_keeps_raises_nothing(nans):
    # Kernels test what they store (NaN checks in the generated code): an
    # intermediate NaN that a later op replaces is not an output's NaN.
    x = torch.tensor([1.0, -1.0, 2.0, -3.0] * 64)
    got = (torch.nan_to_num(x.to(DEV).log(), nan=7.0) * 2).cpu()
    torch.testing.assert_close(got, torch.nan_to_num(x.log(), nan=7.0) * 2)


def test_checked_programs_are_compiled_apart_and_used_again(nans):
    lazyjit.clear_cache()
    lazyjit.reset_metrics()
    x = torch.randn(64, 64).to(DEV)
    for _ in range(3):
        (x.tanh() * 3 + 1).cpu()
    assert lazyjit.metrics()["compiles"] == 1 and lazyjit.metrics()["cache_hits"] == 2
    lazyjit.debug_nans(False)
    (x.tanh() * 3 + 1).cpu()  # other code (its kernels test nothing): compiled again, once
    (x.tanh() * 3 + 1).cpu()
    assert lazyjit.metrics()["compiles"] == 2
