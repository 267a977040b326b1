"""Lazyjit tensors in shared memory (issue 56, defects 4 and 6).

Defect 4: ``share_memory_()`` was accepted and ``is_shared()`` was True even
before it, but nothing was shared: a forked worker's ``t.add_(100)`` (the
Hogwild pattern) never reached the parent. Defect 6: lazyjit tensors as the
arguments of a spawn ``Process`` crashed (the CPU copy sent had no owner: its
descriptor was closed before the child started).

Now a shared lazyjit storage's elements live in a shared-memory block, as a
CPU storage's do (tracer/shared_storage.h); sending one to another process
shares it. The oracle of every case is the same code on CPU tensors, run in
the same process, with the same children.

Multiprocessing waits have deadlines (a get, a join) and a child that hangs is
killed: a failure fails, it does not hang. Fork cases run in an interpreter of
their own (the pytest process has threads a fork should not copy).
"""
import json
import multiprocessing
import subprocess
import threading

import pytest
import torch
from conftest import run_python

import lazyjit  # noqa: F401

DEADLINE_S = 60
DEVICES = ["cpu", "lazyjit"]


def on(dev, t):
    return t.to(dev)


# --- in this process ------------------------------------------------------------


def test_share_memory_flags_and_values():
    got = {}
    for dev in DEVICES:
        x = on(dev, torch.arange(6.0)) * 3 - 1  # pending on lazyjit
        before = x.is_shared()
        same = x.share_memory_() is x
        got[dev] = (before, same, x.is_shared(), x.untyped_storage().is_shared(), x.cpu().tolist())
        x.add_(1)  # a write after sharing, read back
        got[dev] += (x.cpu().tolist(), x.is_shared())
    assert got["lazyjit"] == got["cpu"], got


@pytest.mark.parametrize("dtype", [torch.float64, torch.int64, torch.bfloat16, torch.bool])
def test_share_memory_dtypes_and_views(dtype):
    got = {}
    for dev in DEVICES:
        base = on(dev, (torch.arange(12) % 5).to(dtype))
        v = base.view(3, 4)[1:, ::2]
        v.share_memory_()  # shares the whole storage
        got[dev] = (base.is_shared(), v.is_shared(), v.cpu(), base.cpu())
    assert got["lazyjit"][:2] == got["cpu"][:2] == (True, True)
    torch.testing.assert_close(got["lazyjit"][2], got["cpu"][2], rtol=0, atol=0)
    torch.testing.assert_close(got["lazyjit"][3], got["cpu"][3], rtol=0, atol=0)


def test_shared_storage_cannot_be_resized():
    # "Storages in shared memory cannot be resized" (Tensor.share_memory_'s
    # documentation). Eager's CPU storage is no oracle here: resize_ on one from
    # share_memory_() crashes this torch's process (a segmentation fault).
    x = on("lazyjit", torch.arange(4.0)).share_memory_()
    y = x[:]
    with pytest.raises(RuntimeError, match="not resizable"):
        x.resize_(100)  # (x keeps the sizes it was given, as eager's resize_ leaves them)
    with pytest.raises(RuntimeError, match="not resizable"):
        y.untyped_storage().resize_(1000)
    torch.testing.assert_close(y.cpu(), torch.arange(4.0))  # the storage is unchanged
    y.resize_(2)  # within the storage: no resize of it, as on any device
    torch.testing.assert_close(y.cpu(), torch.arange(2.0))
    assert y.is_shared()


def test_a_graph_that_read_a_shared_tensor_keeps_what_it_read():
    # Another thread records a read and does not run it; this thread writes the
    # tensor in place and runs the write (the shared block changes). The other
    # thread's result is of the elements it read, as eager's.
    got = {}
    for dev in DEVICES:
        x = on(dev, torch.arange(4.0)).share_memory_()
        out = {}
        recorded, written = threading.Event(), threading.Event()

        def reader():
            y = x * 2  # recorded, pending in this thread's graph
            recorded.set()
            written.wait(DEADLINE_S)
            out["y"] = y.cpu()

        th = threading.Thread(target=reader)
        th.start()
        assert recorded.wait(DEADLINE_S)
        x.add_(100)
        x.cpu()  # the write runs: the shared block holds it
        written.set()
        th.join(DEADLINE_S)
        assert not th.is_alive()
        got[dev] = (out["y"], x.cpu())
    for a, b in zip(got["lazyjit"], got["cpu"]):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


# --- spawned children: a Process's arguments, queues ----------------------------


