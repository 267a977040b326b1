"""Big float32 GEMMs of compiled programs (aten::mm, aten::addmm) run through
oneDNN's inner product (executor/gemm.h), decode-sized ones (1-4 rows against a
Linear's weight) through lazyjit's small GEMM kernel (executor/small_gemm.h);
everything else, and every GEMM of an op-by-op run, stays ATen's own op. Eager
PyTorch is the oracle: within float32 rounding for oneDNN and the small GEMM
(another summation order), bit for bit for ATen's.

lazyjit.metrics()["timings"]["onednn gemm"]["count"] counts the GEMMs oneDNN ran,
["small gemm"] those of the small GEMM kernel.
"""
import json

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

import lazyjit
from conftest import cpu_has, run_python

DEV = "lazyjit"


def small_gemms():
    return lazyjit.metrics()["timings"].get("small gemm", {}).get("count", 0)


def onednn_gemms():
    return lazyjit.metrics()["timings"].get("onednn gemm", {}).get("count", 0)


def compiled(fn, *args):
    """fn on lazyjit tensors, synced; returns (result on the CPU, GEMMs oneDNN ran)."""
    before = onednn_gemms()
    out = fn(*[a.to(DEV) for a in args])
    lazyjit.sync()
    return out.cpu(), onednn_gemms() - before


def close(got, want):
    # oneDNN sums in another order than MKL: float32 rounding of a K-term dot product.
    assert_close(got, want, rtol=1e-5, atol=1e-4)


def randn(*shape, dtype=torch.float32):
    return torch.randn(*shape, dtype=dtype)


KEPT = []
# (name, fn, args): big enough for oneDNN, in each layout a compiled graph hands it.
BIG = [
    ("x @ w.t() (a Linear's weight)", lambda x, w: x @ w.t(), (randn(256, 512), randn(384, 512))),
    ("x @ w (row-major mat2)", lambda x, w: x @ w, (randn(256, 512), randn(512, 384))),
    ("linear with bias (addmm)", lambda x, w, b: F.linear(x, w, b), (randn(256, 512), randn(384, 512), randn(384))),
    ("mm then a fused epilogue", lambda x, w: torch.relu(x @ w.t()) * 2 + 1, (randn(256, 512), randn(384, 512))),
]

# A weight's gradient (g.t() @ x: a column-major mat1) goes to oneDNN on a CPU with
# AVX-512 (faster there than the wheels' MKL, which runs AVX2 code on AMD CPUs) and
# stays ATen's without it (executor/gemm.cpp).
WEIGHT_GRAD = ("g.t() @ x (a weight gradient: column-major mat1)", lambda g, x: g.t() @ x,
               (randn(512, 256), randn(512, 384)))
(BIG if cpu_has("avx512f") else KEPT).append(WEIGHT_GRAD)


@pytest.mark.parametrize("name,fn,args", BIG, ids=[b[0] for b in BIG])
def test_big_float32_gemms_run_through_onednn_and_match_eager(name, fn, args):
    torch.manual_seed(0)
    got, n = compiled(fn, *args)
    close(got, fn(*args))
    assert n == 1, f"{name}: oneDNN ran {n} GEMMs"


# Calls that keep ATen's op: each still matches eager.
KEPT += [
    ("5 rows: too many for the small GEMM, too few multiply-adds for oneDNN",
     lambda x, w: x @ w.t(), (randn(5, 256), randn(688, 256))),
    ("a decode-sized GEMM with a row-major mat2", lambda x, w: x @ w, (randn(1, 256), randn(256, 688))),
    ("float64", lambda x, w: x @ w.t(), (randn(256, 512, dtype=torch.float64), randn(384, 512, dtype=torch.float64))),
    ("bfloat16", lambda x, w: x @ w.t(),
     (randn(256, 512).bfloat16(), randn(384, 512).bfloat16())),
    ("addmm with beta != 1", lambda b, x, w: torch.addmm(b, x, w.t(), beta=0.5),
     (randn(384), randn(256, 512), randn(384, 512))),
    ("addmm with a 2-d bias", lambda b, x, w: torch.addmm(b, x, w.t()),
     (randn(256, 384), randn(256, 512), randn(384, 512))),
    ("an operand with gaps between rows and columns", lambda x, w: x[:, ::2] @ w.t(),
     (randn(256, 1024), randn(384, 512))),
    ("an empty dim", lambda x, w: x @ w.t(), (randn(0, 512), randn(384, 512))),
]


