"""The gemm_epilogue pass (lowering/gemm_epilogue.h): a GEMM's bias,
activation and residual go into the ATen call (addmm, _addmm_activation) when
nothing else reads the product, and results stay eager's.

On the CPU only mm + bias -> addmm is on by default (the rest leaves oneDNN's
GEMM, measured slower: bench/gemm_epilogue.py); LAZYJIT_TEST_GEMM_EPILOGUE=all
turns every rewrite on here. The CPU's _addmm_activation(use_gelu=True) is the
erf GELU, so on the CPU that one is fused and the tanh one is not (on CUDA it is
the other way round: tests/gpu/test_gemm_epilogue_cuda.py)."""
import glob

import pytest
import torch

from conftest import run_python

ALL = {"LAZYJIT_TEST_GEMM_EPILOGUE": "all"}

PRELUDE = r"""
import sys, torch, torch.nn.functional as F, lazyjit
torch.manual_seed(0)
def lz(*ts): return [t.to("lazyjit") for t in ts]
"""


def run(tmp_path, body, env=ALL, name="p"):
    """Runs PRELUDE + body (which sets `got` and `want`, lists of tensors) with
    LAZYJIT_DUMP; returns the graphs after gemm_epilogue (one text) and the results."""
    d = tmp_path / name
    d.mkdir()
    out = tmp_path / f"{name}.pt"
    code = PRELUDE + body + f"\ntorch.save([[t.cpu() for t in got], want], {str(out)!r})\n"
    run_python(code, dict(env, LAZYJIT_DUMP=str(d)), timeout=240)
    graphs = "".join(open(p).read() for p in sorted(glob.glob(str(d / "*gemm_epilogue.txt"))))
    got, want = torch.load(out)
    return graphs, got, want


def close(got, want, dtype=torch.float32):
    tol = dict(rtol=2e-2, atol=2e-2) if dtype == torch.bfloat16 else dict(rtol=1e-4, atol=1e-4)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, **tol)


# --- each rewrite happens where it should -----------------------------------

def test_mm_plus_bias_becomes_addmm_by_default(tmp_path):
    graphs, got, want = run(tmp_path, r"""
x, w, b = torch.randn(64, 32), torch.randn(32, 48), torch.randn(48)
got = [x_ @ w_ + b_ for x_, w_, b_ in [lz(x, w, b)]]
want = [x @ w + b]
""", env={})
    assert "aten::addmm" in graphs and "aten::mm" not in graphs and " = add[" not in graphs, graphs
    close(got, want)


def test_linear_relu_becomes_addmm_activation(tmp_path):
    graphs, got, want = run(tmp_path, r"""
x, w, b = torch.randn(64, 32), torch.randn(48, 32), torch.randn(48)
got = [F.relu(F.linear(*lz(x, w, b)))]
want = [F.relu(F.linear(x, w, b))]
""")
    assert '"aten::_addmm_activation", $0, $1, $2, $3, $4, false' in graphs, graphs
    assert " = relu[" not in graphs and "aten::addmm" not in graphs, graphs
    close(got, want)


def test_mm_bias_relu_chain_is_one_op(tmp_path):
    graphs, got, want = run(tmp_path, r"""
x, w, b = torch.randn(64, 32), torch.randn(32, 48), torch.randn(48)
def f(x, w, b): return (x @ w + b).relu()
got = [f(*lz(x, w, b))]
want = [f(x, w, b)]
""")
    assert graphs.count("aten::") == 1 and "aten::_addmm_activation" in graphs, graphs
    close(got, want)


def test_cpu_fuses_the_gelu_its_addmm_activation_computes(tmp_path):
    # erf GELU: fused (use_gelu=true); tanh GELU: left to the fused kernel.
    graphs, got, want = run(tmp_path, r"""
x, w, b = torch.randn(64, 32), torch.randn(48, 32), torch.randn(48)
got = [F.gelu(F.linear(*lz(x, w, b)))]
want = [F.gelu(F.linear(x, w, b))]
""")
    assert '"aten::_addmm_activation", $0, $1, $2, $3, $4, true' in graphs and " = gelu[" not in graphs, graphs
    close(got, want)
    graphs, got, want = run(tmp_path, r"""
x, w, b = torch.randn(64, 32), torch.randn(48, 32), torch.randn(48)
got = [F.gelu(F.linear(*lz(x, w, b)), approximate="tanh")]
want = [F.gelu(F.linear(x, w, b), approximate="tanh")]
""", name="tanh")
    assert "_addmm_activation" not in graphs and " = gelu_tanh[" in graphs, graphs
    close(got, want)


