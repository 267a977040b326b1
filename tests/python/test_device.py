"""The lazyjit device: transfers, laziness, sync points, errors, views, modules,
fallbacks and autograd, each against eager PyTorch."""
import copy

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close, make_tensor

from conftest import DEV, lazyjit

ALL_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8,
              torch.int16, torch.int32, torch.int64, torch.uint8, torch.bool, torch.complex64]


def _id(d):
    return str(d).split(".")[-1]


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(99)


def executed():
    return lazyjit.metrics()["graphs_executed"]


# ---- transfers ---------------------------------------------------------------------

@pytest.mark.parametrize("shape", [(3, 5), (), (0, 4), (2, 3, 4)], ids=["2d", "0d", "empty", "3d"])
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=_id)
def test_round_trip(dtype, shape):
    x = make_tensor(shape, dtype=dtype, device="cpu")
    d = x.to(DEV)
    assert d.device == torch.device("lazyjit", 0)
    assert d.dtype == dtype and d.shape == x.shape
    back = d.cpu()
    assert back.device.type == "cpu"
    assert_close(back, x, rtol=0, atol=0)
    # The copy is independent of the source.
    if x.numel():
        x.zero_()
        assert_close(d.cpu(), back, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=_id)
def test_round_trip_noncontiguous_source(dtype):
    x = make_tensor((6, 8), dtype=dtype, device="cpu")
    for v in (x.t(), x[::2, 1::3], x[:, :1].expand(6, 5)):
        assert_close(v.to(DEV).cpu(), v, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=_id)
def test_round_trip_through_view_on_device(dtype):
    x = make_tensor((6, 8), dtype=dtype, device="cpu")
    assert_close(x.to(DEV).t()[1::2].cpu(), x.t()[1::2], rtol=0, atol=0)


@pytest.mark.parametrize("src,dst", [(torch.float32, torch.float64), (torch.float64, torch.float32),
                                     (torch.float32, torch.int32), (torch.int64, torch.float32),
                                     (torch.float32, torch.bfloat16), (torch.float16, torch.float32),
                                     (torch.int32, torch.bool), (torch.bool, torch.float32),
                                     (torch.uint8, torch.int64)],
                         ids=lambda d: _id(d))
def test_dtype_conversion_on_device(src, dst):
    x = make_tensor((4, 7), dtype=src, device="cpu", low=-50, high=50)
    assert_close(x.to(DEV).to(dst).cpu(), x.to(dst), rtol=0, atol=0)


def test_pinned_host_memory():
    # Host memory pinned for the lazyjit device (the current accelerator): is_pinned()
    # holds for it and for nothing else, and it travels to the device and back.
    t = torch.randn(6)
    assert not t.is_pinned()
    p = t.pin_memory()
    assert p.is_pinned() and p.device.type == "cpu" and torch.equal(p, t)
    assert torch.empty(3, pin_memory=True).is_pinned()
    assert not p.clone().is_pinned()
    assert torch.equal(p.to(DEV).cpu(), t)
    assert torch.equal(torch.zeros(6).copy_(p.to(DEV) * 2), t * 2)


def test_copy_between_devices():
    x = torch.randn(3, 4)
    d = torch.empty(3, 4, device=DEV)
    d.copy_(x)
    out = torch.empty(3, 4)
    out.copy_(d * 2)
    assert_close(out, x * 2)
    # Broadcasting copy_ on the device.
    e = torch.zeros(2, 3, 4, device=DEV)
    e.copy_(d)
    assert_close(e.cpu(), x.expand(2, 3, 4))


def test_factories_on_device():
    assert_close(torch.zeros(2, 3, device=DEV).cpu(), torch.zeros(2, 3))
    assert_close(torch.ones(4, dtype=torch.int64, device=DEV).cpu(), torch.ones(4, dtype=torch.int64))
    assert_close(torch.full((2, 2), 7.5, device=DEV).cpu(), torch.full((2, 2), 7.5))
    assert_close(torch.arange(10, device=DEV).cpu(), torch.arange(10))
    e = torch.empty(3, 5, device=DEV)
    assert e.shape == (3, 5) and e.device.type == "lazyjit"


# ---- laziness -------------------------------------------------------------------------

