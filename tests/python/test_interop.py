"""What PyTorch code around a model does with lazyjit tensors (issue 16, found by running
transformers' own model tests): deepcopy, torch.save/torch.load, storages, dtype-reinterpreting
views, Module.to keeping Parameter objects, torch.autocast. Eager PyTorch on the CPU is the
oracle."""
import copy
import io

import pytest
import torch
from torch.testing import assert_close

from conftest import DEV, lazyjit, run_python

THIS_FILE = "test_interop.py"


def _same(got, want):
    assert got.device.type == "lazyjit"
    assert got.dtype == want.dtype and got.shape == want.shape and got.stride() == want.stride()
    assert_close(got.cpu(), want, rtol=0, atol=0)


# ---- deepcopy -------------------------------------------------------------------------

def test_deepcopy_tensor_pending_and_materialized():
    x = torch.randn(2, 3)
    xl = x.to(DEV)
    _same(copy.deepcopy(xl), x)
    yl = xl * 2 + 1  # pending: not computed yet
    yl.requires_grad_()
    c = copy.deepcopy(yl)
    _same(c, x * 2 + 1)
    assert c.requires_grad and c.is_leaf
    # The copy owns its memory.
    c.detach().add_(1)
    _same(yl.detach(), x * 2 + 1)


def test_deepcopy_keeps_views_sharing_and_geometry():
    base = torch.arange(12.0).reshape(3, 4)
    bl = base.to(DEV)
    t, s = bl.t(), bl[1:, 2:]
    ct, cs = copy.deepcopy([t, s])
    _same(ct, base.t())
    _same(cs, base[1:, 2:])
    assert ct.untyped_storage().data_ptr() == cs.untyped_storage().data_ptr()
    assert ct.untyped_storage().data_ptr() != bl.untyped_storage().data_ptr()
    ct.mul_(10)  # a write through one copy shows in the other, as in eager
    want_t, want_s = copy.deepcopy([base.t(), base[1:, 2:]])
    want_t.mul_(10)
    _same(cs, want_s)


def test_deepcopy_module_with_grads_and_shared_parameters():
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Embedding(10, 4), torch.nn.Linear(4, 10))
    ref[1].weight = ref[0].weight  # tied, like an LM head
    m = copy.deepcopy(ref).to(DEV)
    for model, dev in ((ref, "cpu"), (m, DEV)):
        model(torch.tensor([1, 2, 3]).to(dev)).sum().backward()
    want, got = copy.deepcopy(ref), copy.deepcopy(m)
    assert got[1].weight is got[0].weight
    assert got[0].weight is not m[0].weight
    assert isinstance(got[0].weight, torch.nn.Parameter) and got[0].weight.requires_grad
    for p, q in zip(got.parameters(), want.parameters()):
        _same(p.detach(), q.detach())
        assert (p.grad is None) == (q.grad is None)  # Parameter.__deepcopy__ drops grads


def test_deepcopy_tensor_with_grad():
    x = torch.randn(3, requires_grad=True)
    x.grad = torch.randn(3)
    xl = x.detach().to(DEV).requires_grad_()
    xl.grad = x.grad.to(DEV)
    c, want = copy.deepcopy(xl), copy.deepcopy(x)
    assert c.requires_grad and want.requires_grad
    _same(c.detach(), want.detach())
    _same(c.grad, want.grad)


# ---- storages, torch.save / torch.load ------------------------------------------------

def test_untyped_storage_cpu():
    x = torch.arange(6, dtype=torch.float32)
    xl = x.to(DEV) + 0  # pending
    got = xl.untyped_storage().cpu()
    assert got.device.type == "cpu"
    assert bytes(got) == bytes(x.untyped_storage())


def _roundtrip(obj, **load_kwargs):
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return torch.load(buf, **load_kwargs)


@pytest.mark.parametrize("kwargs", [{}, {"weights_only": False}, {"map_location": "cpu"},
                                    {"map_location": "lazyjit"}, {"map_location": torch.device("cpu")}],
                         ids=["default", "weights_only_false", "map_cpu", "map_lazyjit", "map_cpu_device"])
def test_save_load_tensors(kwargs):
    base = torch.randn(4, 5)
    xl = base.to(DEV)
    obj = {"x": xl, "t": xl.t(), "i": torch.arange(7).to(DEV) * 3, "h": (xl * 2).half()}
    got = _roundtrip(obj, **kwargs)
    want_dev = "cpu" if "cpu" in str(kwargs.get("map_location", "")) else "lazyjit"
    want = {"x": base, "t": base.t(), "i": torch.arange(7) * 3, "h": (base * 2).half()}
    for k, w in want.items():
        assert got[k].device.type == want_dev, k
        assert got[k].dtype == w.dtype and got[k].stride() == w.stride(), k
        assert_close(got[k].cpu(), w, rtol=0, atol=0)
    # Views saved together still share their storage.
    assert got["x"].untyped_storage().data_ptr() == got["t"].untyped_storage().data_ptr()
    if want_dev == "lazyjit":
        got["x"].add_(1)
        assert_close(got["t"].cpu(), base.t() + 1, rtol=0, atol=0)


