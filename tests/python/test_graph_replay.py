"""Which programs could run as one CUDA graph (executor/graph_replay.h). The
verdict does not depend on the target: under the CPU target, metrics_report()
says what the cuda target would do ("CUDA graph replay (cuda
target): ..."), and nothing is captured. The rules themselves, each on a
program built by hand, and the capture/replay policy: tests/executor/graph_replay_test.cpp."""
import torch

import lazyjit
from conftest import run_python


def test_mlp_training_step_is_replayable_and_nothing_is_captured_on_cpu():
    torch.manual_seed(0)
    eager = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 8))
    lazy = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 8))
    lazy.load_state_dict(eager.state_dict())
    lazy = lazy.to("lazyjit")
    opt_e = torch.optim.SGD(eager.parameters(), lr=0.1)
    opt_l = torch.optim.SGD(lazy.parameters(), lr=0.1)
    lazyjit.reset_metrics()
    for step in range(4):
        x = torch.randn(8, 16)
        loss_e = eager(x).square().mean()
        loss_e.backward()
        opt_e.step()
        opt_e.zero_grad()
        loss_l = lazy(x.to("lazyjit")).square().mean()
        loss_l.backward()
        opt_l.step()
        opt_l.zero_grad()
        torch.testing.assert_close(loss_l.cpu(), loss_e.detach())
    for pe, pl in zip(eager.parameters(), lazy.parameters()):
        torch.testing.assert_close(pl.cpu(), pe.detach())
    m = lazyjit.metrics()
    assert m["graph_replayable_programs"] >= 1
    assert m["graph_not_replayable_programs"] == 0
    assert m["cuda_graphs_captured"] == 0 and m["cuda_graph_replays"] == 0
    report = lazyjit.metrics_report()
    n = m["graph_replayable_programs"]
    line = f"CUDA graph replay (cuda target): {n} program{'' if n == 1 else 's'} replayable, 0 not; 0 captured, 0 replays"
    assert line in report, report
    assert "x no — " not in report


def test_capturable_adamw_step_is_one_replayable_program():
    # AdamW(capturable=True) keeps its step count and bias corrections on the
    # device: the whole training step is one program whose scalars do not change
    # between steps (what a graph needs; tests/gpu/test_cuda_graphs.py replays it).
    def make(dev):
        torch.manual_seed(0)
        m = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4)).to(dev)
        return m, torch.optim.AdamW(m.parameters(), lr=1e-2, weight_decay=0.01, capturable=dev == "lazyjit")
    me, oe = make("cpu")
    ml, ol = make("lazyjit")
    lazyjit.reset_metrics()
    for _ in range(5):
        x = torch.randn(8, 16)
        for m, o, xx in ((me, oe, x), (ml, ol, x.to("lazyjit"))):
            o.zero_grad()
            m(xx).square().mean().backward()
            o.step()
        lazyjit.sync()
    for pe, pl in zip(me.parameters(), ml.parameters()):
        torch.testing.assert_close(pl.cpu(), pe.detach(), rtol=1e-5, atol=1e-6)
    m = lazyjit.metrics()
    assert m["graphs_executed"] == 5 and m["cache_hits"] == 4, lazyjit.metrics_report()
    assert m["graph_replayable_programs"] == 1 and m["graph_not_replayable_programs"] == 0, lazyjit.metrics_report()


NAN_PROBE = ("import torch, lazyjit; x = torch.randn(64, 64); "
             "torch.testing.assert_close((x.to('lazyjit').tanh() * 2 + 1).cpu(), x.tanh() * 2 + 1); "
             "print(lazyjit.metrics_report())")


def test_nan_checks_make_programs_not_replayable():
    p = run_python(NAN_PROBE, {"LAZYJIT_DEBUG_NANS": "1"})
    assert p.returncode == 0, p.stderr
    assert "CUDA graph replay (cuda target): 0 programs replayable, 1 not" in p.stdout, p.stdout
    assert "1x no — NaN checks (LAZYJIT_DEBUG_NANS) read each kernel's NaN flag on the host" in p.stdout, p.stdout


def test_cpu_sync_log_never_mentions_cuda_graphs():
    # Only the cuda target's sync log says why a program cannot be a graph
    # (tests/gpu/test_cuda_graphs.py); on the CPU that is metrics_report()'s.
    for env in ({"LAZYJIT_LOG": "syncs", "LAZYJIT_DEBUG_NANS": "1"}, {"LAZYJIT_LOG": "syncs"}):
        p = run_python(NAN_PROBE, env)
        compiled = [line for line in p.stderr.splitlines() if "-> compiled" in line]
        assert compiled and all("CUDA graph" not in line for line in compiled), p.stderr


def test_cuda_graphs_switch_is_validated():
    ok = run_python(NAN_PROBE, {"LAZYJIT_CUDA_GRAPHS": "off"})
    assert ok.returncode == 0 and "LAZYJIT_CUDA_GRAPHS" not in ok.stderr, ok.stderr
    bad = run_python(NAN_PROBE, {"LAZYJIT_CUDA_GRAPHS": "sometimes"})
    assert bad.returncode == 0, bad.stderr
    assert "LAZYJIT_CUDA_GRAPHS" in bad.stderr and "on or off" in bad.stderr, bad.stderr