def test_no_execution_until_cpu():
    x = torch.randn(8, 8).to(DEV)
    before = executed()
    y = (x * 2 + 1).relu()
    z = torch.mm(y, x.t()).sigmoid()
    assert executed() == before
    out = z.cpu()
    assert executed() > before
    xc = x.cpu()
    assert_close(out, torch.mm((xc * 2 + 1).relu(), xc.t()).sigmoid())


@pytest.mark.parametrize("sync_point", ["cpu", "item", "print", "str", "sync", "torch_sync",
                                        "numpy", "tolist"])
def test_sync_points(sync_point, capsys):
    x = torch.randn(5)
    d = x.to(DEV)
    lazyjit.sync()
    before = executed()
    y = (d * 3 - 1).abs().sum()
    yv = (d * 3 - 1).abs()
    assert executed() == before, "ops ran before a sync point"
    want = (x * 3 - 1).abs()
    if sync_point == "cpu":
        assert_close(yv.cpu(), want)
    elif sync_point == "item":
        assert y.item() == pytest.approx(want.sum().item(), rel=1e-6)
    elif sync_point == "print":
        print(yv)
        printed = capsys.readouterr().out
        assert "device='lazyjit:0'" in printed
        assert f"{want[0].item():.4f}" in printed
    elif sync_point == "str":
        s = str(yv)
        assert s == str(want)[:-1] + ", device='lazyjit:0')"
    elif sync_point == "sync":
        lazyjit.sync()
    elif sync_point == "torch_sync":
        torch.lazyjit.synchronize()
    elif sync_point == "numpy":
        assert_close(torch.from_numpy(yv.cpu().numpy()), want)
    elif sync_point == "tolist":
        assert yv.cpu().tolist() == pytest.approx(want.tolist(), rel=1e-6)
    assert executed() > before
    # Once synced, reading again runs nothing new. `.item()` of a value that
    # needs a small part of the graph runs that part only (tracer/read_apart.cpp):
    # then the value is computed, the rest still pending.
    if sync_point == "item":
        after = executed()
        assert y.item() == pytest.approx(want.sum().item(), rel=1e-6)
        assert executed() == after
        assert_close(yv.cpu(), want)
        assert executed() == after + 1
    after = executed()
    assert_close(yv.cpu(), want)
    assert executed() == after


def test_sync_with_nothing_pending_executes_nothing():
    lazyjit.sync()
    before = executed()
    lazyjit.sync()
    lazyjit.sync()
    assert executed() == before


def test_shape_strides_dtype_known_before_sync():
    x = torch.randn(4, 6)
    w = torch.randn(6, 3)
    dx, dw = x.to(DEV), w.to(DEV)
    lazyjit.sync()
    before = executed()
    cases = [
        lambda a, b: a * 2,
        lambda a, b: a.t() * 2,
        lambda a, b: a[:, ::2] + 1,
        lambda a, b: a.to(torch.float64) + 1,
        lambda a, b: a > 0,
        lambda a, b: (a > 0).int() + 1,
        lambda a, b: torch.mm(a, b),
        lambda a, b: a.sum(1),
        lambda a, b: a.t(),
        lambda a, b: a.reshape(2, 12),
        lambda a, b: a.unsqueeze(1).expand(4, 3, 6),
        lambda a, b: a[1:3, 2:],
        lambda a, b: a + b.sum(),
        lambda a, b: F.linear(a, b.t()),
        lambda a, b: torch.cat([a, a], 0),
    ]
    for i, f in enumerate(cases):
        want, got = f(x, w), f(dx, dw)
        assert got.shape == want.shape, i
        assert got.dtype == want.dtype, i
        assert got.device.type == "lazyjit", i
    assert executed() == before, "inspecting metadata must not run anything"


def test_strides_match_eager_for_noncontiguous_elementwise():
    # PyTorch's elementwise ops keep their input's memory layout; the meta kernels that
    # lazyjit runs say so, and the lazy tensor should report the same strides.
    x = torch.randn(4, 6)
    for f in (lambda a: a.t() * 2, lambda a: a.t().relu(), lambda a: a.t() + a.t()):
        want, got = f(x), f(x.to(DEV))
        assert got.stride() == want.stride()
        assert_close(got.cpu(), want)


