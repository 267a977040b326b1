"""A trace per thread: threads running separate work record separate graphs, so
they compile and hit the cache as the same work run one after another does;
tensors shared between threads still give eager's values, whichever thread
recorded them and whichever reads or writes them."""
import copy
import threading

import pytest
import torch
from torch.testing import assert_close

import lazyjit

DEV = "lazyjit"
WORKERS = 4
STEPS = 12


def _model(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 32))


def _data(seed):
    g = torch.Generator().manual_seed(100 + seed)
    return torch.randn(16, 32, generator=g), torch.randn(16, 32, generator=g)


def _train(model, x, y, dev, losses, start=None):
    """A training step per iteration: forward, loss, backward, SGD, loss.item()."""
    model = model.to(dev)
    x, y = x.to(dev), y.to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    if start:
        start.wait()
    for _ in range(STEPS):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return model


def _run(threaded):
    models = [_model(i) for i in range(WORKERS)]
    data = [_data(i) for i in range(WORKERS)]
    losses = [[] for _ in range(WORKERS)]
    lazy = [copy.deepcopy(m) for m in models]
    lazyjit.sync()
    lazyjit.clear_cache()
    lazyjit.reset_metrics()
    if threaded:
        start = threading.Barrier(WORKERS)
        errors = []

        def work(i):
            try:
                _train(lazy[i], *data[i], DEV, losses[i], start)
            except Exception as e:  # noqa: BLE001
                errors.append(e)

        ts = [threading.Thread(target=work, args=(i,)) for i in range(WORKERS)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(120)
        assert not errors, errors
    else:
        for i in range(WORKERS):
            _train(lazy[i], *data[i], DEV, losses[i])
    m = lazyjit.metrics()
    counts = {k: m[k] for k in ("compiles", "graphs_executed")}
    return counts, losses, lazy, models, data


def test_threads_training_separate_models_compile_what_sequential_code_compiles():
    sequential, _, _, _, _ = _run(threaded=False)
    threaded, losses, lazy, models, data = _run(threaded=True)
    # Before each thread had a graph of its own, the threads' ops interleaved
    # into one graph that differed at every sync: a compile nearly every step.
    assert threaded == sequential
    assert sequential["graphs_executed"] == WORKERS * STEPS  # one graph per step
    for i in range(WORKERS):
        want = []
        trained = _train(models[i], *data[i], "cpu", want)
        assert_close(torch.tensor(losses[i]), torch.tensor(want))
        for p, q in zip(lazy[i].parameters(), trained.parameters()):
            assert_close(p.cpu(), q)


def _in_thread(fn):
    out = {}

    def run():
        try:
            out["value"] = fn()
        except Exception as e:  # noqa: BLE001
            out["error"] = e

    t = threading.Thread(target=run)
    t.start()
    t.join(60)
    if "error" in out:
        raise out["error"]
    return out.get("value")


def test_a_thread_reads_what_another_thread_recorded():
    a, w = torch.randn(8, 16), torch.randn(16, 16)
    la, lw = a.to(DEV), w.to(DEV)
    mine = torch.relu(la @ lw)  # pending in this thread's graph
    # The other thread's op reads it, and its own result depends on it.
    theirs = _in_thread(lambda: (mine * 2 + 1).cpu())
    assert_close(theirs, torch.relu(a @ w) * 2 + 1)
    assert_close(mine.cpu(), torch.relu(a @ w))


def test_a_thread_writes_what_another_thread_recorded():
    a = torch.randn(6, 5)
    y = a.to(DEV) + 1               # pending here
    before = y * 3                  # recorded before the other thread's write
    view = y[1:, :2]

    def write():
        view.mul_(2)                # an in-place write through a view, elsewhere
        y.add_(view.sum())
    _in_thread(write)
    want = a + 1
    want_before = want * 3
    want[1:, :2] *= 2
    want.add_(want[1:, :2].sum())
    assert_close(before.cpu(), want_before)
    assert_close(y.cpu(), want)
    assert_close(view.cpu(), want[1:, :2])


def test_pending_work_of_a_thread_that_exited_is_still_computed():
    a = torch.randn(4, 4)
    out = _in_thread(lambda: [a.to(DEV).exp(), a.to(DEV).sin().sum(0)])
    assert_close(out[1].cpu(), a.sin().sum(0))
    assert_close(out[0].cpu(), a.exp())
    # Threads come and go; each gets a graph of its own, none stale.
    for k in range(8):
        got = _in_thread(lambda: (a.to(DEV) * k).cpu())
        assert_close(got, a * k)


def test_two_threads_alternating_writes_to_one_tensor():
    acc = torch.zeros(3, 3).to(DEV)
    turn = [threading.Event(), threading.Event()]
    turn[0].set()

    def worker(me):
        for step in range(5):
            turn[me].wait(30)
            turn[me].clear()
            acc.mul_(2).add_(me + 1)
            turn[1 - me].set()
    ts = [threading.Thread(target=worker, args=(i,)) for i in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    want = torch.zeros(3, 3)
    for _ in range(5):
        for me in range(2):
            want = want * 2 + (me + 1)
    assert_close(acc.cpu(), want)


def test_backward_in_threads_records_into_the_thread_that_called_it(fresh):
    # autograd runs backward on its own device thread; its ops follow the
    # tensors they read into the calling thread's graph: one graph per step.
    both = threading.Barrier(2)
    made = [(_model(i), _data(i)) for i in range(2)]

    def step(seed):
        model = copy.deepcopy(made[seed][0]).to(DEV)
        x, y = (t.to(DEV) for t in made[seed][1])
        loss = (model(x) - y).pow(2).mean()  # backward starts with ops on the seed alone
        both.wait()  # the two backward passes share autograd's device thread
        loss.backward()
        return [p.grad.cpu() for p in model.parameters()]
    got = [None, None]
    ts = [threading.Thread(target=lambda i=i: got.__setitem__(i, step(i))) for i in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    assert fresh.metrics()["compiles"] == 1
    for i in range(2):
        model = _model(i)
        x, y = _data(i)
        (model(x) - y).pow(2).mean().backward()
        for g, p in zip(got[i], model.parameters()):
            assert_close(g, p.grad)
    assert fresh.metrics()["graphs_executed"] == 2


def test_a_failure_in_a_graph_another_thread_ran_is_raised_where_it_was_recorded():
    a = torch.randn(8, 4)
    bad = torch.tensor([1, 50])
    recorded, read = threading.Event(), threading.Event()
    got = {}

    def recorder():
        la = a.to(DEV)
        got["lost"] = la.index_select(0, bad.to(DEV))
        got["good"] = la * 2
        recorded.set()
        read.wait(30)
        try:
            lazyjit.sync()
        except Exception as e:  # noqa: BLE001
            got["error"] = e

    th = threading.Thread(target=recorder)
    th.start()
    recorded.wait(30)
    assert_close(got["good"].cpu(), a * 2)  # runs the other thread's graph: not our failure
    with pytest.raises(RuntimeError, match="lost"):
        got["lost"].cpu()
    read.set()
    th.join(60)
    assert isinstance(got.get("error"), IndexError), got
    assert "aten::index_select" in str(got["error"])


def test_threads_sharing_one_model_compile_what_sequential_code_compiles():
    # Weights every thread reads are shared by their graphs, not moved between
    # them: each thread's graph is the one sequential code records.
    model = _model(0).eval()
    lazy = copy.deepcopy(model).to(DEV)
    xs = [_data(i)[0] for i in range(WORKERS)]

    def infer(i, out, start=None):
        x = xs[i].to(DEV)
        if start:
            start.wait()
        with torch.no_grad():
            for k in range(STEPS):
                out.append(lazy(x * (k + 1)).sum(0).cpu())

    def run(threaded):
        lazyjit.sync()
        lazyjit.clear_cache()
        lazyjit.reset_metrics()
        outs = [[] for _ in range(WORKERS)]
        if threaded:
            start = threading.Barrier(WORKERS)
            ts = [threading.Thread(target=infer, args=(i, outs[i], start)) for i in range(WORKERS)]
            for t in ts:
                t.start()
            for t in ts:
                t.join(120)
        else:
            for i in range(WORKERS):
                infer(i, outs[i])
        m = lazyjit.metrics()
        return {k: m[k] for k in ("compiles", "graphs_executed")}, outs

    sequential, _ = run(threaded=False)
    threaded, outs = run(threaded=True)
    assert threaded == sequential
    with torch.no_grad():
        for i in range(WORKERS):
            for k in range(STEPS):
                assert_close(outs[i][k], model(xs[i] * (k + 1)).sum(0))


@pytest.mark.parametrize("write", ["recorded", "eager"])
def test_a_write_after_another_threads_pending_read_is_not_seen_by_it(write):
    w = torch.randn(5, 5)
    lw = w.to(DEV)
    read_before = lw * 2  # pending here: reads w as it is now

    def other():
        if write == "recorded":
            lw.add_(1)
        else:
            lw[lw > 0] = 0  # a boolean mask: runs at once, on the CPU
        return lw.cpu()
    got = _in_thread(other)
    want = w + 1 if write == "recorded" else w.masked_fill(w > 0, 0)
    assert_close(got, want)
    assert_close(read_before.cpu(), w * 2)
    assert_close((lw * 3).cpu(), want * 3)
