"""Compiled vs eager, op by op (lazyjit.check_graphs, LAZYJIT_CHECK=1).

Each sync compiles its graph with every op's result stored and re-runs every op
that generated code computed through ATen's eager kernel on the same operands.
A fault planted in one op kind's generated code (LAZYJIT_FAULT, a switch for
these tests) must be found, named with its line and kernel, and written as a
repro that `python -m lazyjit.repro DIR` and `lazyjit-repro DIR` reproduce;
correct code must never raise."""
import os
import subprocess
import sys

import pytest
import torch

import lazyjit
from conftest import DEV, PYTHON_DIR, ROOT

REPRO_TOOL = os.path.join(ROOT, "build", "lazyjit-repro")


@pytest.fixture
def check(tmp_path):
    lazyjit.check_graphs(True, str(tmp_path / "repro"))
    yield tmp_path / "repro"
    lazyjit.check_graphs(False)


def test_no_false_alarm_on_fused_chains_reductions_and_library_ops(check):
    torch.manual_seed(0)
    x, w = torch.randn(16, 64), torch.randn(64, 64)
    xl, wl = x.to(DEV), w.to(DEV)
    for dtype in (torch.float32, torch.float64, torch.bfloat16, torch.float16):
        a, b = x.to(dtype), w.to(dtype)
        al, bl = xl.to(dtype), wl.to(dtype)
        def f(a, b):
            h = torch.nn.functional.gelu(a @ b if dtype in (torch.float32, torch.float64) else a * 2)
            h = torch.nn.functional.layer_norm(h, (64,))
            s = torch.softmax(h * 0.5, -1)
            return (s.exp().log1p() * torch.tanh(h) + torch.sigmoid(h)).sum(-1), h.amax(-1), (h > 0).sum()
        for got, want in zip(f(al, bl), f(a, b)):
            torch.testing.assert_close(got.cpu(), want, atol=2e-2, rtol=2e-2)
    # A long sum (blocked, compensated in float64): eager's float32 sum is the
    # less accurate one; not a false alarm.
    big = torch.randn(1, 1 << 16) * 1e3 + 5
    torch.testing.assert_close(big.to(DEV).sum(-1).cpu(), big.sum(-1), rtol=1e-4, atol=1e-2)
    assert not check.exists(), list(check.iterdir())


@pytest.mark.parametrize("name", ["gpt2", "llama", "bert"])
def test_no_false_alarm_on_transformers_models_forward_and_backward(name, check):
    pytest.importorskip("transformers")
    from test_transformers import _batch, _pair
    eager, lazy = _pair(name)
    eager.eval(), lazy.eval()  # no dropout: the two must compute the same
    ids, labels, mask = _batch(0, name)
    want = eager(input_ids=ids, attention_mask=mask, labels=labels)
    want.loss.backward()
    got = lazy(input_ids=ids.to(DEV), attention_mask=mask.to(DEV), labels=labels.to(DEV))
    got.loss.backward()
    torch.testing.assert_close(got.logits.cpu(), want.logits, atol=1e-4, rtol=1e-4)
    for (n, p), (_, q) in zip(eager.named_parameters(), lazy.named_parameters()):
        if p.grad is not None:
            torch.testing.assert_close(q.grad.cpu(), p.grad, atol=1e-4, rtol=1e-3, msg=n)
    lazyjit.sync()
    assert not check.exists(), list(check.iterdir())


SCRIPT = r'''
import sys, torch, lazyjit
torch.manual_seed(0)
x = torch.rand(4, 16) + 0.5
y = torch.rand(4, 16) + 0.5
xl, yl = x.to("lazyjit"), y.to("lazyjit")
def f(x, y):
    return KIND_EXPR
try:
    out = f(xl, yl)   # FAULT_LINE
    got = out.cpu()
except RuntimeError as e:
    print("RAISED", e)
    sys.exit(3)
want = f(x, y)
print("MATCH" if torch.allclose(got.double(), want.double(), rtol=1e-4, atol=1e-5) else "WRONG")
'''

# Op kind -> an expression that computes it inside a fused chain.
FAULTS = {
    "mul": "(x * y + 1).exp()",
    "add": "(x * 2 + y).sqrt()",
    "exp": "torch.exp(x * 0.5) - y",
    "log": "torch.log(x + y) * 3",
    "tanh": "torch.tanh(x - y) * x",
    "sigmoid": "torch.sigmoid(x) * y + 1",
    "div": "(x / y) - 2 * x",
    "maximum": "torch.maximum(x, y) * 2",
    "where": "torch.where(x > y, x, y * 3) + 1",
    "gt": "(x > y).to(x.dtype) * x + 1",
    "silu": "torch.nn.functional.silu(x) * y",
    "reduce_sum": "(x * y).sum(-1, keepdim=True) / 3",
    "reduce_max": "(x * 2).amax(-1, keepdim=True) - y",
}


