"""Ops that change which memory a tensor views alias as in eager (issue 48, item 3).

`set_` (every overload), `resize_`, `as_strided_`, `x.data = y` and
`torch.utils.swap_tensors` change a tensor's storage or its geometry over it.
After `b.set_(a)`, b must share a's storage, so that every later in-place op on
either (and every one still pending in the graph) is seen by both, with eager's
sizes, strides and offset. Each program runs on CPU tensors (the oracle) and on
lazyjit tensors, with ops pending before and after, and syncs between."""
import os

import pytest
import torch
from torch.testing import assert_close

from conftest import DEV, eager_error, lazyjit

THIS_FILE = os.path.basename(__file__)


def _sync(dev):
    if dev == DEV:
        lazyjit.sync()


def _same_storage(a, b):
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


def _compare(got, want):
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        if isinstance(w, torch.Tensor):
            assert g.device.type == "lazyjit", (i, g.device)
            geom = lambda t: (t.dtype, tuple(t.shape), t.stride(), t.storage_offset())
            assert geom(g) == geom(w), (i, geom(g), geom(w))
            assert_close(g.detach().cpu(), w.detach(), rtol=0, atol=0, msg=f"result {i}: lazyjit {g.detach().cpu().tolist()}, eager {w.detach().tolist()}")
        else:
            assert g == w, (i, g, w)


def _run(prog):
    """prog(dev) returns a list of tensors and plain values; lazyjit's must be eager's."""
    want = prog("cpu")
    got = prog(DEV)
    _compare(got, want)


def _check_raises(make, bad, op):
    """bad(*make(dev)) is rejected by eager: lazyjit raises eager's exception at the op,
    naming the op and this file's line; the tensors keep eager's values after it."""
    cpu_args = make("cpu")
    want = eager_error(lambda: bad(*cpu_args))
    args = make(DEV)
    with pytest.raises(type(want)) as got:
        bad(*args)
    msg = str(got.value)
    assert msg.startswith(str(want).split("\n")[0]), msg
    line = bad.__code__.co_firstlineno
    assert f"(lazyjit: raised by {op} at " in msg and f"{THIS_FILE}:{line}, when recorded)" in msg, msg
    _compare([a for a in args if isinstance(a, torch.Tensor)], [a for a in cpu_args if isinstance(a, torch.Tensor)])


# ---- set_(Tensor) ------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["lazy", "step"])
def test_set_tensor_shares_storage_as_in_the_issue(mode):
    def prog(dev):
        a = torch.arange(3.0).to(dev)
        b = torch.zeros(3).to(dev)
        b.set_(a)
        b.add_(10)
        a.mul_(2)
        return [a, b, a.is_set_to(b), b.is_set_to(a), _same_storage(a, b)]
    lazyjit.set_mode(mode)
    _run(prog)


def test_set_tensor_with_ops_pending_before_and_after():
    def prog(dev):
        a = torch.arange(4.0).to(dev)
        b = torch.ones(4).to(dev)
        a.add_(1)           # pending on a's storage
        b.mul_(3)           # pending on b's old storage
        old = b.view(2, 2)  # keeps b's old storage
        b.set_(a)
        b.add_(10)
        a.mul_(2)
        old.add_(1)
        c = b * 1 + a       # reads the shared storage
        return [a, b, old, c, old.is_set_to(b), _same_storage(old, b), _same_storage(a, b)]
    _run(prog)


def test_set_tensor_with_a_sync_between():
    def prog(dev):
        a = torch.arange(4.0).to(dev)
        b = torch.zeros(2).to(dev)
        a.add_(1)
        b.set_(a)
        _sync(dev)
        b.add_(10)
        s = a.sum().item()  # a sync through a read of a
        a.mul_(2)
        _sync(dev)
        b.sub_(1)
        return [a, b, s]
    _run(prog)


def test_set_tensor_onto_views_takes_their_geometry():
    def prog(dev):
        a = torch.arange(12.0).to(dev)
        b = torch.zeros(2).to(dev)
        b.set_(a.view(3, 4)[1:, ::2])  # offset 4, strides (4, 2)
        b.add_(100)
        c = torch.zeros(1).to(dev)
        c.set_(a.view(3, 4).t())
        c[0].mul_(-1)
        d = torch.zeros(1).to(dev)
        d.set_(a[5:9])
        d.add_(a[0:4])
        e = torch.zeros(1).to(dev)
        e.set_(a.expand(2, 12))  # set_ takes a zero stride as it is
        return [a, b, c, d, e, d.is_set_to(a[5:9]), d.is_set_to(a)]
    _run(prog)


