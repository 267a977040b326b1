"""The lowering pipeline on real programs: each named pass is dumped, common
subexpressions and identity casts are gone from the compiled graph, the buffer
plan releases intermediates, and turning passes off changes no result."""
import glob
import os

import torch

from conftest import run_python

PROGRAM = r"""
import sys, torch, torch.nn.functional as F, lazyjit
torch.manual_seed(0)
x = torch.randn(256, 512); w = torch.randn(512, 512) / 512 ** 0.5
lx, lw = x.to("lazyjit"), w.to("lazyjit")
def f(x, w):
    a = torch.tanh(x) * 2 + torch.tanh(x) * 2       # the same subexpression twice
    h = a.to(torch.float64).to(torch.float32)      # a round trip through a wider type
    m = (h @ w).relu() @ w                          # library steps with dead intermediates
    return F.softmax(m, -1) + torch.sigmoid(-(-m))
got = f(lx, lw).cpu()
torch.save([got, f(x, w)], sys.argv[1] if len(sys.argv) > 1 else "/dev/null")
"""


# PROGRAM chains two 512-deep GEMMs into a softmax, and eager itself is not
# reproducible across processes on it: in 1 process of 40, eager's result
# differed by up to 3.2e-5 (1e-4 relative, ~40% of the elements) while
# lazyjit's was bitwise the same in all 40 (MKL's run-to-run variation). Anything
# a pass got wrong would be far larger.
GEMM_CHAIN_TOL = dict(rtol=1e-3, atol=1e-4)


def run(tmp_path, name, **env):
    d = tmp_path / name
    d.mkdir()
    out = tmp_path / f"{name}.pt"
    run_python(PROGRAM.replace('sys.argv[1] if len(sys.argv) > 1 else "/dev/null"', repr(str(out))),
               dict(env, LAZYJIT_DUMP=str(d)), timeout=240)
    got, want = torch.load(out)
    return d, got, want


def final_graph(d):
    passes = sorted(glob.glob(str(d / "*.pass*-*.txt")))
    assert passes, os.listdir(d)
    last = max(passes, key=lambda p: int(os.path.basename(p).split(".pass")[1].split("-")[0]))
    return open(last).read()


def test_passes_are_dumped_and_simplify_the_graph(tmp_path):
    d, got, want = run(tmp_path, "on")
    torch.testing.assert_close(got, want, **GEMM_CHAIN_TOL)
    names = sorted(os.path.basename(p).split(".", 1)[1] for p in glob.glob(str(d / "*.pass*")))
    assert names == ["pass1-dce.txt", "pass2-fold.txt", "pass3-cse.txt", "pass4-dce.txt", "pass5-gemm_epilogue.txt"], names
    traced = open(glob.glob(str(d / "*.graph.txt"))[0]).read()
    final = final_graph(d)
    assert traced.count(" = tanh") == 2 and final.count(" = tanh") == 1, final
    assert traced.count(" = neg") == 2 and final.count(" = neg") == 0, final
    assert "f64" in traced and "f64" not in final, final
    plan = open(glob.glob(str(d / "*.plan.txt"))[0]).read()
    assert "  free %" in plan and "buffers: peak" in plan, plan


def test_results_do_not_depend_on_the_passes(tmp_path):
    _, on, want = run(tmp_path, "on")
    _, off, _ = run(tmp_path, "off", LAZYJIT_DISABLE_PASSES="dce,fold,cse,gemm_epilogue,fuse,buffers")
    torch.testing.assert_close(on, want, **GEMM_CHAIN_TOL)
    torch.testing.assert_close(off, want, **GEMM_CHAIN_TOL)
    torch.testing.assert_close(on, off, **GEMM_CHAIN_TOL)


ADAMW = r"""
import sys, torch, lazyjit
torch.manual_seed(0)
def run(dev):
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 8)).to(dev)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2, weight_decay=0.1)
    x = torch.randn(4, 16).to(dev)
    for _ in range(3):
        opt.zero_grad()
        m(x).square().mean().backward()
        opt.step()
        lazyjit.sync()
    return [p.detach().cpu() for p in m.parameters()]
torch.save([run("lazyjit"), run("cpu")], sys.argv[1])
"""


def run_dumped(tmp_path, program):
    """Runs `program` (which saves [lazyjit's, eager's] to sys.argv[1]) with
    LAZYJIT_DUMP; returns the dump folder and the two results."""
    d = tmp_path / "dump"
    d.mkdir()
    out = tmp_path / "p.pt"
    run_python(program.replace("sys.argv[1]", repr(str(out))), dict(LAZYJIT_DUMP=str(d)), timeout=240)
    got, want = torch.load(out)
    return d, got, want


def test_adamw_update_is_fused_not_library_steps(tmp_path):
    d, got, want = run_dumped(tmp_path, ADAMW)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)
    plans = "".join(open(p).read() for p in glob.glob(str(d / "*.plan.txt")))
    for op in ("aten::lerp", "aten::addcmul", "aten::addcdiv", "aten::mul.out"):
        assert op not in plans, plans


SWIGLU = r"""
import sys, torch, torch.nn.functional as F, lazyjit
torch.manual_seed(0)
x = torch.randn(64, 128)
wg, wu, wd = (torch.randn(o, i) / i ** 0.5 for o, i in ((344, 128), (344, 128), (128, 344)))
def mlp(x, wg, wu, wd):  # Llama's MLP: down(silu(gate(x)) * up(x))
    return F.linear(F.silu(F.linear(x, wg)) * F.linear(x, wu), wd)
got = mlp(*(t.to("lazyjit") for t in (x, wg, wu, wd))).cpu()
torch.save([got, mlp(x, wg, wu, wd)], sys.argv[1])
"""


def test_silu_of_the_gate_joins_the_product_after_the_up_projection(tmp_path):
    # silu's kernel would come between the gate and up GEMMs; it moves after the
    # up GEMM so that silu(gate) * up is one kernel and silu's result is never
    # stored (one pass over [64, 344] instead of two, and one fewer buffer).
    d, got, want = run_dumped(tmp_path, SWIGLU)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    (plan,) = [open(p).read() for p in glob.glob(str(d / "*.plan.txt"))]
    steps = [line.split()[0] if not line.startswith("aten") else line.split()[1]
             for line in plan.splitlines() if not line.startswith(" ") and not line.startswith("buffers")]
    kernels = [s for s in steps if s.startswith("fused_")]
    assert len(kernels) == 1, plan
    assert steps.index(kernels[0]) == steps.index("aten::mm", steps.index("aten::mm") + 1) + 1, plan
    header = next(line for line in plan.splitlines() if line.startswith(kernels[0]))
    assert "nodes=2" in header and len(header.split("stores=")[1].split()) == 1, plan
