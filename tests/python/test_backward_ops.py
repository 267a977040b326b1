"""gelu_backward and mse_loss_backward as elementwise nodes, mse_loss as their
reduction (tracer/backward_ops.cpp), fused with their neighbours rather than run
as ATen library steps.

Eager PyTorch on the CPU is the oracle: values (special values included),
dtype and shape, through autograd and called directly, broadcast operands
included. The plan test reads LAZYJIT_DUMP's plans in a fresh interpreter."""
import glob

import pytest
import torch
import torch.nn.functional as F

from conftest import DEV
from test_ops import check
from test_passes import run_dumped

SPECIAL = [0.0, -0.0, 1e-30, -1e-30, 3.0, -3.0, 10.0, -10.0, 40.0, -40.0,
           float("inf"), float("-inf"), float("nan")]


def _x(dtype, n=257):
    x = torch.cat([torch.tensor(SPECIAL, dtype=torch.float64), torch.randn(n, dtype=torch.float64) * 4])
    return x.to(dtype)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_gelu_backward_matches_eager(approximate, dtype):
    x = _x(dtype).reshape(10, -1)
    dy = torch.randn(x.shape, dtype=torch.float64).to(dtype)
    # bf16: one rounding of the float32 result apart (an ulp of tanh or erf
    # can round either way), and near tanh's saturation 1 - tanh^2 cancels:
    # eager gives 0 where lazyjit gives 1.4e-5 (of gradients ~1).
    tol = {} if dtype != torch.bfloat16 else dict(rtol=1.6e-2, atol=1e-4)
    check(lambda dy, x: torch.ops.aten.gelu_backward(dy, x, approximate=approximate), dy, x, **tol)


def test_gelu_backward_of_views_and_of_operands_eager_refuses():
    x, dy = torch.randn(5, 6), torch.randn(6, 5)
    for approximate in ("none", "tanh"):
        f = lambda dy, x: torch.ops.aten.gelu_backward(dy, x, approximate=approximate) * 2
        check(f, dy, x.t())
        check(f, dy[:, 1:], x.t()[:, 1:])
    # Eager's CPU kernel (oneDNN) refuses operands of other sizes; so does lazyjit.
    dy, x = torch.randn(4, 5), torch.randn(6, 1, 5)
    with pytest.raises(RuntimeError):
        torch.ops.aten.gelu_backward(dy, x)
    with pytest.raises(RuntimeError):
        torch.ops.aten.gelu_backward(dy.to(DEV), x.to(DEV)).cpu()


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_gradient_through_autograd(approximate):
    torch.manual_seed(0)
    x, w = torch.randn(16, 32), torch.randn(32, 8)

    def grad(x, w):
        x = x.detach().requires_grad_()
        F.gelu(x @ w, approximate=approximate).square().sum().backward()
        return x.grad

    want = grad(x, w)
    got = grad(x.to(DEV), w.to(DEV)).cpu()
    # The tanh form's vector tanh is within a few ulp of ATen's, and x.grad sums
    # eight products with cancellation: on an AVX-512 AMD host one element of 512
    # differed from eager's by 2.7e-5 (1.5e-5 relative). So: as accurate as eager
    # against float64, and close to eager within what that rounding allows.
    truth = grad(x.double(), w.double())
    assert (got.double() - truth).abs().max() <= 1.5 * (want.double() - truth).abs().max() + 1e-6
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_mse_loss_gradient_matches_eager(reduction, dtype):
    torch.manual_seed(0)
    x, y = torch.randn(8, 33, dtype=dtype), torch.randn(8, 33, dtype=dtype)

    def grad(x, y):
        x = x.detach().requires_grad_()
        loss = F.mse_loss(x * 3, y, reduction=reduction)
        (loss if reduction != "none" else loss.sum()).backward()
        return x.grad

    torch.testing.assert_close(grad(x.to(DEV), y.to(DEV)).cpu(), grad(x, y))