def test_state_dict_roundtrip():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.LayerNorm(8), torch.nn.BatchNorm1d(8))
    ref = copy.deepcopy(m)
    m.to(DEV)
    sd = _roundtrip(m.state_dict())
    assert all(v.device.type == "lazyjit" for v in sd.values())
    fresh = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.LayerNorm(8), torch.nn.BatchNorm1d(8)).to(DEV)
    fresh.load_state_dict(sd)
    x = torch.randn(3, 4)
    assert_close(fresh(x.to(DEV)).cpu(), ref(x), rtol=1e-5, atol=1e-6)
    cpu_sd = _roundtrip(m.state_dict(), map_location="cpu")
    ref.load_state_dict(cpu_sd)
    assert_close(ref(x), fresh(x.to(DEV)).cpu(), rtol=1e-5, atol=1e-6)


# ---- dtype-reinterpreting views --------------------------------------------------------

@pytest.mark.parametrize("make", [
    lambda x: x.view(torch.int32),
    lambda x: x.view(torch.uint8),
    lambda x: x.view(torch.float16),
    lambda x: x.view(torch.int64),
    lambda x: torch.view_as_complex(x.view(-1, 2)),
    lambda x: torch.view_as_real(x.to(torch.complex64)),
], ids=["int32", "uint8", "float16", "int64", "view_as_complex", "view_as_real"])
def test_dtype_reinterpreting_views_match_eager(make):
    # The graph has no bitcast: such a view is a lazyjit tensor of another dtype over
    # the base's storage, and ops on it run through their CPU kernels, counted.
    x = torch.ones(4).to(DEV) * 1.5  # pending in the graph
    y = make(x)
    want = make(torch.ones(4) * 1.5)
    assert y.device.type == "lazyjit" and y.dtype == want.dtype and y.shape == want.shape
    assert_close(y.cpu(), want, rtol=0, atol=0)
    before = sum(lazyjit.metrics()["fallbacks"].values())
    assert_close((y * 1).cpu(), want * 1, rtol=0, atol=0)
    assert sum(lazyjit.metrics()["fallbacks"].values()) == before + 1


def test_view_dtype_same_dtype_is_fine():
    x = torch.arange(4.0)
    _same(x.to(DEV).view(torch.float32) * 2, x * 2)


def test_inplace_write_through_reinterpreting_view_reaches_base():
    def prog(x):
        x.view(torch.int32).add_(1)
        x.view(torch.uint8)[0:4].add_(1)
        return x.view(torch.int32) * 1
    want = prog(torch.ones(4))
    x = torch.ones(4).to(DEV)
    got = prog(x)
    assert_close(got.cpu(), want, rtol=0, atol=0)
    ref = torch.ones(4)
    prog(ref)
    _same(x, ref)


def test_dtype_views_in_step_mode_alias_as_eager():
    """Step mode runs each op through its CPU kernel: there such views work, writes included."""
    def prog(x):
        x.view(torch.int32).add_(1)
        x.view(torch.uint8)[0:4].add_(1)
        return x.view(torch.int32) * 1
    lazyjit.set_mode("step")
    try:
        got = prog(torch.ones(4).to(DEV))
        assert_close(got.cpu(), prog(torch.ones(4)), rtol=0, atol=0)
    finally:
        lazyjit.set_mode("lazy")


def test_set_onto_storage_of_another_dtype_copies_and_computes_as_eager():
    x = torch.ones(4).to(DEV)
    raw = torch.empty(0, dtype=torch.int32, device=DEV).set_(x.untyped_storage())
    # Copies reinterpret the bytes exactly, as eager's set_ would.
    assert_close(raw.cpu(), torch.ones(4).view(torch.int32), rtol=0, atol=0)
    assert_close((raw + 1).cpu(), torch.ones(4).view(torch.int32) + 1, rtol=0, atol=0)
    raw[1:3] = 7  # a copy into part of the storage through the int32 view
    want = torch.ones(4)
    want.view(torch.int32)[1:3] = 7
    _same(x, want)


# ---- Module.to keeps Parameter objects ------------------------------------------------