def test_views_of_the_set_target_alias_the_source():
    def prog(dev):
        a = torch.arange(6.0).to(dev)
        b = torch.zeros(6).to(dev)
        before = b[1:]  # a view of b's old storage: untouched by what follows
        b.set_(a)
        v = b.view(2, 3)[:, 1]
        v.fill_(-1)
        w = b[::2]
        w.add_(torch.ones(3).to(dev))
        x = a.view(3, 2)
        x[0].mul_(7)
        return [a, b, v, w, before, x]
    _run(prog)


def test_set_tensor_onto_itself_and_chains():
    def prog(dev):
        a = torch.arange(4.0).to(dev)
        a.set_(a)
        b = torch.zeros(1).to(dev)
        c = torch.zeros(1).to(dev)
        b.set_(a)
        c.set_(b)
        c.add_(1)
        b.set_(a[1:])
        b.mul_(3)
        return [a, b, c, c.is_set_to(a)]
    _run(prog)


@pytest.mark.parametrize("mode", ["lazy", "step"])
def test_set_a_view_and_reset_the_source(mode):
    def prog(dev):
        base = torch.arange(6.0).to(dev)
        v = base[1:]
        o = torch.ones(2).to(dev)
        v.set_(o)  # the view now views o; base keeps its own storage
        v.add_(1)
        base.mul_(2)
        a = torch.arange(3.0).to(dev)
        b = torch.zeros(3).to(dev)
        c = torch.ones(3).to(dev)
        b.set_(a)
        a.set_(c)  # b stays on a's old storage
        a.add_(1)
        b.add_(10)
        return [base, v, o, a, b, c]
    lazyjit.set_mode(mode)
    _run(prog)


def test_set_in_another_thread_shares_the_storage():
    import threading

    def prog(dev):
        a = torch.arange(3.0).to(dev)
        a.add_(1)  # pending in this thread's graph
        b = torch.zeros(3).to(dev)
        t = threading.Thread(target=lambda: (b.set_(a), b.mul_(3)))
        t.start()
        t.join()
        a.add_(1)
        return [a, b]
    _run(prog)


def test_set_tensor_rejects_another_device_at_the_op():
    a = torch.zeros(3)
    b = torch.zeros(3).to(DEV)
    # No eager oracle: the error eager raises between any two devices.
    for t, s, dev in ((b, a, "cpu"), (a, b, "lazyjit:0")):
        with pytest.raises(RuntimeError, match="Attempted to set the storage of a tensor on device .* to a storage "
                           "on different device .*" + dev):
            t.set_(s)
    assert_close(b.cpu(), torch.zeros(3))


# ---- set_(Storage, ...) and set_() ----------------------------------------------------

def test_set_storage_overloads_share_the_storage():
    def prog(dev):
        a = torch.arange(6.0).to(dev)
        a.add_(1)  # pending
        b = torch.zeros(2).to(dev)
        b.set_(a.untyped_storage())
        b.add_(1)
        c = torch.zeros(1).to(dev)
        c.set_(a.untyped_storage(), 2, (2, 2), (1, 2))
        c.mul_(10)
        d = torch.zeros(1).to(dev)
        d.set_(a.untyped_storage(), 1, (3,))
        d.sub_(0.5)
        e = torch.zeros(1).to(dev)
        e.set_(a, 3, (3,), (1,))  # set_.source_Tensor_storage_offset
        e.neg_()
        return [a, b, c, d, e, _same_storage(a, c), c.is_set_to(a)]
    _run(prog)


def test_set_storage_larger_than_the_storage_grows_it_as_eager():
    def prog(dev):
        a = torch.arange(2.0).to(dev)
        a.add_(1)  # pending
        t = torch.zeros(3).to(dev)
        t.set_(a.untyped_storage(), 0, (5,), (1,))  # eager grows the storage to 5 elements
        t[2:].fill_(-1)  # eager leaves them uninitialized
        t[0].mul_(9)
        return [a, t, a.untyped_storage().nbytes(), t.untyped_storage().nbytes()]
    _run(prog)


def test_set_storage_errors_raise_eagers_at_the_op():
    make = lambda dev: (torch.zeros(5).to(dev), torch.ones(2).to(dev).untyped_storage())
    # Sizes unchanged: bounds are checked (otherwise the storage grows).
    _check_raises(make, lambda t, s: t.set_(s, 0, (5,), (1,)), "aten::set_.source_Storage_storage_offset")
    _check_raises(make, lambda t, s: t.set_(s, -1, (1,), (1,)), "aten::set_.source_Storage_storage_offset")
    _check_raises(make, lambda t, s: t.set_(s, 0, (1, 2), (1,)), "aten::set_.source_Storage_storage_offset")