def _spawn_child(q_out, a, b, done):
    import lazyjit  # noqa: F401

    # Values, not tensors: a CPU tensor put on a queue is shared, and would
    # show the writes below.
    q_out.put((a.device.type, a.cpu().tolist(), b.cpu().tolist(), a.is_shared(), b.is_shared()))
    a.add_(100)  # reaches the parent, as for CPU tensors
    b[1:].mul_(-1)
    a.cpu(), b.cpu()  # runs the writes
    q_out.put("written")
    done.wait(timeout=DEADLINE_S)


def _run_spawn(args_for, dev):
    ctx = multiprocessing.get_context("spawn")
    q_out, done = ctx.Queue(), ctx.Event()
    a, b = args_for(dev)
    p = ctx.Process(target=_spawn_child, args=(q_out, a, b, done))
    p.start()
    try:
        first = q_out.get(timeout=DEADLINE_S)
        assert q_out.get(timeout=DEADLINE_S) == "written"
        after = (a.cpu(), b.cpu())
        done.set()
        p.join(timeout=DEADLINE_S)
    finally:
        if p.is_alive():
            p.kill()
            p.join()
    assert p.exitcode == 0, p.exitcode
    return first, after


def _two_tensors(dev):
    return on(dev, torch.arange(4.0)) + 1, on(dev, torch.arange(6.0).reshape(2, 3)).t()


def _one_storage(dev):
    base = on(dev, torch.arange(8.0)) * 2
    return base[:4], base[2:].view(3, 2)  # views of one storage


@pytest.mark.parametrize("args_for", [_two_tensors, _one_storage], ids=["two_tensors", "views_of_one_storage"])
def test_spawn_process_arguments(args_for):
    got = {dev: _run_spawn(args_for, dev) for dev in DEVICES}
    (dev_l, a_l, b_l, *shared_l), after_l = got["lazyjit"]
    (dev_c, a_c, b_c, *shared_c), after_c = got["cpu"]
    assert dev_l == "lazyjit" and shared_l == shared_c == [True, True]
    assert (a_l, b_l) == (a_c, b_c)
    for x, y in zip(after_l, after_c):
        torch.testing.assert_close(x, y, rtol=0, atol=0)


def test_spawn_process_one_tensor():
    def one(dev):
        t = on(dev, torch.arange(5.0)) - 2
        return t, t[::2]

    got = {dev: _run_spawn(one, dev) for dev in DEVICES}
    for x, y in zip(got["lazyjit"][1], got["cpu"][1]):
        torch.testing.assert_close(x, y, rtol=0, atol=0)


def _queue_child(q_in, q_out, done):
    import lazyjit  # noqa: F401

    t = q_in.get(timeout=DEADLINE_S)
    t.mul_(10)
    t.sum().item()
    q_out.put(t.is_shared())
    done.wait(timeout=DEADLINE_S)


def test_queue_sends_shared_memory():
    got = {}
    for dev in DEVICES:
        ctx = multiprocessing.get_context("spawn")
        q_in, q_out, done = ctx.Queue(), ctx.Queue(), ctx.Event()
        p = ctx.Process(target=_queue_child, args=(q_in, q_out, done))
        p.start()
        try:
            t = on(dev, torch.arange(4.0)) + 1  # pending on lazyjit
            q_in.put(t)
            shared = q_out.get(timeout=DEADLINE_S)
            got[dev] = (shared, t.is_shared(), t.cpu())
            done.set()
            p.join(timeout=DEADLINE_S)
        finally:
            if p.is_alive():
                p.kill()
                p.join()
        assert p.exitcode == 0
    assert got["lazyjit"][:2] == got["cpu"][:2] == (True, True), got
    torch.testing.assert_close(got["lazyjit"][2], got["cpu"][2], rtol=0, atol=0)


# --- forked children: Hogwild ---------------------------------------------------

FORK_PRELUDE = r"""
import json, multiprocessing as mp, sys, torch, lazyjit
ctx = mp.get_context("fork")
def run_workers(target, *args, n=1):
    ps = [ctx.Process(target=target, args=args) for _ in range(n)]
    for p in ps:
        p.start()
        p.join(DEADLINE)  # one after another: each worker sees the last one's writes
        if p.is_alive():
            p.kill()
            p.join()
    return [p.exitcode for p in ps]
def on(dev, t):
    return t.to(dev)
"""


def run_fork(body):
    code = FORK_PRELUDE.replace("DEADLINE", str(DEADLINE_S)) + body
    try:
        proc = run_python(code, timeout=4 * DEADLINE_S)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"the parent hung:\nstdout:\n{e.stdout}\nstderr:\n{e.stderr}")
    out = [json.loads(l[4:]) for l in proc.stdout.splitlines() if l.startswith("OUT ")]
    assert out, proc.stdout + proc.stderr
    return out[-1], proc