def test_module_to_keeps_parameter_identity_and_grads():
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Embedding(10, 4), torch.nn.Linear(4, 3))
    m = copy.deepcopy(ref)
    w, b = m[0].weight, m[1].bias
    w.some_attr = "kept"
    for p, q in zip(m.parameters(), ref.parameters()):
        p.grad = torch.full_like(p, 0.5)
        q.grad = torch.full_like(q, 0.5)
    opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    m.to(DEV)
    assert m[0].weight is w and m[1].bias is b
    assert w.device.type == "lazyjit" and w.grad.device.type == "lazyjit"
    assert isinstance(w, torch.nn.Parameter) and w.requires_grad and w.some_attr == "kept"
    idx = torch.tensor([1, 2, 5])
    for _ in range(2):
        m(idx.to(DEV)).square().sum().backward()
        ref(idx).square().sum().backward()
        opt.step()
        ref_opt.step()
    for p, q in zip(m.parameters(), ref.parameters()):
        assert_close(p.detach().cpu(), q.detach(), rtol=1e-5, atol=1e-6)
    m.to("cpu")
    assert m[0].weight is w and w.device.type == "cpu"


def test_module_moves_between_other_devices_stay_pytorchs():
    m = torch.nn.Linear(2, 2, device="meta")
    w = m.weight
    m.to_empty(device="cpu")
    assert m.weight is not w and m.weight.device.type == "cpu"  # as without lazyjit


def test_module_to_with_weakref_keeps_the_parameter():
    import weakref
    m = torch.nn.Linear(2, 2)
    r = weakref.ref(m.weight)  # swap_tensors refuses tensors with weakrefs
    x = torch.randn(3, 2)
    want = m(x)
    m.to(DEV)
    # The same Parameter, its data set in place (param.data = t), as PyTorch
    # does between the CPU and CUDA: a weak reference still reaches it.
    assert m.weight.device.type == "lazyjit" and r() is m.weight
    assert_close(m(x.to(DEV)).cpu(), want)


# ---- autocast -------------------------------------------------------------------------

def test_autocast_ops_match_cpu_autocast_lists():
    """Every op CPU autocast casts has a lazyjit autocast kernel (mkldnn ops aside)."""
    missing = [op for op in torch._C._dispatch_get_all_op_names()
               if op.startswith("aten::") and "mkldnn" not in op
               and torch._C._dispatch_has_kernel_for_dispatch_key(op, "AutocastCPU")
               and not torch._C._dispatch_has_kernel_for_dispatch_key(op, "AutocastPrivateUse1")]
    assert not missing


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_autocast_matches_cpu_autocast(dtype):
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.LayerNorm(16), torch.nn.Linear(16, 4))
    ml = copy.deepcopy(m).to(DEV)
    x, tgt = torch.randn(5, 8), torch.randint(0, 4, (5,))
    with torch.autocast("cpu", dtype=dtype):
        h = m[:2](x)
        y = m[2:](h)
        loss = torch.nn.functional.cross_entropy(y, tgt)
    with torch.autocast(DEV, dtype=dtype):
        hl = ml[:2](x.to(DEV))
        yl = ml[2:](hl)
        lossl = torch.nn.functional.cross_entropy(yl, tgt.to(DEV))
    assert (hl.dtype, yl.dtype, lossl.dtype) == (h.dtype, y.dtype, loss.dtype) == (dtype, dtype, torch.float32)
    assert_close(yl.cpu(), y, rtol=1e-2, atol=1e-2)
    loss.backward()
    lossl.backward()
    for p, q in zip(ml.parameters(), m.parameters()):
        assert p.grad.dtype == q.grad.dtype
        assert_close(p.grad.cpu(), q.grad, rtol=2e-2, atol=2e-2)


def test_layer_norm_mixed_dtypes_as_cpu():
    """bf16/f16 input with float32 weight and bias (what autocast leaves): the CPU kernel
    returns float32 mean and rstd, and its backward needs them so."""
    torch.manual_seed(0)
    for dt in (torch.bfloat16, torch.float16):
        x, w, b = torch.randn(3, 8).to(dt), torch.randn(8), torch.randn(8)
        want = torch.native_layer_norm(x, (8,), w, b, 1e-5)
        got = torch.native_layer_norm(x.to(DEV), (8,), w.to(DEV), b.to(DEV), 1e-5)
        for g, e in zip(got, want):
            assert g.dtype == e.dtype
            assert_close(g.cpu(), e)


def test_autocast_default_dtype_is_cpus():
    with torch.autocast(DEV):
        y = torch.nn.functional.linear(torch.ones(2, 3).to(DEV), torch.ones(4, 3).to(DEV))
    assert y.dtype == torch.get_autocast_dtype("cpu")


