"""Compiles in the background (LAZYJIT_BACKGROUND_COMPILE=on, the default):
a graph that misses every cache runs op by op through ATen while its program
compiles on a worker thread; the first sync after that takes the program.

The rest of the suite compiles in the foreground (conftest.py), so each test
here runs its own process with the worker on. Eager PyTorch is the oracle for
every result, whichever way it was computed.
"""
import json

import pytest
from conftest import run_python

ON = {"LAZYJIT_BACKGROUND_COMPILE": "on"}

PRELUDE = r"""
import json, os, sys, torch, lazyjit
torch.manual_seed(0)
def mlp(x, w1, b1, w2):
    h = torch.nn.functional.gelu(x @ w1 + b1)
    return torch.nn.functional.layer_norm(h @ w2 + x, (x.shape[-1],))
w1, b1, w2 = torch.randn(32, 64) / 6, torch.randn(64), torch.randn(64, 32) / 8
L = lambda t: t.to("lazyjit")
def counters():
    m = lazyjit.metrics()
    return {k: m[k] for k in ("compiles", "llvm_compiles", "shape_binds", "background_syncs", "op_by_op_syncs",
                              "cache_hits")}
def check(n):
    x = torch.randn(n, 32)
    got = mlp(L(x), L(w1), L(b1), L(w2)).cpu()
    torch.testing.assert_close(got, mlp(x, w1, b1, w2), rtol=1e-4, atol=1e-5)
"""


def run(body, **env):
    proc = run_python(PRELUDE + body, env_extra={**ON, **env})
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


def test_first_sync_runs_op_by_op_then_the_program_compiled_meanwhile():
    out, _ = run(r"""
check(8)
first = counters()
waited = lazyjit.wait_for_compiles()
after_wait = counters()
check(8)
print(json.dumps({"first": first, "waited": waited, "after_wait": after_wait, "end": counters()}))
""")
    assert out["first"]["background_syncs"] == 1 and out["first"]["op_by_op_syncs"] == 0, out
    assert out["waited"] in (0, 1), out  # 0 when the compile had already finished
    assert out["after_wait"]["compiles"] == 1 and out["after_wait"]["llvm_compiles"] >= 1, out
    # The second sync ran the program: no second compile, no op-by-op run.
    assert out["end"]["compiles"] == 1 and out["end"]["background_syncs"] == 1, out
    assert out["end"]["llvm_compiles"] == out["after_wait"]["llvm_compiles"], out


def test_a_sweep_of_sizes_binds_the_program_compiled_in_the_background():
    # Deterministic: the program of the first size is ready before the others.
    out, _ = run(r"""
check(8)
lazyjit.wait_for_compiles()
for n in list(range(2, 21)) + [97, 1000]:
    check(n)
print(json.dumps(counters()))
""")
    assert out["compiles"] == 1 and out["background_syncs"] == 1, out
    # 2..20 but 8, then 97 and 1000; 8 hits the program itself, cached under its key
    assert out["shape_binds"] == 20 and out["cache_hits"] == 1, out


def test_the_same_programs_and_kernels_compile_as_in_the_foreground():
    # Size 0 (empty) needs a program of its own, and so does size 1 unless its
    # program is already shape-generic (its bias add went into the GEMM:
    # gemm_epilogue), whichever thread compiles them. Each of the first three
    # sizes waits for its compile:
    # a sync of a structure whose compile is still pending runs op by op and
    # queues nothing, so on a slow machine (the whole loop done before the
    # first compile) the background run would compile fewer programs, by timing.
    body = r"""
for n in [1, 2, 0] + list(range(3, 30)):
    check(n)
    if n in (1, 2, 0):
        lazyjit.wait_for_compiles()
lazyjit.wait_for_compiles()
print(json.dumps({**counters(), "why": [r["detail"] for r in lazyjit.explain_recompiles()]}))
"""
    fg, _ = run(body, LAZYJIT_BACKGROUND_COMPILE="off")
    bg, _ = run(body)
    for k in ("compiles", "llvm_compiles"):
        assert fg[k] == bg[k], (fg, bg)
    assert fg["why"] == bg["why"], (fg, bg)
    # Each compile was queued by a sync that ran op by op meanwhile; sizes 3 on
    # are bound to a program already compiled.
    assert fg["compiles"] >= 2, fg
    assert fg["background_syncs"] == 0 and bg["background_syncs"] == bg["compiles"], (fg, bg)


