"""Step mode for a region (with lazyjit.step_mode()): ops inside run one at a time
through their eager kernels, calling the op hooks, on this thread only; outside,
ops are recorded as before. Results equal lazy mode's and eager's."""
import threading

import torch

import lazyjit
from conftest import DEV


def body(x, w):
    return torch.softmax(torch.tanh(x @ w) * 2 + 1, -1).sum(0)


def test_a_region_runs_op_by_op_calls_hooks_and_equals_lazy_results(fresh):
    torch.manual_seed(0)
    x, w = torch.randn(4, 8), torch.randn(8, 8)
    pending = torch.tanh(x.to(DEV))  # recorded before: run on entering
    seen = []
    h = lazyjit.add_op_hook(lambda op, inputs, outputs: seen.append(op))
    try:
        before = lazyjit.metrics()["step_ops"]
        with lazyjit.step_mode():
            assert lazyjit.mode() == "step"
            inside = body(x.to(DEV), w.to(DEV))
        stepped = lazyjit.metrics()["step_ops"] - before
        assert lazyjit.mode() == "lazy"
        n_seen = len(seen)
        outside = body(x.to(DEV), w.to(DEV))
        torch.testing.assert_close(outside.cpu(), inside.cpu())
    finally:
        h.remove()
    torch.testing.assert_close(inside.cpu(), body(x, w))
    torch.testing.assert_close(pending.cpu(), torch.tanh(x))
    assert stepped >= 5 and any("mm" in op for op in seen[:n_seen]), (stepped, seen)
    assert len(seen) == n_seen  # no hook calls outside the region (lazy ops are recorded)


def test_a_region_is_per_thread(fresh):
    modes = {}
    inside, outside = threading.Event(), threading.Event()

    def other():
        inside.wait(30)
        modes["other thread"] = lazyjit.mode()
        outside.set()

    t = threading.Thread(target=other)
    t.start()
    with lazyjit.step_mode():
        modes["this thread"] = lazyjit.mode()
        inside.set()
        outside.wait(30)
    t.join()
    assert modes == {"this thread": "step", "other thread": "lazy"}, modes