def test_item_values():
    assert torch.tensor(2.5).to(DEV).mul(2).item() == 5.0
    assert torch.tensor(7, dtype=torch.int64).to(DEV).add(3).item() == 10
    assert torch.tensor(True).to(DEV).logical_not().item() is False
    x = torch.randn(10)
    assert x.to(DEV).max().item() == x.max().item()
    assert (x.to(DEV) > 0).sum().item() == (x > 0).sum().item()


def test_print_contents(capsys):
    x = torch.arange(6, dtype=torch.float32).reshape(2, 3) / 4
    print(x.to(DEV) + 1)
    out = capsys.readouterr().out
    assert "device='lazyjit:0'" in out
    for v in (x + 1).flatten().tolist():
        assert f"{v:.4f}" in out
    assert repr(x.to(DEV).double()).endswith("device='lazyjit:0', dtype=torch.float64)")


def _branchy(t):
    """Python control flow on tensor values: an if on the sum's sign, then a loop whose
    trip count is the number of halvings until the largest magnitude is at most 0.5.
    Returns the result and the path Python took."""
    path = []
    if t.sum() > 0:  # Tensor.__bool__: a sync on lazyjit
        path.append("positive")
        t = t * 2
    else:
        path.append("not positive")
        t = t - 1
    n = 0
    while bool(t.abs().max() > 0.5) and n < 64:
        t = t * 0.5
        n += 1
    path.append(n)
    return t, path


@pytest.mark.parametrize("sign, branch", [(1.0, "positive"), (-1.0, "not positive")])
def test_python_control_flow_on_values(sign, branch):
    # Data whose sum has the given sign, so each case takes the other branch; the
    # decisions lazyjit's values lead Python to are eager's, and so are the results.
    x = (torch.rand(16) + 0.25) * sign
    x[3] = -x[3]  # not all one sign
    got, got_path = _branchy(x.to(DEV))
    want, want_path = _branchy(x)
    assert want_path[0] == branch and want_path[1] >= 1, want_path  # the data exercise what they should
    assert got_path == want_path
    assert_close(got.cpu(), want)


# ---- device mismatch --------------------------------------------------------------

@pytest.mark.parametrize("op", [
    pytest.param(lambda a, b: a + b, id="add"),
    pytest.param(lambda a, b: b * a, id="mul_cpu_first"),
    pytest.param(lambda a, b: torch.mm(a, b.t()), id="mm"),
    pytest.param(lambda a, b: torch.where(a > 0, a, b), id="where"),
    pytest.param(lambda a, b: a.add_(b), id="add_"),
    pytest.param(lambda a, b: torch.cat([a, b]), id="cat"),
    pytest.param(lambda a, b: torch.maximum(a, b[0]), id="maximum_1d_cpu"),
])
def test_device_mismatch_error(op):
    a = torch.randn(3, 4).to(DEV)
    b = torch.randn(3, 4)
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        op(a, b)


def test_cpu_0d_tensor_is_allowed():
    x = torch.randn(3, 4)
    s = torch.tensor(2.5)
    assert_close((x.to(DEV) * s).cpu(), x * s)
    assert_close((s - x.to(DEV)).cpu(), s - x)


# ---- views and in-place ---------------------------------------------------------------

def _both(fn, *tensors):
    eager = [t.clone() for t in tensors]
    lazy = [t.to(DEV) for t in tensors]
    r_e = fn(*eager)
    r_l = fn(*lazy)
    return eager, lazy, r_e, r_l


@pytest.mark.parametrize("name", ["view_add_", "transpose_mul_", "slice_add_", "step_slice_fill",
                                  "select_copy_", "unsqueeze_relu_", "chained_views",
                                  "diagonal_add_", "view_of_view_after_write", "narrow_clamp_",
                                  "expand_then_write_base"])