def test_residual_becomes_addmm_self(tmp_path):
    graphs, got, want = run(tmp_path, r"""
x, w, r = torch.randn(64, 32), torch.randn(32, 48), torch.randn(64, 48)
got = [x_ @ w_ + r_ for x_, w_, r_ in [lz(x, w, r)]]
want = [x @ w + r]
""")
    assert "aten::addmm" in graphs and " = add[" not in graphs, graphs
    close(got, want)


def test_residual_through_a_linear_on_3d_input(tmp_path):
    # nn.Linear(bias=False) on [B, T, C] records mm of the [B*T, C] view, then
    # a view back to [B, T, N]; the residual is read as [B*T, N].
    graphs, got, want = run(tmp_path, r"""
x, w = torch.randn(2, 8, 32), torch.randn(32, 32)
def f(x, w): return F.linear(x, w) + x
got = [f(*lz(x, w))]
want = [f(x, w)]
""")
    assert "aten::addmm" in graphs and " = add[" not in graphs, graphs
    close(got, want)


# --- and not where it should not --------------------------------------------

@pytest.mark.parametrize("case,expr", [
    ("other_reader", "y = x @ w; out = [y + b, y * 2]"),
    ("bias_2d", "out = [x @ w + b.view(1, -1)]"),
    ("bias_strided", "out = [x @ w + bb[::2]]"),
    ("dtype_differs", "out = [x.bfloat16() @ w.bfloat16() + b]"),
])
def test_no_rewrite(tmp_path, case, expr):
    graphs, got, want = run(tmp_path, r"""
x, w, b, bb = torch.randn(64, 32), torch.randn(32, 48), torch.randn(48), torch.randn(96)
def f(x, w, b, bb):
    EXPR
    return out
got = f(*lz(x, w, b, bb))
want = f(x, w, b, bb)
""".replace("EXPR", expr))
    assert "aten::mm" in graphs and "aten::addmm" not in graphs, graphs
    close(got, want, torch.bfloat16 if case == "dtype_differs" else torch.float32)


def test_pass_can_be_turned_off(tmp_path):
    graphs, _, _ = run(tmp_path, r"""
x, w, b = torch.randn(64, 32), torch.randn(32, 48), torch.randn(48)
got = [x_ @ w_ + b_ for x_, w_, b_ in [lz(x, w, b)]]
want = [x @ w + b]
""", env=dict(ALL, LAZYJIT_DISABLE_PASSES="gemm_epilogue"))
    assert graphs == ""  # the pass did not run, so it was not dumped


# --- training: forward and backward match eager -----------------------------

TRAIN = r"""
DT = torch.DTYPE
def step(dev):
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(32, 64), ACT, torch.nn.Linear(64, 32)).to(DT).to(dev)
    proj = torch.nn.Linear(32, 32, bias=False).to(DT).to(dev)
    x = torch.randn(4, 8, 32).to(DT).to(dev).requires_grad_()
    h = x + mlp(x)                     # Linear + activation, residual after a biased Linear
    y = h + proj(h)                    # residual block: mm + r through the [B, T, C] view
    z = torch.nn.functional.relu(y.reshape(-1, 32) @ proj.weight.t())  # mm |> relu: no bias, not fused
    (y.square().mean() + z.mean()).backward()
    return [y.detach(), z.detach(), x.grad] + [p.grad for p in list(mlp.parameters()) + list(proj.parameters())]
got = step("lazyjit")
lazyjit.sync()
want = step("cpu")
"""


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("act", ["torch.nn.ReLU()", "torch.nn.GELU()", "torch.nn.GELU('tanh')"])
def test_training_step_matches_eager(tmp_path, dtype, act):
    body = TRAIN.replace("DTYPE", str(dtype).split(".")[1]).replace("ACT", act)
    graphs, got, want = run(tmp_path, body)
    close(got, want, dtype)
    if act == "torch.nn.ReLU()":
        # relu's backward reads relu's result, not the GEMM's: the forward fuses.
        assert "aten::_addmm_activation" in graphs, graphs
