"""Op hooks on compiled graphs (lazyjit.add_op_hook(fn, lazy=True)).

After a compiled graph runs, a lazy hook sees each op the user recorded, in
order, with the values the compiled code computed, its index in the graph, the
line that recorded it, the kernel that computed it and its time. Hooks of three
arguments keep working; a fourth argument gets that information."""
import inspect
import os
import subprocess
import sys

import pytest
import torch

import lazyjit
from conftest import DEV, PYTHON_DIR


def line_after():
    return inspect.currentframe().f_back.f_lineno + 1


@pytest.fixture
def events():
    seen = []
    h = lazyjit.add_op_hook(lambda op, ins, outs, info: seen.append((op, ins, outs, info)), lazy=True)
    yield seen
    h.remove()


def test_each_recorded_op_with_its_compiled_values_line_and_kernel(events):
    torch.manual_seed(0)
    x, w = torch.randn(4, 8), torch.randn(8, 8)
    xl, wl = x.to(DEV), w.to(DEV)
    at = line_after()
    h = (xl * 2 + 1).relu()
    z = h @ wl
    s = torch.softmax(z, -1)
    got = s.cpu()
    want_h0 = x * 2
    want_h = (want_h0 + 1).relu()
    want = torch.softmax(want_h @ w, -1)
    torch.testing.assert_close(got, want)
    ops = [e[0] for e in events]
    assert ops[:3] == ["aten::mul.Tensor", "aten::add.Tensor", "aten::relu"], ops
    assert "aten::mm" in ops and any("softmax" in o for o in ops), ops
    by_op = {e[0]: e for e in events}
    # Values as computed, inputs and outputs.
    op, ins, outs, info = by_op["aten::mul.Tensor"]
    torch.testing.assert_close(ins[0], x)
    torch.testing.assert_close(outs[0], want_h0)
    torch.testing.assert_close(by_op["aten::relu"][2][0], want_h)
    torch.testing.assert_close(by_op["aten::mm"][2][0], want_h @ w)
    torch.testing.assert_close(events[-1][2][0], want)
    # Index, line, kernel, time.
    idx = [e[3]["index"] for e in events]
    assert idx == sorted(set(idx)) and idx[0] >= 0, idx
    assert all(e[3]["lazy"] for e in events)
    assert info["site"].endswith(f"test_lazy_hooks.py:{at}"), info
    assert by_op["aten::relu"][3]["site"].endswith(f"test_lazy_hooks.py:{at}")
    assert by_op["aten::mm"][3]["site"].endswith(f"test_lazy_hooks.py:{at + 1}")
    assert info["kernel"].startswith("fused_") and "mul" in info["kernel"], info
    assert by_op["aten::mm"][3]["kernel"].startswith("aten::mm"), by_op["aten::mm"][3]
    assert all(e[3]["duration_ms"] >= 0 and e[3]["kernel_ms"] >= e[3]["duration_ms"] for e in events)
    # The ops fused in one kernel share its time.
    assert by_op["aten::mul.Tensor"][3]["kernel"] == by_op["aten::relu"][3]["kernel"]


def test_hook_values_are_copies(events):
    x = torch.ones(3).to(DEV)
    y = x + 1
    y.cpu()
    events[-1][2][0].fill_(100)
    torch.testing.assert_close(y.cpu(), torch.full((3,), 2.0))


def test_three_argument_hooks_keep_working_and_lazy_is_opt_in():
    plain, lazy3 = [], []
    h1 = lazyjit.add_op_hook(lambda op, ins, outs: plain.append(op))
    h2 = lazyjit.add_op_hook(lambda op, ins, outs: lazy3.append(op), lazy=True)
    try:
        (torch.ones(3).to(DEV) * 3).cpu()   # lazy mode: only the lazy hook
        assert plain == [] and lazy3 == ["aten::mul.Tensor"], (plain, lazy3)
        with lazyjit.step_mode():
            torch.ones(2).to(DEV).neg()
        assert "aten::neg" in plain and "aten::neg" in lazy3
    finally:
        h1.remove()
        h2.remove()
    (torch.ones(3).to(DEV) * 3).cpu()
    assert lazy3.count("aten::mul.Tensor") == 1


def test_step_mode_events_have_duration_and_no_index():
    seen = []
    h = lazyjit.add_op_hook(lambda op, ins, outs, info: seen.append((op, info)))
    try:
        with lazyjit.step_mode():
            torch.ones(64, 64).to(DEV).exp()
    finally:
        h.remove()
    op, info = next(e for e in seen if e[0] == "aten::exp")
    assert info["lazy"] is False and info["index"] == -1 and info["duration_ms"] >= 0


def test_a_raising_hook_loses_nothing(events):
    def bad(op, ins, outs, info):
        raise ValueError("hook failed")
    h = lazyjit.add_op_hook(bad, lazy=True)
    try:
        y = torch.ones(3).to(DEV) * 5
        with pytest.raises(Exception, match="hook failed"):
            y.cpu()
    finally:
        h.remove()
    torch.testing.assert_close(y.cpu(), torch.full((3,), 5.0))
    torch.testing.assert_close((torch.ones(2).to(DEV) + 1).cpu(), torch.full((2,), 2.0))


def test_debug_level_4_prints_a_per_op_timing_table(tmp_path):
    script = tmp_path / "t.py"
    script.write_text(
        "import torch, lazyjit\n"
        "x = torch.randn(64, 64).to('lazyjit')\n"
        "for _ in range(3):\n"
        "    y = torch.tanh(x @ x) * 2 + 1\n"
        "    y.sum().item()\n")
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR, LAZYJIT_DEBUG="4", LAZYJIT_DUMP=str(tmp_path / "dump"))
    p = subprocess.run([sys.executable, str(script)], env=env, cwd=tmp_path, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr
    table = p.stderr[p.stderr.index("per-op time in compiled graphs"):]
    rows = {l.split()[0]: l.split() for l in table.splitlines()[2:] if l.strip()}
    assert rows["aten::mm"][1] == "3" and rows["aten::tanh"][1] == "3", table
    assert "t.py:4" in table and "t.py:5" in table, table