def test_inplace_through_views(name):
    def fn(x, y):
        if name == "view_add_":
            x.view(-1)[3:9].add_(y.view(-1)[:6])
        elif name == "transpose_mul_":
            x.t().mul_(2)
            x.transpose(0, 1)[1].add_(1)
        elif name == "slice_add_":
            x[1:3, 2:].add_(y[1:3, 2:])
        elif name == "step_slice_fill":
            x[::2, 1::2].fill_(-1.0)
            x[1::2].zero_()
        elif name == "select_copy_":
            x[2].copy_(y[0] * 10)
            x[:, 0] = y[:, 1]
        elif name == "unsqueeze_relu_":
            x.unsqueeze(0)[0, :, 1:].relu_()
        elif name == "chained_views":
            x.t()[1:4].reshape(-1).view(3, 4)[1].mul_(-3)
        elif name == "diagonal_add_":
            x[:, :4].diagonal().add_(100)
        elif name == "view_of_view_after_write":
            v = x.view(24)
            x.add_(1)
            v[::5].mul_(2)
            return v * 1
        elif name == "narrow_clamp_":
            x.narrow(1, 1, 3).clamp_(-0.5, 0.5)
        elif name == "expand_then_write_base":
            e = x[:1].expand(3, 6)
            x[0].add_(5)
            return e + 0
        return x * 1

    x = torch.randn(4, 6)
    y = torch.randn(4, 6)
    (xe, ye), (xl, yl), re_, rl = _both(fn, x, y)
    assert_close(rl.cpu(), re_)
    # The base sees writes made through its views.
    assert_close(xl.cpu(), xe)
    assert_close(yl.cpu(), ye)


def test_view_shares_storage_with_base():
    x = torch.zeros(2, 3).to(DEV)
    v = x.view(6)
    t = x.t()
    v[1] = 5.0
    t[2, 1] = 7.0
    want = torch.zeros(2, 3)
    want.view(6)[1] = 5.0
    want.t()[2, 1] = 7.0
    assert_close(x.cpu(), want)
    assert_close(v.cpu(), want.view(6))
    assert_close(t.cpu(), want.t())


def test_write_after_read_keeps_old_value():
    x = torch.randn(5)
    d = x.to(DEV)
    old = d * 1
    d.add_(10)
    assert_close(old.cpu(), x)
    assert_close(d.cpu(), x + 10)


def test_inplace_on_input_across_syncs():
    x = torch.randn(4, 4)
    d = x.to(DEV)
    e = x.clone()
    for _ in range(3):
        d.mul_(0.5).add_(1)
        e.mul_(0.5).add_(1)
        assert_close(d.cpu(), e)


# ---- modules --------------------------------------------------------------------------

class Block(torch.nn.Module):
    def __init__(self, width=16):
        super().__init__()
        self.fc1 = torch.nn.Linear(width, 3 * width)
        self.fc2 = torch.nn.Linear(3 * width, width)
        self.norm = torch.nn.LayerNorm(width)

    def forward(self, x):
        h = F.gelu(self.fc1(x), approximate="tanh")
        return self.norm(x + self.fc2(h))


@pytest.mark.parametrize("model_fn", [
    pytest.param(lambda: Block(16), id="mlp_block"),
    pytest.param(lambda: torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.SiLU(),
                                             torch.nn.Linear(32, 16), torch.nn.Tanh()), id="sequential"),
    pytest.param(lambda: torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Sigmoid(),
                                             torch.nn.Softmax(-1)), id="softmax"),
])
def test_module_forward(model_fn):
    torch.manual_seed(0)
    m = model_fn().eval()
    ml = copy.deepcopy(m).to("lazyjit")
    assert all(p.device.type == "lazyjit" for p in ml.parameters())
    x = torch.randn(8, 16)
    with torch.no_grad():
        want = m(x)
        for _ in range(2):  # second pass runs the cached program
            got = ml(x.to(DEV))
            assert_close(got.cpu(), want, rtol=1e-5, atol=1e-5)


def test_module_helper_method():
    # generate_methods_for_privateuse1_backend adds Module.lazyjit() / Tensor.lazyjit().
    m = torch.nn.Linear(4, 2)
    x = torch.randn(3, 4)
    want = m(x)
    m2 = copy.deepcopy(m).lazyjit()
    assert m2.weight.device.type == "lazyjit"
    assert x.lazyjit().is_lazyjit
    assert_close(m2(x.lazyjit()).detach().cpu(), want.detach())


# ---- fallbacks ----------------------------------------------------------------------

