"""Step mode (each op runs at once) and op hooks, against lazy mode and eager."""
import copy

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close
from torch.utils._python_dispatch import TorchDispatchMode

from conftest import DEV, lazyjit, run_python


class Block(torch.nn.Module):
    def __init__(self, width=12):
        super().__init__()
        self.fc1 = torch.nn.Linear(width, 2 * width)
        self.fc2 = torch.nn.Linear(2 * width, width)
        self.norm = torch.nn.LayerNorm(width)

    def forward(self, x):
        h = F.gelu(self.fc1(x), approximate="tanh")
        return self.norm(x + self.fc2(h) * torch.sigmoid(x)).clamp(min=-2.0)


def _run_model(mode, model, x, y):
    lazyjit.set_mode(mode)
    m = copy.deepcopy(model).to(DEV)
    out = m(x.to(DEV))
    loss = F.mse_loss(out, y.to(DEV))
    loss.backward()
    grads = [p.grad.cpu() for p in m.parameters()]
    result = out.detach().cpu(), loss.detach().cpu(), grads
    lazyjit.set_mode("lazy")
    return result


def test_mode_switch():
    assert lazyjit.mode() == "lazy"
    lazyjit.set_mode("step")
    assert lazyjit.mode() == "step"
    lazyjit.set_mode("lazy")
    assert lazyjit.mode() == "lazy"
    with pytest.raises(RuntimeError):
        lazyjit.set_mode("eager-ish")
    assert lazyjit.mode() == "lazy"


def test_step_mode_equals_lazy_and_eager():
    torch.manual_seed(0)
    model = Block()
    x, y = torch.randn(6, 12), torch.randn(6, 12)
    want = model(x)
    want_loss = F.mse_loss(want, y)
    want_loss.backward()
    want_grads = [p.grad for p in model.parameters()]
    lazy = _run_model("lazy", model, x, y)
    step = _run_model("step", model, x, y)
    for name, got in (("lazy", lazy), ("step", step)):
        assert_close(got[0], want.detach(), msg=name)
        assert_close(got[1], want_loss.detach(), msg=name)
        for g, w in zip(got[2], want_grads):
            assert_close(g, w, rtol=1e-5, atol=1e-6, msg=name)
    assert_close(step[0], lazy[0])


def test_step_mode_runs_ops_at_once_without_compiling(fresh):
    lazyjit.set_mode("step")
    x = torch.randn(5).to(DEV)
    before = lazyjit.metrics()
    y = (x * 2 + 1).tanh()
    after = lazyjit.metrics()
    assert after["step_ops"] - before["step_ops"] >= 3
    assert after["compiles"] == before["compiles"] == 0
    assert after["graphs_executed"] == before["graphs_executed"]
    assert_close(y.cpu(), (x.cpu() * 2 + 1).tanh())
    assert lazyjit.metrics()["compiles"] == 0


def test_switch_modes_mid_program():
    x = torch.randn(4, 4)
    d = x.to(DEV)
    a = d * 3            # pending in lazy mode
    lazyjit.set_mode("step")
    b = a.relu() + d     # step mode consumes a lazily recorded value
    lazyjit.set_mode("lazy")
    c = (b - 1).exp()    # lazy mode consumes a step-mode value
    assert_close(c.cpu(), ((x * 3).relu() + x - 1).exp())


def test_step_mode_inplace_and_views():
    x = torch.randn(4, 6)
    lazyjit.set_mode("step")
    d = x.to(DEV)
    d.t()[1:3].mul_(-1)
    d[::2].add_(10)
    e = x.clone()
    e.t()[1:3].mul_(-1)
    e[::2].add_(10)
    assert_close(d.cpu(), e)


def test_step_mode_env_var():
    code = (
        "import torch, lazyjit\n"
        "assert lazyjit.mode() == 'step', lazyjit.mode()\n"
        "torch.manual_seed(0)\n"
        "x = torch.randn(4, 8)\n"
        "w = torch.randn(8, 3)\n"
        "names = []\n"
        "h = lazyjit.add_op_hook(lambda n, i, o: names.append(n))\n"
        "got = torch.nn.functional.gelu(x.to('lazyjit') @ w.to('lazyjit')).cpu()\n"
        "torch.testing.assert_close(got, torch.nn.functional.gelu(x @ w), rtol=0, atol=0)\n"
        "m = lazyjit.metrics()\n"
        "assert m['compiles'] == 0 and m['step_ops'] >= 2, m\n"
        "assert 'aten::mm' in names and 'aten::gelu' in names, names\n"
        "lazyjit.set_mode('lazy')\n"
        "assert lazyjit.mode() == 'lazy'\n"
        "print('ok')\n")
    proc = run_python(code, {"LAZYJIT_MODE": "step"})
    assert proc.stdout.strip().endswith("ok")


# ---- hooks -------------------------------------------------------------------------

class OpNames(TorchDispatchMode):
    """The ATen ops an eager program dispatches: the oracle for hook order."""

    def __init__(self):
        super().__init__()
        self.names = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        s = func._schema
        self.names.append(s.name + ("." + s.overload_name if s.overload_name else ""))
        return func(*args, **(kwargs or {}))


def program(x, w):
    y = x + w
    z = y * 2
    r = torch.relu(z)
    r.add_(1)
    s = torch.sub(r, x, alpha=0.5)
    m = torch.mm(s, w)
    g = torch.where(m > 0, m, torch.sigmoid(m))
    return g.sum(0)