def test_checkpoint_non_reentrant_on_lazyjit():
    from torch.utils.checkpoint import checkpoint
    torch.manual_seed(0)
    lin = torch.nn.Linear(4, 4)
    linl = copy.deepcopy(lin).to(DEV)
    x = torch.randn(3, 4, requires_grad=True)
    xl = x.detach().to(DEV).requires_grad_()
    checkpoint(lin, x, use_reentrant=False).sum().backward()
    checkpoint(linl, xl, use_reentrant=False).sum().backward()
    assert_close(xl.grad.cpu(), x.grad)
    assert_close(linl.weight.grad.cpu(), lin.weight.grad)


# ---- torch.compile --------------------------------------------------------------------

def test_torch_compile_default_backend_runs_lazyjit_graphs_on_lazyjit():
    """Inductor has no code generator for "lazyjit": a graph Dynamo captures on lazyjit
    tensors runs its ops on lazyjit (which compiles them) instead of failing."""
    torch.manual_seed(0)
    ln = torch.nn.LayerNorm(8)
    lnl = copy.deepcopy(ln).to(DEV)
    f = torch.compile(lambda x: lnl(x + 1.0))
    try:
        for n in (2, 2, 3):
            x = torch.randn(n, 8)
            y = f(x.to(DEV))
            assert y.device.type == "lazyjit"
            assert_close(y.cpu(), ln(x + 1.0), rtol=1e-5, atol=1e-5)
    finally:
        torch._dynamo.reset()
    # Graphs on the CPU still go to Inductor.
    assert not lazyjit._on_lazyjit(torch.nn.Linear(2, 2), [torch.ones(2)])
    assert lazyjit._on_lazyjit(torch.nn.Linear(2, 2), [torch.ones(2).to(DEV)])
    assert lazyjit._on_lazyjit(torch.nn.Linear(2, 2).to(DEV), [torch.ones(2)])


def test_torch_compile_of_a_graph_that_makes_lazyjit_tensors_from_sizes():
    """A graph with no lazyjit input that makes tensors on lazyjit (flex
    attention's compiled block-mask builder takes only sizes) is lazyjit's too:
    Inductor failed on it with a LoweringException."""
    def masks(n: int, m: int):
        q = torch.arange(n, device=DEV)[:, None]
        k = torch.arange(m, device=DEV)[None, :]
        return (q >= k).sum(-1), torch.full((n,), 2.0, device=DEV).cumsum(0)
    f = torch.compile(masks, dynamic=False)
    try:
        for n, m in ((4, 6), (5, 3)):
            got = f(n, m)
            want = [t.cpu() for t in masks(n, m)]
            assert all(t.device.type == "lazyjit" for t in got)
            for g, w in zip(got, want):
                assert_close(g.cpu(), w)
    finally:
        torch._dynamo.reset()


def test_import_after_an_eager_backward_trains_on_lazyjit():
    # The first backward() of a process sizes autograd's per-device queues; one
    # run before `import lazyjit` had none for lazyjit, and a lazyjit backward
    # then failed an internal assert. Gradients, twice (the queue keeps working),
    # equal eager's; then a reentrant checkpoint and a backward from a thread.
    code = r"""
import threading
import torch
x = torch.randn(3, requires_grad=True)
(x * 2).sum().backward()                      # autograd's engine starts: CPU only
import lazyjit
torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))
ml = torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))
ml.load_state_dict(m.state_dict())
ml.to("lazyjit")
data = torch.randn(8, 5)
for _ in range(2):
    m.zero_grad(); ml.zero_grad()
    m(data).pow(2).mean().backward()
    ml(data.to("lazyjit")).pow(2).mean().backward()
    for p, q in zip(m.parameters(), ml.parameters()):
        torch.testing.assert_close(q.grad.cpu(), p.grad)
from torch.utils.checkpoint import checkpoint
w = torch.randn(5, 5, requires_grad=True)
wl = w.detach().to("lazyjit").requires_grad_()
checkpoint(lambda a: (a @ a).sin(), w, use_reentrant=True).sum().backward()
checkpoint(lambda a: (a @ a).sin(), wl, use_reentrant=True).sum().backward()
torch.testing.assert_close(wl.grad.cpu(), w.grad)
out = {}
def work():
    v = wl.detach().clone().requires_grad_()
    (v * v).sum().backward()
    out["g"] = v.grad.cpu()
t = threading.Thread(target=work); t.start(); t.join()
torch.testing.assert_close(out["g"], 2 * w.detach())
print("ok")
"""
    assert run_python(code).stdout.strip().endswith("ok")
