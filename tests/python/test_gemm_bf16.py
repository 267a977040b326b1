"""bfloat16 GEMMs of compiled programs (executor/gemm.h): 1 to 8 rows against a
Linear's weight (decoding's GEMVs and a short prompt's prefill) run lazyjit's
small GEMM kernel in bf16 (executor/small_gemm.h: the weight widened in
registers, float32 sums, one rounding to bf16); others keep ATen's op. A bmm
of a single batch (a Linear on a slice matmul cannot fold: the last token of a
prefill through lm_head) runs as an mm. Eager PyTorch is the oracle: the same
math (float32 sums of bf16 products, one rounding) in another summation
order, so within a bf16 ulp.

lazyjit.metrics()["timings"]["small gemm bf16"]["count"] counts the bf16 GEMMs
of the small kernel.
"""
import json

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

import lazyjit
from conftest import cpu_has, run_python

DEV = "lazyjit"
needs_avx2 = pytest.mark.skipif(not (cpu_has("avx2") and cpu_has("fma")),
                                reason="the small GEMM needs AVX2 and FMA")


def count(name):
    return lazyjit.metrics()["timings"].get(name, {}).get("count", 0)


def on_device(fn, *args):
    """fn on lazyjit tensors, synced; (result on the CPU, bf16 small GEMMs run)."""
    before = count("small gemm bf16")
    out = fn(*[a.to(DEV) for a in args])
    lazyjit.sync()
    return out.cpu(), count("small gemm bf16") - before


def bf(*shape, scale=1.0):
    return (torch.randn(*shape) * scale).bfloat16()


def close(got, want):
    # One bf16 rounding of float32 sums in another order: within an ulp.
    assert got.dtype == want.dtype and got.shape == want.shape
    assert_close(got.float(), want.float(), rtol=8e-3, atol=1e-3)


# (name, fn, args): M rows of 1..8, K with and without vector tails (32 on
# AVX-512, 16 on AVX2), N not a multiple of the kernel's 4-row blocks.
SMALL = [
    ("a token's MLP up projection", lambda x, w: x @ w.t(), (bf(1, 896), bf(4864, 896))),
    ("a token's down projection", lambda x, w: x @ w.t(), (bf(1, 4864), bf(896, 4864))),
    ("F.linear with bias (addmm)", lambda x, w, b: F.linear(x, w, b), (bf(1, 896), bf(128, 896), bf(128))),
    ("2 rows, K below one vector", lambda x, w: x @ w.t(), (bf(2, 5), bf(9, 5))),
    ("3 rows, K = 33, N = 37", lambda x, w: x @ w.t(), (bf(3, 33), bf(37, 33))),
    ("5 rows with bias, K = 100", lambda x, w, b: F.linear(x, w, b), (bf(5, 100), bf(61, 100), bf(61))),
    ("7 rows, K = 257", lambda x, w: x @ w.t(), (bf(7, 257), bf(130, 257))),
    ("8 rows of a 3-d input (a prompt's tokens)", lambda x, w: F.linear(x, w), (bf(1, 8, 896), bf(1000, 896))),
    ("a sliced weight (rows with gaps)", lambda x, w: x @ w[:, :128].t(), (bf(1, 128), bf(300, 256))),
    ("strided rows of x", lambda x, w: x[:, :100] @ w.t(), (bf(4, 160), bf(50, 100))),
    ("then a fused epilogue", lambda x, w: torch.tanh(x @ w.t()) * 2, (bf(1, 256), bf(688, 256))),
]


@needs_avx2
@pytest.mark.parametrize("name,fn,args", SMALL, ids=[s[0] for s in SMALL])
def test_bf16_decode_sized_gemms_run_the_small_gemm_and_match_eager(name, fn, args):
    torch.manual_seed(0)
    got, n = on_device(fn, *args)
    close(got, fn(*args))
    assert n == 1, f"{name}: {n} bf16 small GEMMs"


# bf16 GEMMs that keep ATen's op (oneDNN, as eager): each still matches eager.
KEPT = [
    ("9 rows", lambda x, w: x @ w.t(), (bf(9, 64), bf(40, 64))),
    ("a row-major mat2 (x @ w)", lambda x, w: x @ w, (bf(1, 256), bf(256, 300))),
    ("addmm with beta != 1", lambda b, x, w: torch.addmm(b, x, w.t(), beta=0.5), (bf(40), bf(1, 64), bf(40, 64))),
    ("addmm with a 2-d residual", lambda r, x, w: torch.addmm(r, x, w.t()), (bf(1, 40), bf(1, 64), bf(40, 64))),
]


@pytest.mark.parametrize("name,fn,args", KEPT, ids=[k[0] for k in KEPT])
def test_other_bf16_gemms_keep_atens_op(name, fn, args):
    got, n = on_device(fn, *args)
    close(got, fn(*args))
    assert n == 0, f"{name}: {n} bf16 small GEMMs"


@needs_avx2
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_one_batch_bmm_runs_as_an_mm(dtype):
    # A Linear on the last token of a prompt (lm_head in a prefill): matmul
    # cannot fold the [1, 1, K] slice of a [1, T, K] tensor, and records a bmm
    # against the weight expanded to [1, K, N].
    h, w = torch.randn(1, 8, 96).to(dtype), torch.randn(300, 96).to(dtype)
    fn = lambda h, w: F.linear(h[:, -1:, :], w)  # noqa: E731
    small = count("small gemm")
    got, _ = on_device(fn, h, w)
    want = fn(h, w)
    if dtype == torch.bfloat16:
        close(got, want)
    else:
        assert_close(got, want, rtol=1e-5, atol=1e-4)
    assert got.stride() == want.contiguous().stride()
    assert count("small gemm") - small == 1


def test_bmm_of_several_batches_keeps_atens_op():
    a, b = bf(3, 4, 32), bf(3, 32, 20)
    got, n = on_device(torch.bmm, a, b)
    close(got, torch.bmm(a, b))
    assert n == 0


@needs_avx2
def test_backend_on_cpu_tensors_runs_the_bf16_small_gemm():
    # torch.compile(backend="lazyjit") on CPU tensors: a bf16 MLP block at 1..8
    # tokens, each equal to eager within a bf16 ulp.
    torch.manual_seed(1)
    mlp = torch.nn.Sequential(torch.nn.Linear(96, 200), torch.nn.SiLU(), torch.nn.Linear(200, 96, bias=False))
    mlp = mlp.bfloat16().eval()
    fn = torch.compile(mlp, backend="lazyjit", dynamic=False)
    for rows in (1, 2, 5, 8):
        x = bf(1, rows, 96)
        before = count("small gemm bf16")
        with torch.no_grad():
            got, want = fn(x), mlp(x)
        close(got, want)
        assert count("small gemm bf16") - before == 2, rows


def test_small_gemm_off_keeps_atens_bf16_op_bit_for_bit():
    out = run_python(r"""
import json, torch, lazyjit
torch.manual_seed(0)
x, w = torch.randn(1, 256).bfloat16(), torch.randn(688, 256).bfloat16()
got = (x.to("lazyjit") @ w.to("lazyjit").t()).cpu()
print(json.dumps({"same": torch.equal(got, x @ w.t()),
                  "small": lazyjit.metrics()["timings"].get("small gemm bf16", {}).get("count", 0)}))
""", env_extra={"LAZYJIT_BACKGROUND_COMPILE": "off", "LAZYJIT_CACHE": "off", "LAZYJIT_SMALL_GEMM": "off"})
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert r == {"same": True, "small": 0}, r
