"""A step as one CUDA graph launch (issue 43 part 1; targets/cuda/graph_replays.h):
under LAZYJIT_TARGET=cuda a replayable program runs as usual at its first run
with given sizes and scalars, is captured at its second and replayed from then
on. CUDA eager is the oracle at every step, with new inputs each step; a
result the user holds is never overwritten by a later replay. Which programs
cannot be graphs, rule by rule (an .item() inside among them), is checked
without a GPU: tests/executor/graph_replay_test.cpp, tests/python/test_graph_replay.py."""
import os
import subprocess
import sys

import pytest
import torch

from conftest import ROOT, assert_close

L = "lazyjit"
DEV = "cuda"
STEPS = 6


def assert_replayed(m, runs, report):
    """What the replay policy (targets/cuda/graph_replays.h) guarantees for one
    program run `runs` times with the same sizes and scalars, whatever the
    caching allocator does: a warm-up run, then a capture (replayed at once),
    then replays. An input read in place at the capture (it was at the
    warm-up's address) that later moves starts it over: a warm-up, then a new
    capture. So every run but the first warm-up is a replay, except one
    warm-up per capture after the first, and at most one more at the end (a
    move at the last run): replays >= runs - 1 - captures. Where the allocator
    places a step's inputs decides how many captures there are, not whether
    this holds."""
    captured, replays = m["cuda_graphs_captured"], m["cuda_graph_replays"]
    assert captured >= 1, report
    assert replays >= captured, report  # each capture is replayed at once
    assert replays >= runs - 1 - captured, report


def small_ops(x, y):
    # 30 small elementwise and reduction ops, as the bench's workload f.
    for _ in range(6):
        x = (x * 1.01 + y).sin()
        y = (y - x.mean(dim=1, keepdim=True)).tanh()
        x = x.relu() + 0.5
    return x, y


def test_thirty_small_ops_replay_one_graph(lazyjit):
    lazyjit.reset_metrics()
    held, inputs = [], []
    for step in range(STEPS):
        x, y = torch.randn(64, 64, device=DEV), torch.randn(64, 64, device=DEV)
        ex, ey = small_ops(x, y)
        # Every step's inputs stay alive: no step's input can be where an
        # earlier one was, so none is read in place by chance (and then moves).
        inputs.append((x, y, x.to(L), y.to(L)))
        lx, ly = small_ops(inputs[-1][2], inputs[-1][3])
        lx, ly = lx.to(DEV), ly.to(DEV)
        assert_close(lx, ex, rtol=1e-4, atol=1e-4)
        assert_close(ly, ey, rtol=1e-4, atol=1e-4)
        held.append((lx, ex))
    # Results held across later replays keep their values.
    for lx, ex in held:
        assert_close(lx, ex, rtol=1e-4, atol=1e-4)
    m = lazyjit.metrics()
    assert m["graph_not_replayable_programs"] == 0, lazyjit.metrics_report()
    # One program, run at every step.
    assert m["graph_replayable_programs"] >= 1, lazyjit.metrics_report()
    assert_replayed(m, STEPS, lazyjit.metrics_report())


def test_held_lazy_output_is_not_overwritten(lazyjit):
    outs, expected = [], []
    for step in range(STEPS):
        x = torch.randn(32, 32, device=DEV)
        outs.append((x.to(L) * 3 + 1).exp())  # held as a lazyjit tensor across later steps
        outs[-1].to(DEV)  # run this step now
        expected.append((x * 3 + 1).exp())
    for o, e in zip(outs, expected):
        assert_close(o.to(DEV), e)


# AdamW's default keeps its step count on the host and passes the bias
# corrections as new scalars every step, which a graph bakes in: such steps
# never replay. capturable=True (as torch.cuda.graphs also asks) keeps them on
# the device, so the step is one graph.
OPTIMIZERS = {
    "sgd_momentum": lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9),
    "adamw_capturable": lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.01, capturable=True),
}


@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
def test_mlp_training_step_replays(lazyjit, optimizer):
    torch.manual_seed(0)
    eager = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 64)).to(DEV)
    lazy = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 64)).to(DEV)
    lazy.load_state_dict(eager.state_dict())
    lazy = lazy.to(L)
    opt_e = OPTIMIZERS[optimizer](eager.parameters())
    opt_l = OPTIMIZERS[optimizer](lazy.parameters())
    lazyjit.reset_metrics()
    xs = []  # kept: no step's input where an earlier one was
    for step in range(STEPS):
        x = torch.randn(32, 64, device=DEV)
        xs.append((x, x.to(L)))
        loss_e = eager(x).square().mean()
        loss_e.backward()
        opt_e.step()
        opt_e.zero_grad()
        loss_l = lazy(xs[-1][1]).square().mean()
        loss_l.backward()
        opt_l.step()
        opt_l.zero_grad()
        lazyjit.sync()
        assert_close(loss_l.to(DEV), loss_e.detach(), rtol=1e-4, atol=1e-5)
        for pe, pl in zip(eager.parameters(), lazy.parameters()):
            assert_close(pl.to(DEV), pe.detach(), rtol=1e-4, atol=1e-5)
    m = lazyjit.metrics()
    # The step's program from the second step on (the first makes the
    # optimizer's state: a program of its own).
    assert_replayed(m, STEPS - 1, lazyjit.metrics_report())


def test_switch_off_gives_no_graphs():
    code = ("import torch, lazyjit\n"
            "for _ in range(5):\n"
            "    x = torch.randn(64, 64, device='cuda')\n"
            "    torch.testing.assert_close(((x.to('lazyjit') * 2).sin() + 1).to('cuda'), (x * 2).sin() + 1)\n"
            "m = lazyjit.metrics()\n"
            "print('graphs', m['graph_replayable_programs'], m['cuda_graphs_captured'], m['cuda_graph_replays'])\n")
    env = {**os.environ, "LAZYJIT_CUDA_GRAPHS": "0", "LAZYJIT_TARGET": "cuda", "LAZYJIT_CACHE": "off",
           "LAZYJIT_BACKGROUND_COMPILE": "off",
           "PYTHONPATH": os.pathsep.join([f"{ROOT}/python", os.environ.get("PYTHONPATH", "")])}
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    assert "graphs 1 0 0" in p.stdout, p.stdout + p.stderr


def test_nan_checks_say_not_replayable_and_run_without_graphs():
    code = ("import torch, lazyjit\n"
            "for _ in range(4):\n"
            "    x = torch.randn(64, 64, device='cuda')\n"
            "    torch.testing.assert_close((x.to('lazyjit').tanh() + 1).to('cuda'), x.tanh() + 1)\n"
            "print(lazyjit.metrics_report())\n")
    env = {**os.environ, "LAZYJIT_DEBUG_NANS": "1", "LAZYJIT_TARGET": "cuda", "LAZYJIT_CACHE": "off",
           "LAZYJIT_BACKGROUND_COMPILE": "off", "LAZYJIT_LOG": "syncs",
           "PYTHONPATH": os.pathsep.join([f"{ROOT}/python", os.environ.get("PYTHONPATH", "")])}
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    assert "no — NaN checks (LAZYJIT_DEBUG_NANS)" in p.stdout, p.stdout
    assert "0 captured, 0 replays" in p.stdout, p.stdout
    # The sync log says it where the program is compiled.
    compiled = [line for line in p.stderr.splitlines() if "-> compiled" in line]
    assert compiled and compiled[0].endswith("; CUDA graph: no — NaN checks (LAZYJIT_DEBUG_NANS) read each "
                                             "kernel's NaN flag on the host"), p.stderr
