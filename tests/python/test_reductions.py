"""Reductions and normalizations on lazyjit against eager, and that a softmax or a
layer_norm (with the residual add before it) compiles to one fused row kernel."""
import glob
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

import lazyjit

DEV = "lazyjit"
SHAPES = [(7, 33), (4, 3, 17), (1, 1000), (5, 1), (3, 0)]


def close(got, want, dtype=torch.float32):
    tol = {torch.float32: (1e-5, 1.3e-6), torch.float64: (1e-7, 1e-7),
           torch.bfloat16: (1e-2, 1.6e-2), torch.float16: (1e-3, 1e-3)}.get(dtype)
    if tol is None:
        torch.testing.assert_close(got.cpu(), want, equal_nan=True)
    else:
        torch.testing.assert_close(got.cpu(), want, atol=tol[0], rtol=tol[1], equal_nan=True)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("keepdim", [False, True])
def test_sum_mean_over_trailing_dims(shape, dtype, keepdim):
    x = torch.randn(shape).to(dtype)
    for dims in ([-1], list(range(1, len(shape))) or [-1]):
        close(x.to(DEV).sum(dims, keepdim=keepdim), x.sum(dims, keepdim=keepdim), dtype)
        if x.numel():
            close(x.to(DEV).mean(dims, keepdim=keepdim), x.mean(dims, keepdim=keepdim), dtype)
    close(x.to(DEV).sum(), x.sum(), dtype)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.bool, torch.uint8])
def test_integer_sums_accumulate_in_int64(dtype):
    x = torch.randint(0, 100, (6, 9)).to(dtype)
    close(x.to(DEV).sum(-1), x.sum(-1), dtype)
    close(x.to(DEV).sum(), x.sum(), dtype)


@pytest.mark.parametrize("shape", [(7, 33), (4, 3, 17), (2, 1000)])
def test_amax_amin_propagate_nan(shape):
    x = torch.randn(shape)
    x.view(-1)[3] = float("nan")
    x.view(-1)[-1] = float("inf")
    for f in (torch.amax, torch.amin):
        close(f(x.to(DEV), -1), f(x, -1))
        close(f(x.to(DEV), -1, keepdim=True), f(x, -1, keepdim=True))


def test_reductions_over_leading_dims_still_match():
    x = torch.randn(5, 6, 7)
    close(x.to(DEV).sum(0), x.sum(0))
    close(x.to(DEV).amax(1), x.amax(1))
    close(F.softmax(x.to(DEV), dim=1), F.softmax(x, dim=1))


