"""The compile cache, through lazyjit.metrics(): hits, misses, what changes the key
and what must not, and key stability across processes."""
import os
import re
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

from conftest import DEV, PYTHON_DIR, ROOT, lazyjit


def counters():
    m = lazyjit.metrics()
    return m["compiles"], m["cache_hits"], m["cache_misses"]


def step(x, w, lr=0.1):
    h = torch.tanh(torch.mm(x, w) * 2 + 1)
    return (h * torch.sigmoid(h) - x.mean()) * lr


def test_repeat_step_compiles_nothing_new(fresh):
    torch.manual_seed(0)
    w = torch.randn(8, 8)
    wl = w.to(DEV)
    x0 = torch.randn(4, 8)
    assert_close(step(x0.to(DEV), wl).cpu(), step(x0, w))
    c1, h1, m1 = counters()
    assert c1 >= 1 and m1 >= 1
    assert h1 == 0
    for _ in range(4):
        x = torch.randn(4, 8)  # new values, same program
        assert_close(step(x.to(DEV), wl).cpu(), step(x, w))
    c2, h2, m2 = counters()
    assert c2 == c1, "a repeated step compiled again"
    assert m2 == m1
    assert h2 == h1 + 4 * m1  # every graph of every repeated step hits
    assert lazyjit.metrics()["graphs_executed"] == 5 * m1


def test_new_shape_misses_once_then_hits(fresh):
    w = torch.randn(8, 8)
    wl = w.to(DEV)
    step(torch.randn(4, 8).to(DEV), wl).cpu()
    c1, h1, m1 = counters()
    x = torch.randn(16, 8)
    assert_close(step(x.to(DEV), wl).cpu(), step(x, w))
    c2, h2, m2 = counters()
    # A new input shape misses, and binds the program compiled for the first.
    assert c2 == c1 and fresh.metrics()["shape_binds"] == 1, fresh.metrics()
    assert m2 > m1
    for _ in range(2):
        x = torch.randn(16, 8)
        assert_close(step(x.to(DEV), wl).cpu(), step(x, w))
    c3, h3, m3 = counters()
    assert (c3, m3) == (c2, m2)
    assert h3 > h2
    # The first shape still hits.
    step(torch.randn(4, 8).to(DEV), wl).cpu()
    assert counters()[0] == c3


@pytest.mark.parametrize("values", [
    pytest.param([0.1, 0.2, 0.05, -3.5], id="float"),
    pytest.param([2, 3, -7, 100], id="int"),
])
def test_changing_python_scalar_does_not_recompile(fresh, values):
    x = torch.randn(5, 6)
    p = torch.randn(5, 6)
    xl, pl = x.to(DEV), p.to(DEV)

    def update(p, g, lr):
        return p - g * lr + lr / 2

    compiles = []
    for lr in values:
        assert_close(update(pl, xl, lr).cpu(), update(p, x, lr))
        compiles.append(counters()[0::2])
    assert compiles[0][0] >= 1
    assert compiles == [compiles[0]] * len(values), f"scalar change recompiled: {compiles}"
    assert counters()[1] == len(values) - 1


def test_changing_scalar_in_inplace_optimizer_step(fresh):
    torch.manual_seed(1)
    p = torch.randn(10)
    g = torch.randn(10)
    pl, gl = p.to(DEV), g.to(DEV)
    for i, lr in enumerate([0.5, 0.25, 0.125, 0.0625]):
        p.add_(g, alpha=-lr)
        pl.add_(gl, alpha=-lr)
        assert_close(pl.cpu(), p)
        if i == 0:
            first = counters()[0]
    assert counters()[0] == first


@pytest.mark.parametrize("a,b", [
    pytest.param(lambda x, y: x + y, lambda x, y: x - y, id="op"),
    pytest.param(lambda x, y: x * y + x, lambda x, y: x * y + y, id="wiring"),
    pytest.param(lambda x, y: F.gelu(x), lambda x, y: F.gelu(x, approximate="tanh"), id="attr_gelu"),
    pytest.param(lambda x, y: x.sum(0), lambda x, y: x.sum(1), id="attr_dim"),
    pytest.param(lambda x, y: torch.div(x, y, rounding_mode="trunc"),
                 lambda x, y: torch.div(x, y, rounding_mode="floor"), id="attr_rounding"),
    pytest.param(lambda x, y: x.clamp(min=0), lambda x, y: x.clamp(max=0), id="clamp_bounds"),
    pytest.param(lambda x, y: x + y, lambda x, y: x + y.double(), id="dtype"),
    pytest.param(lambda x, y: x + y, lambda x, y: x + y[:1], id="shape"),
    # (x.t() + y.t() is the same program as x + y, computed in memory order; only
    # the result's strides differ, so it rightly shares the compiled program.)
    pytest.param(lambda x, y: x + y, lambda x, y: x.t() + y, id="layout"),
    pytest.param(lambda x, y: (x + y).relu(), lambda x, y: (x + y).relu().neg(), id="extra_op"),
])
def test_different_program_misses_cache(fresh, a, b):
    # (Graphs made only of ATen steps miss the cache without an LLVM compile, so
    # misses are counted here, not compiles.)
    x, y = torch.randn(4, 4), torch.randn(4, 4) + 3
    xl, yl = x.to(DEV), y.to(DEV)
    assert_close(a(xl, yl).cpu(), a(x, y))
    m1 = counters()[2]
    assert m1 >= 1
    assert_close(b(xl, yl).cpu(), b(x, y))
    c2, h2, m2 = counters()
    assert m2 > m1, "a different program hit another program's cache entry"
    # Both are now cached.
    assert_close(a(xl, yl).cpu(), a(x, y))
    assert_close(b(xl, yl).cpu(), b(x, y))
    assert counters()[0] == c2
    assert counters()[2] == m2
    assert counters()[1] > h2