@pytest.mark.parametrize("reduction", ["mean", "sum"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_mse_loss_matches_eager(reduction, dtype):
    for shape in ((1000,), (7, 33), (2, 3, 130)):
        x, y = torch.randn(shape, dtype=dtype) * 3, torch.randn(shape, dtype=dtype)
        check(lambda x, y: F.mse_loss(x, y, reduction=reduction), x, y)
    x = torch.tensor([1.0, float("inf"), 2.0], dtype=dtype)
    check(lambda x, y: F.mse_loss(x, y, reduction=reduction), x, torch.zeros(3, dtype=dtype))
    check(lambda x, y: F.mse_loss(x, y, reduction=reduction), x, x.clone())  # inf - inf: nan


def test_mse_loss_backward_called_directly_with_broadcasting():
    x, t = torch.randn(5, 7), torch.randn(7)
    for reduction in (0, 1, 2):
        g = torch.randn(()) if reduction else torch.randn(5, 7)
        check(lambda g, x, t: torch.ops.aten.mse_loss_backward(g, x, t, reduction), g, x, t)


def test_mse_loss_backward_of_half_types_stays_correct():
    # Its CPU kernel rounds every step to bf16: that dtype stays ATen's step.
    x, t = torch.randn(64).bfloat16(), torch.randn(64).bfloat16()
    check(lambda g, x, t: torch.ops.aten.mse_loss_backward(g, x, t, 1), torch.tensor(1.5).bfloat16(), x, t)


TRAIN = r"""
import sys, torch, torch.nn.functional as F, lazyjit
torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 64))
x, y = torch.randn(32, 64), torch.randn(32, 64)
def grads(m, x, y):
    m.zero_grad(set_to_none=True)
    loss = F.mse_loss(m(x), y)
    loss.backward()
    # copies: m.to("lazyjit") moves CPU parameters and their grads in place, as m.to("cuda") does
    return [loss.to("cpu", copy=True)] + [p.grad.to("cpu", copy=True) for p in m.parameters()]
want = grads(m, x, y)
got = grads(m.to("lazyjit"), x.to("lazyjit"), y.to("lazyjit"))
torch.save([got, want], sys.argv[1])
"""


def assert_fused_without(tmp_path, program, ops):
    """Runs `program` with LAZYJIT_DUMP: its results equal eager's, and its
    plans hold fused kernels and none of `ops` as a library step."""
    d, got, want = run_dumped(tmp_path, program)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)
    plans = "".join(open(p).read() for p in glob.glob(str(d / "*.plan.txt")))
    assert "fused_" in plans
    for op in ops:
        assert op not in plans, plans


def test_training_step_runs_no_gelu_or_mse_library_step(tmp_path):
    assert_fused_without(tmp_path, TRAIN, ("aten::gelu_backward", "aten::mse_loss"))


@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_softmax_backward_over_the_last_dim_matches_eager(log, dtype):
    fwd = torch.log_softmax if log else torch.softmax
    torch.manual_seed(0)
    x = torch.randn(6, 5, 77, dtype=dtype) * 3
    x[0, 0, :3] = float("-inf")  # masked positions, as attention masks make them
    dy = torch.randn(6, 5, 77, dtype=dtype)

    def grad(x, dy):
        x = x.detach().requires_grad_()
        fwd(x, -1).backward(dy)
        return x.grad

    torch.testing.assert_close(grad(x.to(DEV), dy.to(DEV)).cpu(), grad(x, dy), equal_nan=True)
    op = torch.ops.aten._log_softmax_backward_data if log else torch.ops.aten._softmax_backward_data
    y = fwd(x, -1)
    check(lambda dy, y: op(dy, y, -1, dtype), dy, y)
    check(lambda dy, y: op(dy, y, 2, dtype) * 2, dy.transpose(0, 1), y.transpose(0, 1))
    check(lambda dy, y: op(dy, y, 1, dtype), dy, y)  # not the last dim: ATen's step


ATTENTION = r"""
import sys, torch, lazyjit
torch.manual_seed(0)
q, k = torch.randn(2, 4, 16, 8), torch.randn(2, 4, 16, 8)
def grads(q, k):
    q, k = q.detach().requires_grad_(), k.detach().requires_grad_()
    (torch.softmax(q @ k.transpose(-1, -2) / 8 ** 0.5, -1) ** 2).sum().backward()
    return [q.grad.cpu(), k.grad.cpu()]
want = grads(q, k)
got = grads(q.to("lazyjit"), k.to("lazyjit"))
torch.save([got, want], sys.argv[1])
"""


def test_attention_backward_runs_no_softmax_backward_library_step(tmp_path):
    assert_fused_without(tmp_path, ATTENTION, ("aten::_softmax_backward_data",))
