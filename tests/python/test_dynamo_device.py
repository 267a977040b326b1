"""torch.compile(backend="lazyjit") on tensors already on the lazyjit device
(python/lazyjit/dynamo.py, tracer/device_call.h): Dynamo's graph runs as one
captured program on the tensors' data, nothing recorded op by op, composed with
the lazy work around it. Eager PyTorch on CPU tensors is the oracle."""
import pytest
import torch

import lazyjit
import lazyjit.dynamo

DEV = "lazyjit"


pytestmark = pytest.mark.usefixtures("fresh_dynamo")


def compiled(fn, **kw):
    return torch.compile(fn, backend="lazyjit", **kw)


def chain(n):
    """A function of n elementwise ops."""
    def f(x):
        for k in range(n):
            x = x * 1.01 + 0.001 * k if k % 2 else torch.tanh(x)
        return x
    return f


def traced():
    return lazyjit.metrics()["ops_traced"]


@pytest.mark.parametrize("n", [4, 40])
def test_a_call_records_none_of_the_graphs_ops(n):
    f = chain(n)
    f_c = compiled(f)
    x = torch.randn(16, 16)
    xl = x.to(DEV)
    torch.testing.assert_close(f_c(xl).cpu(), f(x))  # captured on the first call
    lazyjit.sync()
    before = traced()
    for _ in range(3):
        out = f_c(xl)
    grown = traced() - before
    torch.testing.assert_close(out.cpu(), f(x))
    # Recorded op by op it grew by n a call; one program a call records nothing.
    assert grown == 0, f"{grown} ops recorded over 3 calls of a {n}-op graph"
    s = lazyjit.dynamo.stats()
    assert s["captures"] == 1 and s["device_calls"] == 4, s
    assert out.device.type == DEV


def test_pending_inputs_keep_eagers_order_and_values():
    def f(x, w):
        return (x @ w).relu() + x.sum()

    f_c = compiled(f)
    x, w = torch.randn(8, 8), torch.randn(8, 8)
    for step in range(3):
        xl, wl = x.to(DEV), w.to(DEV)
        xl = xl * 2 + step          # pending when the call starts
        got = f_c(xl, wl)
        later = got * 3 - xl        # outputs are ordinary lazyjit tensors
        want = f(x * 2 + step, w)
        torch.testing.assert_close(got.cpu(), want)
        torch.testing.assert_close(later.cpu(), want * 3 - (x * 2 + step))


def test_in_place_update_of_an_argument_after_a_pending_read():
    """A read recorded before the call sees the value before the call's write."""
    def f(x, y):
        x.add_(y)
        return x * 2

    f_c = compiled(f)
    for _ in range(2):
        x, y = torch.randn(6), torch.randn(6)
        xl, yl = x.clone().to(DEV), y.to(DEV)
        before = xl * 10            # recorded, reads xl as it is now
        got = f_c(xl, yl)
        xe = x.clone()
        want = f(xe, y)
        torch.testing.assert_close(got.cpu(), want)
        torch.testing.assert_close(xl.cpu(), xe)
        torch.testing.assert_close(before.cpu(), x * 10)
    assert lazyjit.dynamo.stats()["device_calls"] == 2


def test_in_place_update_of_a_view_argument_reaches_its_base():
    def f(v):
        v.mul_(3)
        return v.sum()

    f_c = compiled(f)
    b = torch.arange(12.0)
    bl = b.to(DEV)
    got = f_c(bl.view(3, 4)[:, 1:3])
    want = f(b.view(3, 4)[:, 1:3])
    torch.testing.assert_close(got.cpu(), want)
    torch.testing.assert_close(bl.cpu(), b)


def test_an_output_that_views_an_argument_is_a_view_of_it():
    def f(x):
        x.add_(1)
        return x.t(), x[1:]

    f_c = compiled(f)
    x = torch.randn(3, 4)
    xl = x.clone().to(DEV)
    t, tail = f_c(xl)
    xe = x.clone()
    wt, wtail = f(xe)
    torch.testing.assert_close(t.cpu(), wt)
    assert t.stride() == wt.stride() and tail.stride() == wtail.stride()
    tail.zero_()                   # a write through the returned view reaches xl, as in eager
    wtail.zero_()
    torch.testing.assert_close(xl.cpu(), xe)