def test_clear_cache_recompiles(fresh):
    x = torch.randn(6).to(DEV)
    (x * 2).exp().cpu()
    c1 = counters()[0]
    (x * 2).exp().cpu()
    assert counters()[0] == c1
    lazyjit.clear_cache()
    (x * 2).exp().cpu()
    assert counters()[0] == 2 * c1


def test_reset_metrics_zeroes_counters():
    x = torch.randn(6).to(DEV)
    (x + 1).cpu()
    torch.nonzero(x > 0).cpu()
    lazyjit.reset_metrics()
    m = lazyjit.metrics()
    for k in ("ops_traced", "graphs_executed", "compiles", "cache_hits", "cache_misses", "syncs"):
        assert m[k] == 0, k
    assert m["fallbacks"] == {}


def test_metrics_count_ops_and_syncs(fresh):
    x = torch.randn(6).to(DEV)
    lazyjit.reset_metrics()
    y = ((x + 1) * 2).relu()
    traced = lazyjit.metrics()["ops_traced"]
    assert traced >= 3
    assert lazyjit.metrics()["syncs"] == 0
    y.cpu()
    assert lazyjit.metrics()["syncs"] == 1
    assert lazyjit.metrics()["graphs_executed"] == 1


def test_metrics_report_is_readable(fresh):
    x = torch.randn(6, 6).to(DEV)
    for _ in range(3):
        (x @ x + 1).sigmoid().cpu()
    torch.nonzero(x > 0).cpu()
    m = lazyjit.metrics()
    report = lazyjit.metrics_report()
    assert isinstance(report, str)
    for key in ("compiles", "cache_hits", "cache_misses", "graphs_executed", "ops_traced", "syncs"):
        # One "name: value" (or "name = value") entry per counter, with the current value.
        assert re.search(rf"\b{key}\b\W+{m[key]}\b", report), (key, m[key], report)
    assert "aten::nonzero" in report
    assert m["cache_hits"] >= 2


# ---- keys across processes ----------------------------------------------------------

PROGRAM = """
import torch, lazyjit
torch.manual_seed({seed})
x = torch.randn(8, 16).to("lazyjit")
w = torch.randn(16, 4).to("lazyjit")
y = torch.nn.functional.gelu(x @ w * 0.5 + 1, approximate="tanh")
z = (y.sigmoid() * y).clamp(min=-1.0)
print(z.cpu().sum().item())
assert lazyjit.metrics()["compiles"] >= 1
"""

# A different program: one more op, and another attribute.
OTHER = """
import os
n = len(os.listdir(os.environ["LAZYJIT_DUMP"]))
q = (torch.nn.functional.gelu(x @ w * 0.5 + 1) * 2).sum(0)
q.cpu()
assert len(os.listdir(os.environ["LAZYJIT_DUMP"])) > n, "nothing dumped for the second program"
"""


def _start(tmp_path, name, code):
    d = tmp_path / name
    d.mkdir()
    env = dict(os.environ)
    env.pop("LAZYJIT_MODE", None)
    env["PYTHONPATH"] = PYTHON_DIR + os.pathsep + env.get("PYTHONPATH", "")
    env["LAZYJIT_DUMP"] = str(d)
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return d, proc


def test_cache_keys_stable_across_processes(tmp_path):
    # Process 1 runs PROGRAM; process 2 runs PROGRAM on other values, then OTHER.
    started = {"p1": _start(tmp_path, "p1", PROGRAM.format(seed=0)),
               "p2": _start(tmp_path, "p2", PROGRAM.format(seed=7) + OTHER)}
    names = {}
    for k, (d, proc) in started.items():
        out, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, f"{k}:\n{out}\n{err}"
        names[k] = {f for f in os.listdir(d) if f.endswith(".graph.txt")}
    assert names["p1"], "LAZYJIT_DUMP wrote no .graph.txt files"
    # The same program has the same cache keys in both processes ...
    assert names["p1"] <= names["p2"], "the same program got different cache keys in two processes"
    # ... and the other program has keys of its own.
    assert names["p2"] - names["p1"], "a different program got the same cache keys"
