"""Kernels split over threads give the same bits as on one thread, and the
elementwise work after each library call (bias, activation, residual + norm) is
one fused pass."""
import glob
import os
import subprocess
import sys

import torch

PROGRAM = r"""
import sys, torch, torch.nn.functional as F, lazyjit
torch.manual_seed(0)
x = torch.randn(512, 1024).to("lazyjit"); r = torch.randn(512, 1024).to("lazyjit")
w = torch.randn(1024).to("lazyjit"); b = torch.randn(1024).to("lazyjit")
y = 0.5 * x * (1 + torch.tanh(0.7978845608 * (x + 0.044715 * x * x * x)))   # elementwise kernel
z = F.layer_norm(y + r, (1024,), w, b)                                       # row kernel
s = F.softmax(z * 3, -1)
torch.save([y.cpu(), z.cpu(), s.cpu()], sys.argv[1])
"""


def run(tmp_path, threads):
    out = tmp_path / f"out{threads}.pt"
    env = dict(os.environ, LAZYJIT_NUM_THREADS=str(threads))
    subprocess.run([sys.executable, "-c", PROGRAM, str(out)], check=True, env=env)
    return torch.load(out)


def test_parallel_equals_single_thread_bitwise(tmp_path):
    one, two = run(tmp_path, 1), run(tmp_path, 2)
    for a, b in zip(one, two):
        assert torch.equal(a, b)


MLP = r"""
import torch, lazyjit
class Block(torch.nn.Module):
    def __init__(s, d=64):
        super().__init__()
        s.fc1 = torch.nn.Linear(d, 4 * d); s.fc2 = torch.nn.Linear(4 * d, d); s.ln = torch.nn.LayerNorm(d)
    def forward(s, x):
        return s.ln(x + s.fc2(torch.nn.functional.gelu(s.fc1(x))))
m = Block().to("lazyjit")
with torch.no_grad():
    m(torch.randn(32, 64).to("lazyjit")).cpu()
"""


def test_mlp_block_has_one_elementwise_pass_per_library_call(tmp_path):
    env = dict(os.environ, LAZYJIT_DUMP=str(tmp_path))
    subprocess.run([sys.executable, "-c", MLP], check=True, env=env)
    plans = [p for p in glob.glob(str(tmp_path / "*.plan.txt")) if os.path.getsize(p)]
    steps = [l.split()[0] if l.startswith("fused_") else l.split()[1]
             for p in plans for l in open(p).read().splitlines()
             if l.strip() and not l.startswith((" ", "buffers:"))]  # not the buffer plan
    # addmm (bias in the GEMM), GELU as one pass, addmm, then residual + layer_norm
    # as one row pass.
    assert steps == ["aten::addmm", "fused_0", "aten::addmm", "fused_1"], steps