def test_sizes_that_arrive_while_it_compiles_run_op_by_op_and_stay_correct():
    # Whatever the timing: every result equals eager's, one structure compiles
    # once, and each sync was either op by op, a binding or the program itself.
    out, _ = run(r"""
import random
sizes = list(range(2, 42))  # 1 would broadcast, a program of its own
random.Random(0).shuffle(sizes)
for n in sizes:
    check(n)
during = counters()
lazyjit.wait_for_compiles()
for n in sizes:
    check(n)
print(json.dumps({"during": during, "end": counters(), "n": len(sizes)}))
""")
    d, e = out["during"], out["end"]
    assert d["background_syncs"] >= 1 and d["compiles"] <= 1, out
    assert e["compiles"] == 1 and e["op_by_op_syncs"] == 0, out
    # The second pass never ran op by op.
    assert e["background_syncs"] == d["background_syncs"], out


def test_sync_log_and_recompile_log_say_what_happened():
    out, err = run(r"""
check(8)
lazyjit.wait_for_compiles()
check(8)
check(9)
print(json.dumps(counters()))
""", LAZYJIT_LOG="syncs,recompiles")
    lines = [l for l in err.splitlines() if l.startswith("lazyjit:")]
    assert any(l.startswith("lazyjit: compiling at <string>:") and "first at this site" in l and
               l.endswith("(in the background: runs op by op until ready)") for l in lines), err
    syncs = [l for l in lines if "lazyjit: sync at" in l]
    assert len(syncs) == 3, err
    assert "run op by op while compiling in the background (first at this site)" in syncs[0], syncs
    assert "compiled in the background, ran in" in syncs[1], syncs
    assert "bound to new sizes" in syncs[2], syncs


ONE_SYNC = r"""
check(8)
print(json.dumps(counters()))
"""


@pytest.mark.parametrize("env, foreground, warning", [
    ({"LAZYJIT_BACKGROUND_COMPILE": "off"}, True, None),
    ({"LAZYJIT_BACKGROUND_COMPILE": "later"}, False, "on or off"),  # a bad value: a warning, the default
    ({"LAZYJIT_DEBUG_NANS": "1"}, True, None),  # NaN checks pin values on the compiled program
], ids=["off", "bad_value", "nan_checks"])
def test_what_compiles_in_the_foreground(env, foreground, warning):
    out, err = run(ONE_SYNC, **env)
    if foreground:
        assert out["compiles"] == 1 and out["background_syncs"] == 0, out
    else:
        assert out["background_syncs"] == 1, out
    if warning:
        assert "LAZYJIT_BACKGROUND_COMPILE" in err and warning in err, err


def test_in_place_ops_on_views_and_aliases_run_op_by_op_like_eager():
    out, _ = run(r"""
def f(x, y):
    v = x[:, 1:3]
    v.mul_(2).add_(y[:, :2])
    x.t()[0].sub_(1)
    return x.sum(0), v.clone(), x
bad = []
for n in (4, 5, 6):
    a, b = torch.randn(n, 5), torch.randn(n, 5)
    want = f(a.clone(), b)
    la = L(a.clone())
    got = f(la, L(b))
    for g, w in zip(got, want):
        if not torch.allclose(g.cpu(), w, rtol=1e-5, atol=1e-6):
            bad.append(n)
    lazyjit.wait_for_compiles()
print(json.dumps({"bad": bad, **counters()}))
""")
    assert out["bad"] == [] and out["background_syncs"] >= 1, out


def test_a_failing_op_names_the_users_line_when_run_op_by_op():
    out, _ = run(r"""
x = L(torch.randn(4, 3))
idx = L(torch.tensor([0, 7]))
try:
    torch.index_select(x, 0, idx).cpu()  # LINE
    msg = None
except (RuntimeError, IndexError) as e:
    msg = str(e)
ok = L(torch.ones(3)) * 2
print(json.dumps({"msg": msg, "ok": ok.cpu().tolist(), **counters()}))
""")
    assert out["msg"] and "index" in out["msg"].lower(), out
    assert out["ok"] == [2.0, 2.0, 2.0], out