def run_script(kind, tmp_path, check=True, fault=True):
    src = SCRIPT.replace("KIND_EXPR", FAULTS[kind])
    line = src.split("\n").index("    return " + FAULTS[kind])  # 0-based: the line above, 1-based
    path = tmp_path / f"fault_{kind}.py"
    path.write_text(src)
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR, LAZYJIT_CACHE="off")
    if fault:
        env["LAZYJIT_FAULT"] = kind
    if check:
        env["LAZYJIT_CHECK"] = "1"
    p = subprocess.run([sys.executable, str(path)], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    return p, f"fault_{kind}.py:{line + 1}"


@pytest.mark.parametrize("kind", sorted(FAULTS))
def test_a_planted_fault_is_found_named_and_reproduced(kind, tmp_path):
    # Without the check the fault is silent and wrong: it is real.
    p, _ = run_script(kind, tmp_path, check=False)
    assert p.returncode == 0 and "WRONG" in p.stdout, (p.stdout, p.stderr)
    # Without the fault the check stays silent.
    p, _ = run_script(kind, tmp_path, fault=False)
    assert p.returncode == 0 and "MATCH" in p.stdout, (p.stdout, p.stderr)
    assert not (tmp_path / "lazyjit_repro").exists()
    # Both: the check names the op kind, its line and its kernel, and writes a repro.
    p, site = run_script(kind, tmp_path)
    assert p.returncode == 3, (p.stdout, p.stderr)
    msg = p.stdout
    assert "lazyjit.check" in msg and f"{kind} (op #" in msg and site in msg, msg
    assert "computed by generated kernel fused_" in msg and "differs from eager" in msg, msg
    dirs = list((tmp_path / "lazyjit_repro").iterdir())
    assert len(dirs) == 1 and str(dirs[0]) in msg, (dirs, msg)
    d = dirs[0]
    for f in ("graph.bin", "graph.txt", "input0.bin", "scalars.txt", "env.txt", "report.txt", "repro.py"):
        assert (d / f).exists(), f
    assert f"LAZYJIT_FAULT={kind}" in (d / "env.txt").read_text()
    # The repro reproduces it, in a fresh process, from the directory alone.
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAZYJIT_")}
    env["PYTHONPATH"] = PYTHON_DIR
    r = subprocess.run([sys.executable, "-m", "lazyjit.repro", str(d)], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 1 and "reproduced" in r.stdout and f"{kind} (op #" in r.stdout, (r.stdout, r.stderr)
    r = subprocess.run([sys.executable, str(d / "repro.py")], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 1 and "reproduced" in r.stdout, (r.stdout, r.stderr)
    if kind == "mul" and os.path.exists(REPRO_TOOL):
        r = subprocess.run([REPRO_TOOL, str(d)], env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 1 and "reproduced" in r.stdout and "mul (op #" in r.stdout, (r.stdout, r.stderr)


def test_a_repro_whose_bug_is_fixed_says_so(tmp_path):
    p, _ = run_script("mul", tmp_path)
    assert p.returncode == 3, (p.stdout, p.stderr)
    d = next((tmp_path / "lazyjit_repro").iterdir())
    # The "fix": the repro runs without the fault.
    (d / "env.txt").write_text("LAZYJIT_CACHE=off\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAZYJIT_")}
    env["PYTHONPATH"] = PYTHON_DIR
    r = subprocess.run([sys.executable, "-m", "lazyjit.repro", str(d)], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0 and "no mismatch" in r.stdout, (r.stdout, r.stderr)


def test_a_broken_repro_directory_is_a_clear_error(tmp_path):
    d = tmp_path / "r"
    d.mkdir()
    (d / "env.txt").write_text("LAZYJIT_CACHE=off\n")
    (d / "graph.bin").write_bytes(b"LJGRxx")
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR, LAZYJIT_CACHE="off")
    r = subprocess.run([sys.executable, "-m", "lazyjit.repro", str(d)], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 2 and "graph" in r.stderr, (r.stdout, r.stderr)
    r = subprocess.run([sys.executable, "-m", "lazyjit.repro", str(tmp_path / "missing")], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "not a repro directory" in r.stderr, (r.stdout, r.stderr)
    # The C++ runner: the same exit status, no re-execution for a directory it cannot read.
    assert os.path.exists(REPRO_TOOL), REPRO_TOOL
    for bad in (d, tmp_path / "missing"):
        r = subprocess.run([REPRO_TOOL, str(bad)], env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 2 and ("graph" in r.stderr or "cannot read" in r.stderr), (r.stdout, r.stderr)