def test_training_on_the_device_equals_cpu_eager():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
    ref = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
    ref.load_state_dict(m.state_dict())
    m = m.to(DEV)
    m_c = compiled(m)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
    opt_ref = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    losses, want = [], []
    for step in range(5):
        x, y = torch.randn(8, 16), torch.randn(8, 4)
        loss = torch.nn.functional.mse_loss(m_c(x.to(DEV)), y.to(DEV))
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
        loss_ref = torch.nn.functional.mse_loss(ref(x), y)
        loss_ref.backward()
        opt_ref.step()
        opt_ref.zero_grad()
        want.append(loss_ref.item())
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(want), rtol=1e-5, atol=1e-6)
    for p, q in zip(m.parameters(), ref.parameters()):
        torch.testing.assert_close(p.cpu(), q.detach(), rtol=1e-5, atol=1e-6)
    s = lazyjit.dynamo.stats()
    # Forward and backward each one program a step; the optimizer stays recorded.
    assert s["device_calls"] == 10 and s["captures"] == 2, s


def test_a_graph_whose_capture_fails_still_answers_on_the_device():
    """A data-dependent size (captured by Dynamo) needs a value while recording:
    the call runs recorded on the device, and stats() says why."""
    torch._dynamo.config.capture_dynamic_output_shape_ops = True
    try:
        def f(x):
            return x[x > 0].sum() * x

        f_c = compiled(f)
        x = torch.randn(16)
        with pytest.warns(UserWarning, match="runs through ATen op by op"):
            got = f_c(x.to(DEV))
        assert got.device.type == DEV
        torch.testing.assert_close(got.cpu(), f(x))
        torch.testing.assert_close(f_c((x + 1).to(DEV)).cpu(), f(x + 1))
        s = lazyjit.dynamo.stats()
        assert s["eager_graphs"] == 1 and s["device_calls"] == 0, s
        assert "needs a tensor's value while the graph is recorded" in s["eager_reasons"][0]
    finally:
        torch._dynamo.config.capture_dynamic_output_shape_ops = False


def test_factories_in_the_graph_make_lazyjit_tensors():
    def f(x):
        i = torch.arange(x.shape[0], device=x.device, dtype=x.dtype)
        return x + i, torch.ones(2, device=x.device)

    f_c = compiled(f)
    x = torch.randn(5)
    a, b = f_c(x.to(DEV))
    assert a.device.type == DEV and b.device.type == DEV
    torch.testing.assert_close(a.cpu(), f(x)[0])
    torch.testing.assert_close(b.cpu(), torch.ones(2))


def _add_to_x_return_y(x, y):
    x.add_(100)
    return y


def _copy_return_x(x, y):
    x.copy_(y)
    return x


def _scale_x_sum_both(x, y):
    x.mul_(2)
    return x.sum() + y.sum()


@pytest.mark.parametrize("fn,views", [
    (_add_to_x_return_y, lambda b: (b.view(4, 4)[:, 1], b.view(4, 4)[:, 2])),
    (_copy_return_x, lambda b: (b[::2], b[1::2])),
    (_scale_x_sum_both, lambda b: (b.view(4, 4).t(), b[:4])),
])
def test_arguments_that_are_views_of_one_device_buffer(fn, views):
    """Views of one lazyjit buffer as arguments (AOTAutograd's synthetic base):
    values, strides and the buffer as eager leaves them, run as programs."""
    b = torch.arange(16.0)
    be, bl = b.clone(), b.to(DEV)
    want = fn(*views(be))
    got = compiled(fn)(*views(bl))
    assert got.device.type == DEV and got.stride() == want.stride()
    torch.testing.assert_close(got.cpu(), want)
    torch.testing.assert_close(bl.cpu(), be)
    assert lazyjit.dynamo.stats()["device_calls"] == 1
