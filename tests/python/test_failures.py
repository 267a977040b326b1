"""A failed sync loses nothing it did not have to (issue 17, item 1), eager as the oracle.

Eager raises at the bad op and keeps everything computed before it. lazyjit runs
the op at the next sync: the error must be eager's (type and message), name the op
and the line that recorded it, and every value that does not depend on the bad op
must be kept, in this thread and in others; only values computed from it are lost."""
import os
import threading

import pytest
import torch
from torch.testing import assert_close

from conftest import DEV, caller_line as _line, eager_error as _eager_error, lazyjit

THIS_FILE = os.path.basename(__file__)




def _model(device):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3)).to(device)


def _sgd_step(model, opt, x, y):
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    opt.step()


def _data(device):
    g = torch.Generator().manual_seed(1)
    return torch.randn(16, 6, generator=g).to(device), torch.randn(16, 3, generator=g).to(device)


def _params(model):
    return [p.detach().cpu() for p in model.parameters()]


BAD = torch.tensor([0, 9])  # 9 is out of range for a table of 4 rows


def test_sgd_step_then_bad_index_select_keeps_the_weights_and_raises_eagers_error():
    # Eager: the SGD step happens, then index_select raises.
    em = _model("cpu")
    eopt = torch.optim.SGD(em.parameters(), lr=0.1)
    ex, ey = _data("cpu")
    table = torch.randn(4, 5)
    _sgd_step(em, eopt, ex, ey)
    want = _eager_error(lambda: table.index_select(0, BAD))

    lm = _model(DEV)
    lopt = torch.optim.SGD(lm.parameters(), lr=0.1)
    lx, ly = _data(DEV)
    ltable = table.to(DEV)
    _sgd_step(lm, lopt, lx, ly)
    picked = ltable.index_select(0, BAD.to(DEV)); line = _line()
    with pytest.raises(type(want)) as got:
        lazyjit.sync()
    msg = str(got.value)
    assert msg.startswith(str(want))  # eager's message, then which op and where
    assert "aten::index_select" in msg and f"{THIS_FILE}:{line}" in msg

    # The SGD step survived, exactly as eager's.
    for g, w in zip(_params(lm), _params(em)):
        assert_close(g, w)
    # The bad op's own result is lost, and says why.
    with pytest.raises(RuntimeError, match="value was lost.*aten::index_select.*index out of range"):
        picked.cpu()

    # Training goes on and keeps matching eager.
    for _ in range(3):
        _sgd_step(em, eopt, ex, ey)
        _sgd_step(lm, lopt, lx, ly)
    for g, w in zip(_params(lm), _params(em)):
        assert_close(g, w)


def test_values_after_the_bad_op_are_kept_unless_computed_from_it():
    a = torch.randn(4, 5)
    la = a.to(DEV)
    before = la * 2
    bad = la.index_select(0, BAD.to(DEV))
    downstream = (bad + 1).sum()
    independent = (la.exp() + before).sum(0)
    mutated = la.clone()
    mutated.mul_(3)
    with pytest.raises(IndexError, match="index out of range in self"):
        lazyjit.sync()
    assert_close(before.cpu(), a * 2)
    assert_close(independent.cpu(), (a.exp() + a * 2).sum(0))
    assert_close(mutated.cpu(), a * 3)
    for lost in (bad, downstream):
        with pytest.raises(RuntimeError, match="value was lost.*aten::index_select"):
            lost.cpu()
    # The lost tensors stay lost; everything else keeps working.
    assert_close((la + independent).cpu(), a + (a.exp() + a * 2).sum(0))


def test_the_program_is_kept_and_the_next_good_run_hits_the_cache():
    a = torch.randn(4, 5)

    def run(idx):
        out = a.to(DEV).index_select(0, idx.to(DEV)) * 2
        return out.cpu()

    run(torch.tensor([1, 2]))
    compiles = lazyjit.metrics()["compiles"]
    with pytest.raises(IndexError):
        run(BAD)
    assert_close(run(torch.tensor([3, 0])), a.index_select(0, torch.tensor([3, 0])) * 2)
    assert lazyjit.metrics()["compiles"] == compiles


def test_a_failing_op_whose_result_is_kept_but_never_read():
    a = torch.randn(4, 5)
    la = a.to(DEV)
    unused = la.index_select(0, BAD.to(DEV))  # noqa: F841 (alive, so the sync computes it)
    good = la.sin()
    with pytest.raises(IndexError):
        lazyjit.sync()
    assert_close(good.cpu(), a.sin())


def test_a_failing_op_whose_result_is_dropped_is_not_run():
    # A documented difference from eager: the graph computes what a live tensor
    # needs, so an op whose result died before the sync never runs.
    a = torch.randn(4, 5)
    la = a.to(DEV)
    la.index_select(0, BAD.to(DEV))
    good = la.cos()
    lazyjit.sync()
    assert_close(good.cpu(), a.cos())


def test_another_threads_pending_work_survives_a_failure():
    a = torch.randn(64, 32)
    w = torch.randn(32, 32)
    recorded, done = threading.Barrier(2), threading.Event()
    results, errors = {}, {}

    def good():
        out = torch.tanh(a.to(DEV) @ w.to(DEV)) + 1
        recorded.wait()
        done.wait(30)  # the other thread's sync runs this thread's pending work too
        results["good"] = out.cpu()

    def bad():
        try:
            t = a.to(DEV).index_select(0, torch.tensor([0, 999]).to(DEV))
            recorded.wait()
            try:
                t.sum().cpu()
            finally:
                done.set()
        except Exception as e:  # noqa: BLE001
            errors["bad"] = e

    threads = [threading.Thread(target=good), threading.Thread(target=bad)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert isinstance(errors.get("bad"), IndexError), errors
    assert_close(results["good"], torch.tanh(a @ w) + 1)


def test_a_failure_is_raised_in_the_thread_that_recorded_the_op():
    a = torch.randn(8, 4)
    recorded, failed_elsewhere = threading.Event(), threading.Event()
    got = {}

    def bad():
        t = a.to(DEV).index_select(0, torch.tensor([1, 50]).to(DEV))  # noqa: F841
        recorded.set()
        failed_elsewhere.wait(30)
        try:
            lazyjit.sync()
        except Exception as e:  # noqa: BLE001
            got["bad"] = e

    th = threading.Thread(target=bad)
    th.start()
    recorded.wait(30)
    mine = a.to(DEV).sum(0)
    assert_close(mine.cpu(), a.sum(0))  # this sync runs the bad op too, but it is not ours
    failed_elsewhere.set()
    th.join(60)
    assert isinstance(got.get("bad"), IndexError), got
    assert "aten::index_select" in str(got["bad"])
