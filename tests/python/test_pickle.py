"""Pickling lazyjit tensors (issue 48, defect 9): pickle.dumps failed with
"tensor has no lazyjit storage" while torch.save and copy.deepcopy worked.
Queues and process pools pickle tensors. Each case compares with the same ops
run eagerly on the CPU."""
import copy
import io
import multiprocessing
import pickle

import pytest
import torch

import lazyjit  # noqa: F401


def lz(t):
    return t.to("lazyjit")


def check_lazy(got, want):
    assert got.device.type == "lazyjit", got.device
    assert got.dtype == want.dtype and got.shape == want.shape and got.stride() == want.stride()
    torch.testing.assert_close(got.cpu(), want, rtol=0, atol=0)


def round_trip(t):
    return pickle.loads(pickle.dumps(t))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.bool, torch.bfloat16])
def test_pickle_round_trip(dtype):
    x = (torch.arange(12) - 5).reshape(3, 4).to(dtype)
    check_lazy(round_trip(lz(x)), x)


def test_pickle_pending_ops():
    x = torch.randn(5, 6)
    y = lz(x)
    y = (y * 3 + 1).relu()  # recorded, not run
    y.add_(2)               # in place, still pending
    check_lazy(round_trip(y), (x * 3 + 1).relu() + 2)


def test_pickle_views():
    x = torch.randn(6, 8)
    a = lz(x) * 2  # pending
    for view, want in [(a[1:4, 2:7], (x * 2)[1:4, 2:7]), (a.t(), (x * 2).t()), (a[:, ::3], (x * 2)[:, ::3]),
                       (a[2], (x * 2)[2])]:
        got = round_trip(view)
        assert got.device.type == "lazyjit"
        torch.testing.assert_close(got.cpu(), want, rtol=0, atol=0)
        assert got.shape == want.shape and got.stride() == want.stride()


def test_pickle_keeps_view_sharing_within_one_pickle():
    # torch.save keeps two views of one storage as one storage; so does its
    # legacy format through pickle of a container, as for CPU tensors.
    base = lz(torch.arange(10.0))
    a, b = torch.load(io.BytesIO(_legacy_bytes([base, base[3:7]])), weights_only=False)
    b.mul_(-1)
    want = torch.arange(10.0)
    want[3:7] *= -1
    check_lazy(a, want)


def _legacy_bytes(obj):
    f = io.BytesIO()
    torch.save(obj, f, _use_new_zipfile_serialization=False)
    return f.getvalue()


def test_pickle_requires_grad_leaf():
    x = torch.randn(4, 3)
    w = lz(x).requires_grad_()
    got = round_trip(w)
    assert got.requires_grad and got.is_leaf
    (got * got).sum().backward()
    torch.testing.assert_close(got.grad.cpu(), 2 * x)
    p = torch.nn.Parameter(lz(x))
    gp = round_trip(p)
    assert isinstance(gp, torch.nn.Parameter) and gp.requires_grad
    check_lazy(gp.detach(), x)


def test_pickle_module_state_and_deepcopy_agree():
    m = torch.nn.Linear(3, 2).to("lazyjit")
    state = round_trip(m.state_dict())
    copied = copy.deepcopy(m.state_dict())
    for k, v in m.state_dict().items():
        check_lazy(state[k], v.cpu())
        check_lazy(copied[k], v.cpu())


def test_legacy_torch_save():
    x = torch.randn(3, 5)
    got = torch.load(io.BytesIO(_legacy_bytes(lz(x) + 1)), weights_only=False)
    check_lazy(got, x + 1)


def _child(q_in, q_out, done):
    import lazyjit  # noqa: F401

    t = q_in.get(timeout=120)
    q_out.put((t.device.type, t.shape, t.stride(), t.cpu(), (t * 2).cpu()))
    q_out.put(lz(torch.arange(6.0)).reshape(2, 3) + 10)  # a lazyjit tensor back, with pending ops
    # A sender of shared-memory tensors lives until they are received (torch.multiprocessing's rule).
    done.wait(timeout=120)


def test_multiprocessing_queue_round_trip():
    ctx = multiprocessing.get_context("spawn")
    q_in, q_out, done = ctx.Queue(), ctx.Queue(), ctx.Event()
    p = ctx.Process(target=_child, args=(q_in, q_out, done))
    p.start()
    try:
        x = torch.randn(4, 6)
        sent = (lz(x) - 1)[1:3, ::2]  # a view, with pending ops
        q_in.put(sent)
        device, shape, stride, values, doubled = q_out.get(timeout=120)
        back = q_out.get(timeout=120)
        done.set()
        p.join(timeout=60)
    finally:
        if p.is_alive():
            p.kill()
    want = (x - 1)[1:3, ::2]
    assert device == "lazyjit" and shape == want.shape and stride == want.stride()
    torch.testing.assert_close(values, want, rtol=0, atol=0)
    torch.testing.assert_close(doubled, want * 2, rtol=0, atol=0)
    check_lazy(back, torch.arange(6.0).reshape(2, 3) + 10)
    assert p.exitcode == 0


def test_cpu_tensors_still_share_memory_through_queues():
    # The registration must leave CPU tensors on torch's own path (shared memory).
    from multiprocessing.reduction import ForkingPickler

    t = torch.arange(4.0)
    data = ForkingPickler.dumps(t)
    got = pickle.loads(data)
    assert got.is_shared()
    torch.testing.assert_close(got, t)
