"""bench/gemm_floor.py: the GEMM floor of the real-size benches counts each
recorded product's and convolution's multiply-adds as the op's shapes give
them, forward and backward, as often as the step ran it."""
import importlib.util
import sys
from pathlib import Path

import torch

_SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "gemm_floor.py"
_spec = importlib.util.spec_from_file_location("lazyjit_bench_gemm_floor", _SCRIPT)
floor = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = floor
_spec.loader.exec_module(floor)


def _by_op(ops):
    out = {}
    for func, a, k, count in ops:
        out.setdefault(str(func), 0)
        out[str(func)] += floor._op_flops(func, a, k) * count
    return out


def test_linear_forward_and_backward():
    lin = torch.nn.Linear(24, 40)
    x = torch.randn(6, 24, requires_grad=True)

    def step():
        lin(x).sum().backward()

    ops = floor.record(step)
    # forward x @ W^T (addmm), backward dX = g @ W and dW = g^T @ x (two mm)
    assert _by_op(ops) == {"aten.addmm.default": 2 * 6 * 24 * 40, "aten.mm.default": 2 * (2 * 6 * 24 * 40)}
    assert floor.flops(ops) == 3 * 2 * 6 * 24 * 40


def test_batched_products_count_every_run():
    a, b = torch.randn(3, 5, 7), torch.randn(3, 7, 2)

    def step():
        for _ in range(4):
            torch.bmm(a, b)

    ops = floor.record(step)
    assert len(ops) == 1 and ops[0][3] == 4
    assert floor.flops(ops) == 4 * 2 * 3 * 5 * 7 * 2


def test_convolution_forward_backward_and_stride():
    conv = torch.nn.Conv2d(6, 10, 3, stride=2, padding=1, groups=2)
    x = torch.randn(2, 6, 9, 9, requires_grad=True)

    def step():
        conv(x).sum().backward()

    ops = floor.record(step)
    out_hw = ((9 + 2 - 3) // 2 + 1) ** 2  # 5 x 5
    fwd = 2 * 2 * 10 * out_hw * (6 // 2) * 9  # per output element: in/groups x kernel multiply-adds
    got = _by_op(ops)
    assert got["aten.convolution.default"] == fwd
    assert got["aten.convolution_backward.default"] == 2 * fwd  # the input's and the weight's gradients


def test_other_ops_are_not_products():
    x = torch.randn(8, 8)
    ops = floor.record(lambda: (x.exp() + 1).softmax(-1))
    assert ops == [] and floor.flops(ops) == 0


def test_aten_ms_runs_the_recorded_ops():
    a, b = torch.randn(64, 32), torch.randn(32, 16)
    ops = floor.record(lambda: a @ b)
    assert floor.aten_ms(ops, reps=2) > 0
    rates = floor.peak_rates(reps=1)
    assert set(rates) == {"mm", "conv"} and all(r > 0 for r in rates.values())