@pytest.mark.parametrize("name,fn,op", [
    ("nonzero", lambda t: torch.nonzero(t > 0), "aten::nonzero"),
    ("masked_select", lambda t: torch.masked_select(t * 2, t > 0), "aten::masked_select"),
    ("logcumsumexp_no_meta", lambda t: torch.logcumsumexp(t + 1, 0), "aten::_logcumsumexp"),
    ("unique_consecutive", lambda t: torch.unique_consecutive(t.round()), "aten::unique_consecutive"),
])
def test_fallback_op(name, fn, op):
    x = torch.randn(6, 5)
    d = x.to(DEV)
    before = lazyjit.metrics()["fallbacks"].get(op, 0)
    got = fn(d)
    assert got.device.type == "lazyjit"
    assert_close(got.cpu(), fn(x))
    assert lazyjit.metrics()["fallbacks"].get(op, 0) == before + 1
    # The result keeps working as a lazyjit tensor.
    assert_close((got * 3).cpu(), fn(x) * 3)


def test_fallback_counts_per_call():
    lazyjit.reset_metrics()
    x = torch.randn(10).to(DEV)
    for _ in range(3):
        torch.nonzero(x > 0).cpu()
    assert lazyjit.metrics()["fallbacks"]["aten::nonzero"] == 3


def test_fallback_result_in_later_graph():
    x = torch.randn(12)
    d = x.to(DEV)
    sel = torch.masked_select(d.exp(), d > 0)
    out = (sel * 2 + sel.sum()).relu()
    xs = torch.masked_select(x.exp(), x > 0)
    assert_close(out.cpu(), (xs * 2 + xs.sum()).relu())


# ---- autograd ----------------------------------------------------------------------

def _mlp():
    return torch.nn.Sequential(torch.nn.Linear(6, 12), torch.nn.GELU(), torch.nn.Linear(12, 12),
                               torch.nn.Tanh(), torch.nn.Linear(12, 3))


def test_autograd_mlp_grads_match_eager():
    torch.manual_seed(3)
    m = _mlp()
    ml = copy.deepcopy(m).to(DEV)
    x, y = torch.randn(5, 6), torch.randn(5, 3)
    loss = F.mse_loss(m(x), y)
    loss.backward()
    ll = F.mse_loss(ml(x.to(DEV)), y.to(DEV))
    ll.backward()
    assert_close(ll.cpu(), loss.detach())
    for (n, p), (_, q) in zip(m.named_parameters(), ml.named_parameters()):
        assert q.grad is not None, n
        assert q.grad.device.type == "lazyjit", n
        assert_close(q.grad.cpu(), p.grad, rtol=1e-5, atol=1e-6, msg=n)


def test_autograd_input_grad_and_training_steps():
    torch.manual_seed(4)
    m = _mlp()
    ml = copy.deepcopy(m).to(DEV)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    optl = torch.optim.SGD(ml.parameters(), lr=0.1)
    for step in range(3):
        x, y = torch.randn(5, 6), torch.randn(5, 3)
        xe = x.clone().requires_grad_()
        xl = x.to(DEV).requires_grad_()
        opt.zero_grad()
        optl.zero_grad()
        le = F.mse_loss(m(xe), y)
        le.backward()
        ll = F.mse_loss(ml(xl), y.to(DEV))
        ll.backward()
        assert_close(xl.grad.cpu(), xe.grad, rtol=1e-5, atol=1e-6)
        opt.step()
        optl.step()
    for (n, p), (_, q) in zip(m.named_parameters(), ml.named_parameters()):
        assert_close(q.detach().cpu(), p.detach(), rtol=1e-5, atol=1e-6, msg=n)


def test_autograd_elementwise_grads():
    x = torch.randn(7, 3, dtype=torch.float64)
    fns = [lambda t: (t * torch.sigmoid(t)).sum(),
           lambda t: (torch.tanh(t) ** 2 + t.exp() / (1 + t * t)).sum(),
           lambda t: torch.where(t > 0, t.abs().sqrt(), -t).sum(),
           lambda t: F.gelu(t).mul(t.clamp(-0.5, 0.5)).sum()]
    for fn in fns:
        xe = x.clone().requires_grad_()
        fn(xe).backward()
        xl = x.to(DEV).requires_grad_()
        fn(xl).backward()
        assert_close(xl.grad.cpu(), xe.grad)