@pytest.mark.parametrize("name,fn,args", KEPT, ids=[k[0] for k in KEPT])
def test_other_gemms_keep_atens_op(name, fn, args):
    got, n = compiled(fn, *args)
    want = fn(*args)
    if want.dtype == torch.bfloat16:
        assert_close(got, want, rtol=1.6e-2, atol=1e-1)
    else:
        assert torch.equal(got, want), f"{name}: not eager's bits"
    assert n == 0, f"{name}: oneDNN ran {n} GEMMs"


# Decode-sized GEMMs against a Linear's weight: lazyjit's small GEMM kernel
# (executor/small_gemm.h), float32 sums in another order than MKL's.
SMALL = [
    ("a token's projection (x @ w.t())", lambda x, w: x @ w.t(), (randn(1, 256), randn(688, 256))),
    ("F.linear with bias (addmm)", lambda x, w, b: F.linear(x, w, b), (randn(1, 688), randn(256, 688), randn(256))),
    ("4 rows, K with a tail, N not a multiple of 4", lambda x, w: x @ w.t(), (randn(4, 100), randn(37, 100))),
    ("3 rows of a 3-d input (a batch of tokens)", lambda x, w: x @ w.t(), (randn(3, 1, 256), randn(1000, 256))),
    ("K below one vector", lambda x, w: x @ w.t(), (randn(2, 5), randn(9, 5))),
    ("a sliced weight (rows with gaps)", lambda x, w: x @ w[:, :128].t(), (randn(1, 128), randn(300, 256))),
    ("then a fused epilogue", lambda x, w: torch.tanh(x @ w.t()) * 2, (randn(1, 256), randn(688, 256))),
]


@pytest.mark.skipif(not (cpu_has("avx2") and cpu_has("fma")), reason="the small GEMM needs AVX2 and FMA")
@pytest.mark.parametrize("name,fn,args", SMALL, ids=[k[0] for k in SMALL])
def test_decode_sized_gemms_run_the_small_gemm_and_match_eager(name, fn, args):
    before = small_gemms()
    got, n = compiled(fn, *args)
    close(got, fn(*args))
    assert n == 0, f"{name}: oneDNN ran {n} GEMMs"
    assert small_gemms() - before == 1, f"{name}: {small_gemms() - before} small GEMMs"


def test_small_gemm_off_keeps_atens_op_bit_for_bit():
    out = run_python(r"""
import json, torch, lazyjit
torch.manual_seed(0)
x, w = torch.randn(1, 256), torch.randn(688, 256)
got = (x.to("lazyjit") @ w.to("lazyjit").t()).cpu()
print(json.dumps({"same": torch.equal(got, x @ w.t()),
                  "small": lazyjit.metrics()["timings"].get("small gemm", {}).get("count", 0)}))
""", env_extra={"LAZYJIT_BACKGROUND_COMPILE": "off", "LAZYJIT_CACHE": "off", "LAZYJIT_SMALL_GEMM": "off"})
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert r == {"same": True, "small": 0}, r


def test_mkldnn_disabled_keeps_atens_op():
    x, w = randn(256, 512), randn(384, 512)
    torch.backends.mkldnn.enabled = False
    try:
        got, n = compiled(lambda a, b: a @ b.t(), x, w)
    finally:
        torch.backends.mkldnn.enabled = True
    assert n == 0
    assert torch.equal(got, x @ w.t())


