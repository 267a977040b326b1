"""The gemm_epilogue pass under LAZYJIT_TARGET=cuda (on by default there):
Linear + ReLU / GELU(tanh) become aten::_addmm_activation (cuBLASLt's RELU_BIAS
/ GELU_BIAS epilogues), mm + r becomes addmm(r); forward and backward match
CUDA eager, float32 and bfloat16. The erf GELU is not fused on CUDA (its
_addmm_activation computes the tanh one). Skipped without a GPU."""
import glob
import os
import subprocess
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PROGRAM = r"""
import sys, torch, lazyjit
DT, ACT = torch.DTYPE, ACTIVATION
def step(dev):
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(256, 1024), ACT, torch.nn.Linear(1024, 256)).to(DT).to(dev)
    proj = torch.nn.Linear(256, 256, bias=False).to(DT).to(dev)
    x = torch.randn(4, 64, 256, device="cuda").to(DT).to(dev).requires_grad_()
    h = x + mlp(x)
    y = h + proj(h)                      # mm + r through the [B, T, C] view
    with torch.no_grad():
        fwd = torch.nn.functional.relu(mlp[0](x.detach()))  # forward only: relu fused
    (y.float().square().mean()).backward()
    return [y.detach(), fwd, x.grad] + [p.grad for p in list(mlp.parameters()) + list(proj.parameters())]
got = [t.to("cuda") for t in step("lazyjit")]
want = step("cuda")
torch.save([[t.cpu() for t in got], [t.cpu() for t in want]], OUT)
"""


def run(tmp_path, dtype, act):
    d = tmp_path / "dump"
    d.mkdir()
    out = tmp_path / "out.pt"
    code = (PROGRAM.replace("DTYPE", str(dtype).split(".")[1]).replace("ACTIVATION", act)
            .replace("OUT", repr(str(out))))
    env = dict(os.environ, LAZYJIT_TARGET="cuda", LAZYJIT_CACHE="off", LAZYJIT_BACKGROUND_COMPILE="off",
               LAZYJIT_DUMP=str(d), PYTHONPATH=os.path.join(ROOT, "python"))
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    graphs = "".join(open(p).read() for p in glob.glob(str(d / "*gemm_epilogue.txt")))
    got, want = torch.load(out)
    return graphs, got, want


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("act", ["torch.nn.ReLU()", "torch.nn.GELU('tanh')", "torch.nn.GELU()"])
def test_cuda_epilogues_match_eager(tmp_path, dtype, act):
    graphs, got, want = run(tmp_path, dtype, act)
    # TF32 off by default in both; bf16 rounds the epilogue once instead of twice.
    tol = dict(rtol=3e-2, atol=3e-2) if dtype == torch.bfloat16 else dict(rtol=1e-3, atol=1e-3)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, **tol)
    assert '"aten::_addmm_activation", $0, $1, $2, $3, $4, false' in graphs, graphs  # the relu forward
    if act == "torch.nn.GELU()":
        assert ", true]" not in graphs, graphs  # erf GELU: not CUDA's _addmm_activation
    assert "aten::addmm" in graphs  # the biases, and the residual as addmm's self