def test_set_empty_drops_the_storage():
    def prog(dev):
        a = torch.arange(3.0).to(dev)
        keep = a.view(3)
        a.add_(1)
        a.set_()
        empty = (tuple(a.shape), a.stride(), a.untyped_storage().nbytes(), a.is_set_to(keep))
        keep.mul_(2)
        a.resize_(2)  # grows its new, empty storage
        a.fill_(5)
        b = torch.zeros(1).to(dev)
        b.set_(keep)
        b.add_(1)
        return [a, keep, b, empty, _same_storage(b, keep)]
    _run(prog)


# ---- resize_ -------------------------------------------------------------------------

def test_resize_grows_with_pending_ops_and_keeps_the_elements():
    def prog(dev):
        x = torch.arange(4.0).to(dev)
        x.add_(1)  # pending
        x.resize_(2, 3)
        head = x.view(-1)[:4] * 1
        x.view(-1)[4:].fill_(0)  # eager leaves them uninitialized
        x.mul_(2)
        return [x, head, x.untyped_storage().nbytes()]
    _run(prog)


def test_resize_of_a_view_grows_the_storage_its_base_shares():
    def prog(dev):
        base = torch.arange(4.0).to(dev)
        v = base[:2]
        base.mul_(2)  # pending
        v.resize_(6)
        v[:4].fill_(7)  # lands in base
        v[4:].fill_(1)
        w_base = torch.arange(4.0).to(dev)
        w = w_base[1:3]
        w.resize_(2, 3)  # offset 1: the storage grows to 7 elements
        w.fill_(5)
        return [base, v, w_base, w, base.untyped_storage().nbytes(), w_base.untyped_storage().nbytes(),
                _same_storage(base, v)]
    _run(prog)


def test_resize_after_set_grows_the_shared_storage():
    def prog(dev):
        a = torch.arange(3.0).to(dev)
        b = torch.zeros(1).to(dev)
        b.set_(a)
        b.resize_(5)
        b[3:].fill_(0)
        b.add_(1)
        return [a, b, a.untyped_storage().nbytes()]
    _run(prog)


def test_resize_fills_new_memory_under_deterministic_algorithms():
    def prog(dev):
        torch.use_deterministic_algorithms(True)
        try:
            a = torch.arange(3.0).to(dev)
            a.add_(1)
            a.resize_(5)  # the new elements are NaN, as eager fills them
            return [a.isnan(), a.nan_to_num(-1)]
        finally:
            torch.use_deterministic_algorithms(False)
    _run(prog)


def test_resize_geometry_as_eager():
    def prog(dev):
        x = torch.arange(12.0).to(dev).view(3, 4).t()
        x.resize_(4, 3)  # the same sizes: the strides stay
        y = torch.arange(24.0).to(dev).view(1, 2, 3, 4)
        y.resize_(1, 2, 3, 4, memory_format=torch.channels_last)
        z = torch.arange(6.0).to(dev)[2:]
        z.resize_(0)  # no elements: the storage stays
        z2 = torch.arange(6.0).to(dev)
        z2.resize_(2)  # shrinking keeps the storage
        return [x, y, z, z2, z.untyped_storage().nbytes(), z2.untyped_storage().nbytes()]
    _run(prog)


def test_resize_as_takes_the_templates_sizes():
    def prog(dev):
        x = torch.arange(3.0).to(dev)
        x.add_(1)
        x.resize_as_(torch.zeros(2, 3).to(dev))
        x.view(-1)[3:].fill_(0)
        return [x]
    _run(prog)


def test_untyped_storage_resize_is_seen_by_every_tensor_over_it():
    def prog(dev):
        a = torch.arange(4.0).to(dev)
        v = a[1:3]
        a.add_(1)  # pending
        st = a.untyped_storage()
        st.resize_(6 * 4)  # grows in place: a and v keep their geometry
        grown = torch.zeros(1).to(dev)
        grown.set_(st)
        grown[4:].fill_(0)  # eager leaves them uninitialized
        n1 = st.nbytes()
        v.mul_(10)
        snap = grown * 1
        st.resize_(0)  # FSDP frees a parameter's memory this way
        n0 = (a.untyped_storage().nbytes(), v.untyped_storage().nbytes())
        st.resize_(4 * 4)
        a.copy_(torch.arange(4.0).to(dev) * -1)  # and refills it
        return [a, v, snap, n1, n0]
    _run(prog)