def test_training_step_with_onednn_gemms_matches_eager():
    """Forward addmm, backward mm in both layouts, then SGD: the loss and every
    parameter after three steps match eager's."""
    def make():
        torch.manual_seed(3)
        return torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 256))

    g = torch.Generator().manual_seed(4)
    x, y = torch.randn(128, 256, generator=g), torch.randn(128, 256, generator=g)

    def train(model, x, y):
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        losses = []
        for _ in range(3):
            opt.zero_grad()
            loss = F.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.detach().cpu())
        return losses, [p.detach().cpu() for p in model.parameters()]

    before = onednn_gemms()
    got = train(make().to(DEV), x.to(DEV), y.to(DEV))
    ran = onednn_gemms() - before
    want = train(make(), x, y)
    for a, b in zip(got[0] + got[1], want[0] + want[1]):
        close(a, b)
    # per step: 2 forward addmm, fc2's input gradient, and with AVX-512 both weight
    # gradients (column-major mat1); x needs no gradient, so fc1's input gradient
    # is not computed
    assert ran == 3 * (5 if cpu_has("avx512f") else 3), f"oneDNN ran {ran} GEMMs in 3 steps"


def test_op_by_op_runs_keep_atens_gemm_bit_for_bit():
    """A graph run op by op (here past the recompile limit, eager stance) runs
    as eager does: ATen's mm, eager's bits, no oneDNN."""
    out = run_python(r"""
import json, torch, lazyjit
torch.manual_seed(0)
def f(x, w): return torch.tanh(x @ w.t()) + 1
def on_lazyjit(x, w): return f(x.to("lazyjit"), w.to("lazyjit")).cpu()   # one sync site
w = torch.randn(384, 512)
on_lazyjit(torch.randn(8, 512), w)   # the one compile (too small for oneDNN)
res = []
for rows in (256, 300):   # new shapes: op by op
    x = torch.randn(rows, 512)
    res.append(torch.equal(on_lazyjit(x, w), f(x, w)))
m = lazyjit.metrics()
print(json.dumps({"same": res, "op_by_op_syncs": m["op_by_op_syncs"],
                  "onednn": m["timings"].get("onednn gemm", {}).get("count", 0)}))
""", env_extra={"LAZYJIT_BACKGROUND_COMPILE": "off", "LAZYJIT_DYNAMIC": "off", "LAZYJIT_RECOMPILE_LIMIT": "1",
          "LAZYJIT_ON_RECOMPILE_LIMIT": "op_by_op", "LAZYJIT_CACHE": "off"})
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert r["op_by_op_syncs"] == 2, r
    assert r["same"] == [True, True], r
    assert r["onednn"] == 0, r


# Runs in a fresh interpreter: the switch is process-wide, and PyTorch refuses
# torch.get_float32_matmul_precision() (Inductor calls it) once the legacy and
# the new precision APIs were both used in one process.
BF16_SCRIPT = r"""
import json, sys, torch, torch.nn.functional as F, lazyjit
switch = sys.argv[1]
if switch == "medium":
    torch.set_float32_matmul_precision("medium")
else:
    torch.backends.mkldnn.matmul.fp32_precision = "bf16"
torch.manual_seed(0)
x, w, b = torch.randn(256, 512), torch.randn(384, 512) / 512 ** 0.5, torch.randn(384)
def bf16_count():
    return lazyjit.metrics()["timings"].get("onednn gemm bf16", {}).get("count", 0)
def on_lazyjit(f, *args):
    n = bf16_count()
    out = f(*[a.to("lazyjit") for a in args]).cpu()
    return out, bf16_count() - n
res = {}
for name, f, args, ref in [
        ("mm", lambda x, w: torch.tanh(x @ w.t()), (x, w),
         lambda: torch.tanh((x.bfloat16() @ w.bfloat16().t()).float())),
        ("addmm", lambda x, w, b: F.linear(x, w, b) * 2, (x, w, b),
         lambda: F.linear(x.bfloat16(), w.bfloat16(), b.bfloat16()).float() * 2),
        ("row-major mat2", lambda x, w: x @ w.t().contiguous(), (x, w),
         lambda: (x.bfloat16() @ w.t().contiguous().bfloat16()).float()),
        ("mat1 with row gaps", lambda x, w: x[:, :256] @ w[:, :256].t(), (x, w),
         lambda: (x[:, :256].bfloat16() @ w[:, :256].bfloat16().t()).float()),
        ("small", lambda x, w: x @ w.t(), (x[:4], w), None)]:
    got, n = on_lazyjit(f, *args)
    fp32 = f(*args)   # eager under the same switch
    exact = f(*[a.double() for a in args]).float()  # (on AMX, eager's own GEMM under the switch is bf16)
    res[name] = {"dtype": str(got.dtype), "bf16_gemms": n,
                 "vs_fp32": (got - fp32).abs().max().item(), "vs_exact": (got - exact).abs().max().item(),
                 "vs_bf16": None if ref is None else (got - ref()).abs().max().item(),
                 "scale": fp32.abs().max().item(),
                 # share of the outputs that are bf16 values (a bf16 output widened back)
                 "bf16_valued": (got == got.bfloat16().float()).float().mean().item()}
# switched off again: float32
torch.backends.mkldnn.matmul.fp32_precision = "ieee"
got, n = on_lazyjit(lambda x, w: x @ w.t(), x, w)
res["off"] = {"bf16_gemms": n, "vs_fp32": (got - x @ w.t()).abs().max().item()}
print(json.dumps(res))
"""