def test_exit_while_a_compile_runs_is_clean():
    # A large graph's compile is still running when the interpreter exits: the
    # worker is waited for (or its queue dropped), never killed mid-LLVM.
    # The chain contracts (sin scaled by 1/(1+i+j), a mean): rounding differences
    # between eager and compiled kernels shrink instead of growing, so eager's sum
    # is the oracle whichever way the sync ran.
    proc = run_python(r"""
import json, torch, lazyjit
torch.manual_seed(0)
def f(x):
    ys = []
    for i in range(12):
        y = x
        for j in range(40):
            y = torch.sin(y) * (1.0 / (1.0 + i + j)) + torch.tanh(y).mean(-1, keepdim=True)
        ys.append(y)
    return sum(t.sum() for t in ys)
x = torch.randn(64, 64)
s = f(x.to("lazyjit"))
got = float(s.cpu())
print(json.dumps({"got": got, "want": float(f(x)), "background_syncs": lazyjit.metrics()["background_syncs"]}))
""", env_extra=ON)
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["got"] == pytest.approx(out["want"], rel=1e-4, abs=1e-3), out
    assert out["background_syncs"] >= 1, out
    assert "terminate" not in proc.stderr and "Segmentation" not in proc.stderr, proc.stderr


def test_a_process_that_exits_at_once_still_leaves_its_programs_on_disk(tmp_path):
    # Programs compiled in the background go to the on-disk cache like any
    # other: a process that exits right after its syncs finishes the compiles
    # still queued (their entries outlive it), and the next process loads
    # every program and compiles nothing.
    body = r"""
def other(x):
    return (x.softmax(-1) * 3).sum(0)
for n in (8, 9):
    check(n)
    x = torch.randn(n, 16)
    torch.testing.assert_close(other(L(x)).cpu(), other(x))
print(json.dumps(counters()))
"""
    env = {"LAZYJIT_CACHE": "on", "LAZYJIT_CACHE_DIR": str(tmp_path / "cache")}
    cold, _ = run(body, **env)
    warm, _ = run(body, **env)
    assert cold["background_syncs"] >= 2, cold
    assert warm["compiles"] == 0 and warm["background_syncs"] == 0, (cold, warm)


def test_lazyjit_cache_why_miss_reads_background_compiles(tmp_path):
    import os
    import subprocess
    from conftest import ROOT
    _, err = run(r"""
for n in (1, 2, 0):
    check(n)
    lazyjit.wait_for_compiles()
print(json.dumps(counters()))
""", LAZYJIT_LOG="recompiles", LAZYJIT_DYNAMIC="off")
    log = tmp_path / "recompiles.log"
    log.write_text(err)
    tool = os.path.join(ROOT, "build", "lazyjit-cache")
    p = subprocess.run([tool, "why-miss", str(log), "--json"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["compiles"] == 3 and len(out["sites"]) == 1, out
    site = out["sites"][0]
    assert site["kinds"] == {"first at this site": 1, "new shapes": 2}, site
    assert site["varying_dims"] == {"input 0 dim 0": [0, 1, 2]}, site


def test_op_by_op_pow_of_a_python_scalar_is_eagers_bit_for_bit():
    # Run op by op, x ** 2.0 is pow(Tensor, Scalar) as in eager, whose special
    # cases (x*x, sqrt, rsqrt, ...) pow(Tensor, Tensor) lacks: an ulp off, and
    # nan against inf at (-inf) ** 0.5.
    out, _ = run(r"""
x = torch.cat([torch.randn(4000) * 3, torch.tensor([0.0, -0.0, float("inf"), float("-inf"), float("nan")])])
bad = {}
for e in (2, 3, -2, -1, 0.5, -0.5, 1.7, 0, 1):
    got, want = L(x).pow(e).cpu(), x.pow(e)
    n = int((~((got == want) | (got.isnan() & want.isnan()))).sum())
    if n:
        bad[str(e)] = n
print(json.dumps({"bad": bad, **counters()}))
""")
    assert out["bad"] == {} and out["background_syncs"] >= 1, out


def test_the_compiler_warm_up_at_start_keeps_no_kernel_and_counts_nothing():
    # The runtime's worker sets LLVM up when the runtime starts (a tanh kernel
    # compiled and dropped): no counter moves, and a program that needs the very
    # same kernel still compiles it.
    out, _ = run(r"""
import time
x = torch.randn(64)
lx = L(x)  # the first op: the runtime starts, its worker warms the compiler up
time.sleep(1.0)
before = counters()
got = torch.tanh(lx).cpu()
lazyjit.wait_for_compiles()
m = lazyjit.metrics()
print(json.dumps({"before": before, "llvm": m["llvm_compiles"], "hits": m["kernel_hits"],
                  "same": torch.equal(got, torch.tanh(x))}))
""")
    assert all(v == 0 for v in out["before"].values()), out
    assert out["llvm"] == 1 and out["hits"] == 0 and out["same"], out