def test_resize_errors_as_eager():
    x = torch.arange(4.0).t()
    want = eager_error(lambda: x.resize_(2, 2, memory_format=torch.preserve_format))
    xl = torch.arange(4.0).to(DEV)
    with pytest.raises(type(want), match=str(want)):
        xl.resize_(2, 2, memory_format=torch.preserve_format)
    want = eager_error(lambda: torch.zeros(3, requires_grad=True).resize_(4))
    with pytest.raises(type(want), match=str(want)):
        torch.zeros(3).to(DEV).requires_grad_().resize_(4)


# ---- as_strided_ ---------------------------------------------------------------------

def test_as_strided_inplace_restrides_over_the_same_storage():
    def prog(dev):
        x = torch.arange(6.0).to(dev)
        x.add_(1)  # pending
        keep = x.view(6)
        x.as_strided_((2, 2), (1, 2), 1)
        x.mul_(10)
        y = torch.arange(6.0).to(dev)[1:]
        y.as_strided_((2,), (2,))  # the offset stays
        y.neg_()
        return [x, keep, y, _same_storage(x, keep), keep.is_set_to(x)]
    _run(prog)


def test_as_strided_inplace_errors_raise_eagers_at_the_op():
    make = lambda dev: (torch.arange(6.0).to(dev),)
    _check_raises(make, lambda x: x.as_strided_((3, 3), (3, 1)), "aten::as_strided_")
    _check_raises(make, lambda x: x.as_strided_((3,), (-1,)), "aten::as_strided_")
    _check_raises(make, lambda x: x.as_strided_((3,), (1, 1)), "aten::as_strided_")
    _check_raises(make, lambda x: x.as_strided_((2,), (1,), 5), "aten::as_strided_")


# ---- .data =, swap_tensors, module loads ---------------------------------------------

def test_set_data_shares_the_storage():
    def prog(dev):
        x = torch.zeros(3).to(dev)
        y = torch.arange(4.0).to(dev)
        x.add_(1)  # pending on x's old storage
        x.data = y
        y.add_(1)
        x.mul_(2)
        p = torch.zeros(3).to(dev).requires_grad_()
        p.data = torch.arange(3.0).to(dev)
        (p * p).sum().backward()
        p.data.add_(1)  # an optimizer's update
        return [x, y, p, p.grad, _same_storage(x, y)]
    _run(prog)


def test_swap_tensors_swaps_storages():
    def prog(dev):
        a = torch.arange(3.0).to(dev)
        b = torch.ones(4).to(dev)
        a.add_(1)
        b.mul_(2)  # both pending
        torch.utils.swap_tensors(a, b)
        a.add_(10)
        b.mul_(3)
        return [a, b]
    _run(prog)


def test_load_state_dict_through_module_load_swaps():
    def prog(dev):
        torch.manual_seed(0)
        m = torch.nn.Linear(3, 2).to(dev)
        sd = {k: v * 2 for k, v in m.state_dict().items()}
        w = m.weight
        torch.__future__.set_swap_module_params_on_conversion(True)
        try:
            m.load_state_dict(sd)
        finally:
            torch.__future__.set_swap_module_params_on_conversion(False)
        x = torch.ones(1, 3).to(dev)
        return [m.weight, m.bias, m(x), m.weight is w]
    _run(prog)


# ---- autograd --------------------------------------------------------------------------

def test_set_under_no_grad_then_backward():
    def prog(dev):
        w = torch.zeros(3).to(dev).requires_grad_()
        src = torch.arange(3.0).to(dev)
        with torch.no_grad():
            w.set_(src)
        (w * w).sum().backward()
        grad = w.grad.clone()
        with torch.no_grad():
            src.add_(1)  # w sees it
        return [w, grad, src]
    _run(prog)


def test_set_autograd_errors_as_eager():
    want = eager_error(lambda: torch.zeros(3, requires_grad=True).set_(torch.arange(3.0)))
    with pytest.raises(type(want), match=str(want)):
        torch.zeros(3).to(DEV).requires_grad_().set_(torch.arange(3.0).to(DEV))

    def prog(dev):  # a source that requires grad is set_ without an error in eager
        a = torch.arange(3.0).to(dev).requires_grad_()
        b = torch.zeros(3).to(dev)
        b.set_(a)
        with torch.no_grad():
            a.mul_(2)
        return [b.detach(), b.requires_grad]
    _run(prog)