@pytest.mark.parametrize("shape", [(7, 33), (4, 3, 17), (1, 1000), (2, 1)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_softmax_log_softmax(shape, dtype):
    x = (torch.randn(shape) * 4).to(dtype)
    close(F.softmax(x.to(DEV), -1), F.softmax(x, -1), dtype)
    close(F.log_softmax(x.to(DEV), -1), F.log_softmax(x, -1), dtype)
    close(F.softmax(x.to(DEV), -1, dtype=torch.float32), F.softmax(x, -1, dtype=torch.float32), torch.float32)


def test_softmax_of_rows_with_inf_and_nan():
    x = torch.tensor([[1.0, float("-inf"), 2.0], [float("nan"), 0.0, 1.0], [float("-inf")] * 3])
    close(F.softmax(x.to(DEV), -1), F.softmax(x, -1))


@pytest.mark.parametrize("shape,normalized", [((8, 32), (32,)), ((2, 5, 16), (16,)), ((2, 5, 16), (5, 16)), ((3, 7), (7,))])
@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_layer_norm(shape, normalized, affine, dtype):
    x = (torch.randn(shape) * 3 + 1).to(dtype)
    w = torch.randn(normalized).to(dtype) if affine else None
    b = torch.randn(normalized).to(dtype) if affine else None
    lw = w.to(DEV) if affine else None
    lb = b.to(DEV) if affine else None
    close(F.layer_norm(x.to(DEV), normalized, lw, lb, 1e-5), F.layer_norm(x, normalized, w, b, 1e-5), dtype)
    got = torch.native_layer_norm(x.to(DEV), normalized, lw, lb, 1e-5)
    want = torch.native_layer_norm(x, normalized, w, b, 1e-5)
    for g, wt in zip(got, want):
        close(g, wt, dtype)


def test_layer_norm_backward_matches_eager():
    x = torch.randn(6, 24, requires_grad=True)
    ln = torch.nn.LayerNorm(24)
    lln = torch.nn.LayerNorm(24)
    lln.load_state_dict(ln.state_dict())
    lln.to(DEV)
    lx = x.detach().to(DEV).requires_grad_()
    (ln(x) ** 2).sum().backward()
    (lln(lx) ** 2).sum().backward()
    close(lx.grad, x.grad)
    close(lln.weight.grad, ln.weight.grad)


_FUSION_PROGRAM = r"""
import torch, torch.nn.functional as F, lazyjit
x = torch.randn(64, 128).to("lazyjit"); r = torch.randn(64, 128).to("lazyjit")
w = torch.randn(128).to("lazyjit"); b = torch.randn(128).to("lazyjit")
lazyjit.sync()
{body}
lazyjit.sync()
"""


def kernels_of(tmp_path, body):
    env = dict(os.environ, LAZYJIT_DUMP=str(tmp_path))
    subprocess.run([sys.executable, "-c", _FUSION_PROGRAM.format(body=body)], check=True, env=env)
    plans = glob.glob(str(tmp_path / "*.plan.txt"))
    assert len(plans) == 1, plans
    return [l for l in open(plans[0]).read().splitlines() if l.startswith("fused_")]


def test_softmax_is_one_row_kernel(tmp_path):
    ks = kernels_of(tmp_path, "y = F.softmax(x, -1)")
    assert len(ks) == 1 and "reduce_rank=1" in ks[0], ks


def test_residual_plus_layer_norm_is_one_row_kernel(tmp_path):
    ks = kernels_of(tmp_path, "y = F.layer_norm(x + r, (128,), w, b)")
    assert len(ks) == 1 and "reduce_rank=1" in ks[0], ks


# --- long rows: at least as accurate as eager's cascaded sum -----------------------
# A float sum's error must not grow with its length: each result is at most as
# far from the float64 sum as eager's (or one float32 ulp of it, which rounding
# the exact sum to float32 can cost).

def ulp32(v):
    v = abs(float(v))
    return float(torch.tensor(v).nextafter(torch.tensor(float("inf"))) - torch.tensor(v))


def assert_as_accurate_as_eager(lazy, eager, exact, what):
    lazy, eager = float(lazy), float(eager)
    bound = max(abs(eager - exact), ulp32(exact))
    assert abs(lazy - exact) <= bound, f"{what}: lazyjit {lazy!r} eager {eager!r} exact {exact!r}"


def test_sum_and_mean_of_ten_million_tenths():
    x = torch.full((10_000_000,), 0.1)
    exact = x.double().sum().item()
    assert_as_accurate_as_eager(x.to(DEV).sum().item(), x.sum().item(), exact, "sum")
    assert_as_accurate_as_eager(x.to(DEV).mean().item(), x.mean().item(), exact / x.numel(), "mean")
    y = torch.randn(4, 2_500_000, generator=torch.Generator().manual_seed(3)) + 0.5
    got, want, exact = y.to(DEV).sum(-1).cpu(), y.sum(-1), y.double().sum(-1)
    for i in range(4):
        assert_as_accurate_as_eager(got[i], want[i], exact[i].item(), f"row {i}")


def test_sum_of_one_expanded_to_two_to_the_31():
    # 2^31 reads of one element through stride 0: no memory, about a second.
    x = torch.ones(1)
    assert x.to(DEV).expand(2**31).sum().item() == 2.0**31 == x.expand(2**31).sum().item()


def test_softmax_of_a_ten_million_row_sums_to_one():
    x = torch.randn(10_000_000, generator=torch.Generator().manual_seed(4)) * 3
    lazy = F.softmax(x.to(DEV), 0).cpu().double().sum().item()
    eager = F.softmax(x, 0).double().sum().item()
    assert abs(lazy - 1) <= max(abs(eager - 1), 1e-6), (lazy, eager)
    close(F.softmax(x.to(DEV), 0), F.softmax(x.double(), 0).float())


def test_layer_norm_of_a_long_row():
    x = torch.randn(2, 4_000_000, generator=torch.Generator().manual_seed(5)) * 2 + 1
    shape = (x.shape[-1],)
    got = torch.native_layer_norm(x.to(DEV), shape, None, None, 1e-5)
    want = torch.native_layer_norm(x, shape, None, None, 1e-5)
    exact = torch.native_layer_norm(x.double(), shape, None, None, 1e-5)
    for name, i in (("mean", 1), ("rstd", 2)):
        g, w, e = got[i].cpu().flatten(), want[i].flatten(), exact[i].flatten()
        for r in range(2):
            assert_as_accurate_as_eager(g[r], w[r], e[r].item(), f"{name} of row {r}")
    close(got[0], exact[0].float())


@pytest.mark.parametrize("shape", [(8, 8), (3, 4, 5), (130, 70)])
@pytest.mark.parametrize("case", ["sum0", "mean02_keep", "amax1", "amin01", "sum1_keep", "t_sum0"])
def test_reductions_over_leading_dims(shape, case):
    # Reduced dims that are not the trailing ones: small inputs become a kernel
    # reading through a view that puts them last (tracer/aten_to_ir_reductions.cpp); large
    # ones stay ATen steps. Either way: eager's numbers, shapes and dtypes.
    x = torch.randn(*shape)
    rank = len(shape)
    fns = {
        "sum0": lambda a: (a * 2).sum(0) + 1,
        "mean02_keep": lambda a: a.mean((0, rank - 1), keepdim=True).exp(),
        "amax1": lambda a: a.amax(1 % rank),
        "amin01": lambda a: a.amin((0, 1)),
        "sum1_keep": lambda a: a - a.sum(0, keepdim=True) / a.shape[0],
        "t_sum0": lambda a: a.transpose(0, rank - 1).sum(0),
    }
    f = fns[case]
    torch.testing.assert_close(f(x.to("lazyjit")).cpu(), f(x), rtol=1e-5, atol=1e-5)