def _replay(name, inputs):
    """Runs the op `name` eagerly on (copies of) its hooked inputs."""
    ns, rest = name.split("::")
    base, _, overload = rest.partition(".")
    op = getattr(getattr(getattr(torch.ops, ns), base), overload or "default")
    args, kwargs = [], {}
    for spec, a in zip(op._schema.arguments, inputs):
        a = a.clone() if isinstance(a, torch.Tensor) else a
        if spec.kwarg_only:
            kwargs[spec.name] = a
        else:
            args.append(a)
    out = op(*args, **kwargs)
    return list(out) if isinstance(out, (tuple, list)) else [out]


@pytest.fixture
def hook_events():
    events = []
    handles = []

    def add():
        h = lazyjit.add_op_hook(lambda name, ins, outs: events.append((name, ins, outs)))
        handles.append(h)
        return h

    yield events, add
    for h in handles:
        h.remove()


def test_hooks_called_once_per_op_in_order(hook_events):
    events, add = hook_events
    x, w = torch.randn(4, 4), torch.randn(4, 4)
    xe, we = x.clone(), w.clone()
    with OpNames() as oracle:
        want = program(xe, we)
    xl, wl = x.to(DEV), w.to(DEV)
    lazyjit.set_mode("step")
    add()
    got = program(xl, wl)
    names = [e[0] for e in events]
    assert names == oracle.names, f"hooked {names}\n eager {oracle.names}"
    assert names[:4] == ["aten::add.Tensor", "aten::mul.Tensor", "aten::relu", "aten::add_.Tensor"]
    lazyjit.set_mode("lazy")
    assert_close(got.cpu(), want)


def test_hook_inputs_outputs_are_cpu_tensors_with_right_values(hook_events):
    events, add = hook_events
    x, w = torch.randn(4, 4), torch.randn(4, 4)
    xl, wl = x.to(DEV), w.to(DEV)
    lazyjit.set_mode("step")
    add()
    program(xl, wl)
    assert events
    for name, ins, outs in events:
        tensors = [t for t in list(ins) + list(outs) if isinstance(t, torch.Tensor)]
        assert tensors, name
        assert all(t.device.type == "cpu" for t in tensors), name
        assert outs, name
        # Replaying the op eagerly on its hooked inputs gives its hooked outputs.
        want = _replay(name, ins)
        assert len(want) == len(outs), name
        for g, w_ in zip(outs, want):
            assert_close(g, w_, rtol=0, atol=0, msg=name)
    # First op: x + w with its actual operands.
    name, ins, outs = events[0]
    assert name == "aten::add.Tensor"
    assert_close(ins[0], x, rtol=0, atol=0)
    assert_close(ins[1], w, rtol=0, atol=0)
    assert_close(outs[0], x + w, rtol=0, atol=0)


def test_hook_inputs_are_snapshots_before_inplace(hook_events):
    events, add = hook_events
    x = torch.randn(5)
    xl = x.to(DEV)
    lazyjit.set_mode("step")
    add()
    xl.mul_(3)
    xl.add_(1)
    assert [e[0] for e in events] == ["aten::mul_.Tensor", "aten::add_.Tensor"]
    assert_close(events[0][1][0], x, rtol=0, atol=0)          # before mul_
    assert_close(events[0][2][0], x * 3, rtol=0, atol=0)      # after mul_
    assert_close(events[1][1][0], x * 3, rtol=0, atol=0)      # before add_
    assert_close(events[1][2][0], x * 3 + 1, rtol=0, atol=0)  # after add_


def test_hook_on_device_copy_has_operands(hook_events):
    # copy_ between two lazyjit tensors is an op like any other: the hook should see
    # its operands and result.
    events, add = hook_events
    a, b = torch.randn(3, 4), torch.randn(3, 4)
    al, bl = a.to(DEV), b.to(DEV)
    lazyjit.set_mode("step")
    add()
    al[1].copy_(bl[2])
    copies = [e for e in events if e[0] == "aten::copy_"]
    assert len(copies) == 1, [e[0] for e in events]
    name, ins, outs = copies[0]
    assert len(ins) >= 2, f"copy_ hooked without its inputs: {ins}"
    assert_close(ins[1], b[2], rtol=0, atol=0)
    assert_close(outs[0], b[2], rtol=0, atol=0)


def test_hook_remove_stops_calls(hook_events):
    events, add = hook_events
    other = []
    x = torch.randn(3).to(DEV)
    lazyjit.set_mode("step")
    h1 = add()
    h2 = lazyjit.add_op_hook(lambda n, i, o: other.append(n))
    try:
        (x + 1).cpu()
        n1, n2 = len(events), len(other)
        assert n1 >= 1 and n1 == n2
        h1.remove()
        (x * 2).cpu()
        assert len(events) == n1, "a removed hook was still called"
        assert len(other) > n2, "removing one hook removed the other"
        h2.remove()
        n2 = len(other)
        (x - 1).exp().cpu()
        assert len(other) == n2
    finally:
        h2.remove()


def test_hooks_not_called_in_lazy_mode(hook_events):
    # Hooks are a step-mode facility: lazy mode runs fused programs, not ops.
    events, add = hook_events
    x = torch.randn(3).to(DEV)
    add()
    assert_close((x * 2 + 1).cpu(), x.cpu() * 2 + 1)
    assert [e[0] for e in events if not e[0].startswith("aten::copy")] == []


def test_hook_exception_propagates(hook_events):
    x = torch.randn(3).to(DEV)
    lazyjit.set_mode("step")

    def bad(name, ins, outs):
        raise ValueError("hook failed")

    h = lazyjit.add_op_hook(bad)
    try:
        with pytest.raises(Exception, match="hook failed"):
            x + 1
    finally:
        h.remove()
    assert_close((x + 1).cpu(), x.cpu() + 1)