@pytest.mark.parametrize("sync_in_child", ["item", "none", "lazyjit.sync"])
def test_hogwild_fork_writes_reach_the_parent(sync_in_child):
    # "none": the child's last write is still recorded when its target returns;
    # it runs as the worker ends.
    out, proc = run_fork(rf"""
def worker(t, w):
    torch.set_num_threads(1)
    for step in range(3):
        g = t * 0.5 + w          # a "gradient"
        t.sub_(g * 0.1)          # the in-place update, Hogwild's
    t.add_(100)
    if "{sync_in_child}" == "item":
        t.sum().item()
    elif "{sync_in_child}" == "lazyjit.sync":
        lazyjit.sync()
res = {{}}
for dev in ("cpu", "lazyjit"):
    t = on(dev, torch.zeros(4)) + torch.arange(4.0).to(dev)
    w = on(dev, torch.full((4,), 0.25))
    t.share_memory_()
    codes = run_workers(worker, t, w, n=2)
    res[dev] = {{"codes": codes, "t": t.cpu().tolist(), "shared": t.is_shared()}}
print("OUT " + json.dumps(res), flush=True)
""")
    assert out["lazyjit"]["codes"] == [0, 0], (out, proc.stderr)
    assert out["lazyjit"] == out["cpu"], (out, proc.stderr)
    assert out["cpu"]["t"][0] > 150, out  # both workers' updates (200 added)


def test_fork_parent_writes_reach_the_child():
    out, proc = run_fork(r"""
def worker(t, ev, q):
    torch.set_num_threads(1)
    if not ev.wait(60):
        q.put("timeout")
        return
    q.put((t * 1).cpu().tolist())  # reads the parent's write
res = {}
for dev in ("cpu", "lazyjit"):
    t = on(dev, torch.ones(3)).share_memory_()
    ev, q = ctx.Event(), ctx.Queue()
    p = ctx.Process(target=worker, args=(t, ev, q))
    p.start()
    t.mul_(7)
    t.cpu()
    ev.set()
    try:
        res[dev] = q.get(timeout=60)
    finally:
        p.join(60)
        if p.is_alive():
            p.kill()
print("OUT " + json.dumps(res), flush=True)
""")
    assert out["lazyjit"] == out["cpu"] == [7.0, 7.0, 7.0], (out, proc.stderr)


def test_fork_without_share_memory_shares_nothing():
    # Without share_memory_(), a forked child's writes stay in the child: CPU
    # tensors behave so too.
    out, proc = run_fork(r"""
def worker(t):
    torch.set_num_threads(1)
    t.add_(5)
    t.cpu()
res = {}
for dev in ("cpu", "lazyjit"):
    t = on(dev, torch.zeros(2))
    codes = run_workers(worker, t)
    res[dev] = {"codes": codes, "t": t.cpu().tolist(), "shared": t.is_shared()}
print("OUT " + json.dumps(res), flush=True)
""")
    assert out["lazyjit"] == out["cpu"] == {"codes": [0], "t": [0.0, 0.0], "shared": False}, (out, proc.stderr)


def test_hogwild_module_training_matches_the_cpu():
    # The Hogwild example: model.share_memory(), workers train it in place.
    out, proc = run_fork(r"""
def train(model, x, y):
    torch.set_num_threads(1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for step in range(4):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
res = {}
for dev in ("cpu", "lazyjit"):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1)).to(dev)
    model.share_memory()
    x, y = torch.randn(32, 8).to(dev), torch.randn(32, 1).to(dev)
    codes = run_workers(train, model, x, y, n=2)
    res[dev] = {"codes": codes, "shared": all(p.is_shared() for p in model.parameters()),
                "params": [p.detach().cpu().flatten().tolist() for p in model.parameters()]}
print("OUT " + json.dumps(res), flush=True)
""")
    lz, cpu = out["lazyjit"], out["cpu"]
    assert lz["codes"] == cpu["codes"] == [0, 0] and lz["shared"] and cpu["shared"], (out, proc.stderr)
    for a, b in zip(lz["params"], cpu["params"]):
        torch.testing.assert_close(torch.tensor(a), torch.tensor(b), rtol=1e-4, atol=1e-5)
    torch.manual_seed(0)
    init = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    assert not torch.equal(init[0].weight.flatten(), torch.tensor(cpu["params"][0])), "the workers trained it"