@pytest.mark.skipif(not cpu_has("avx512_bf16", "amx_bf16"), reason="the CPU has no native bfloat16 (AVX512-BF16 / AMX)")
@pytest.mark.parametrize("switch", ["mkldnn.matmul.fp32_precision=bf16", "medium"])
def test_bf16_switch_runs_big_gemms_on_bfloat16_operands(switch):
    """PyTorch's opt-in to bf16 inside float32 matmuls: big GEMMs of a compiled
    program run on bfloat16 operands with float32 sums. Their results are
    float32, within bf16 tolerance of eager's float32 ones and visibly not
    float32-exact (so bf16 really ran), and as close to eager's own bf16 GEMM
    as a rounding of the output; a GEMM too small for oneDNN stays float32, and
    switching back to "ieee" gives float32 again."""
    out = run_python(BF16_SCRIPT.replace("sys.argv[1]", repr(switch)),
                     env_extra={"LAZYJIT_BACKGROUND_COMPILE": "off", "LAZYJIT_CACHE": "off"})
    r = json.loads(out.stdout.strip().splitlines()[-1])
    for name in ("mm", "addmm", "row-major mat2", "mat1 with row gaps"):
        g = r[name]
        assert g["dtype"] == "torch.float32" and g["bf16_gemms"] == 1, (name, g)
        # bf16 operands: relative error ~2^-8 of the output's scale against the
        # float64 product; float32 would be ~1e-6. (Not against eager's result:
        # with AMX, eager's mm under the switch is bf16 as well.)
        assert 1e-4 * g["scale"] < g["vs_exact"] < 2e-2 * g["scale"], (name, g)
        assert g["vs_fp32"] < 2e-2 * g["scale"], (name, g)
        # the same products as eager's bf16 GEMM, up to bf16 rounding of the output
        assert g["vs_bf16"] <= 2 ** -7 * g["scale"], (name, g)
        # With AMX, oneDNN rounds the float32 operands on its tiles and writes a
        # float32 output; otherwise (and for a weight with gaps between its rows)
        # the operands are converted first and the bf16 output is widened back.
        # ("mm" applies tanh after the GEMM, so its outputs say nothing of this.)
        if name != "mm":
            converted = not cpu_has("amx_bf16") or name == "mat1 with row gaps"
            assert (g["bf16_valued"] == 1.0) if converted else (g["bf16_valued"] < 0.1), (name, g)
    # float32: as close as float32 gets to the float64 product (eager's result
    # under the switch is no reference here: on CPUs with AMX it is bf16 too)
    assert r["small"]["bf16_gemms"] == 0 and r["small"]["vs_exact"] < 1e-4, r["small"]
    assert r["off"]["bf16_gemms"] == 0 and r["off"]["vs_fp32"] < 1e-4, r["off"]
