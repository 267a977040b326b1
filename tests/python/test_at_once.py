"""Eager around compiled programs (tracer/record_op.cpp's at_once,
docs/torch_compile.md): from a call of a torch.compile'd function on lazyjit
tensors until the thread's next lazyjit.sync(), small ops whose tensors are all
on hand run at once through the data device's kernels instead of being
recorded; large ones, and ones reading pending values, are still recorded.
Eager PyTorch on CPU tensors is the oracle."""
import pytest
import torch

import lazyjit
import lazyjit.dynamo

DEV = "lazyjit"

pytestmark = pytest.mark.usefixtures("fresh_dynamo")


def counts():
    m = lazyjit.metrics()
    return m["ops_at_once"], m["ops_traced"], m["syncs"], m["graphs_executed"]


def grown(before):
    return tuple(b - a for a, b in zip(before, counts()))


def program():
    """A compiled function and a call of it on a lazyjit tensor (the eager
    stretch starts there), with its eager result."""
    f = torch.compile(lambda x: torch.tanh(x) * 2 + 1, backend="lazyjit")
    x = torch.randn(4, 6)
    y = f(x.to(DEV))
    return f, x, y, torch.tanh(x) * 2 + 1


def test_small_ops_after_a_program_call_run_at_once():
    lazyjit.sync()
    _, x, y, y_ref = program()
    before = counts()
    z = (y.sin() + 3) * y  # three ops, each run now
    s = z.sum()
    at_once, traced, syncs, graphs = grown(before)
    assert at_once >= 4 and traced == 0, (at_once, traced)
    assert syncs == 0 and graphs == 0, (syncs, graphs)  # nothing recorded, nothing to run
    assert s.item() == pytest.approx(((y_ref.sin() + 3) * y_ref).sum().item(), rel=1e-6)
    torch.testing.assert_close(z.cpu(), (y_ref.sin() + 3) * y_ref)


def test_before_any_program_call_ops_are_recorded():
    lazyjit.sync()
    x = torch.randn(4, 6)
    before = counts()
    z = (x.to(DEV).sin() + 3) * 2
    at_once, traced, _, _ = grown(before)
    assert at_once == 0 and traced >= 3, (at_once, traced)
    torch.testing.assert_close(z.cpu(), (x.sin() + 3) * 2)


def test_lazyjit_sync_ends_the_stretch():
    lazyjit.sync()
    _, _, y, y_ref = program()
    lazyjit.sync()
    before = counts()
    z = y.cos() * 2
    at_once, traced, _, _ = grown(before)
    assert at_once == 0 and traced >= 2, (at_once, traced)
    torch.testing.assert_close(z.cpu(), y_ref.cos() * 2)


def test_factories_and_out_arguments_run_at_once():
    # generate's logits processors: arange, full, scalar_tensor, isin, where.
    lazyjit.sync()
    _, _, y, y_ref = program()
    before = counts()
    ids = torch.arange(6, device=DEV)
    mask = torch.isin(ids, torch.tensor([1, 4], device=DEV))
    out = torch.where(mask, torch.full((), -1.0, device=DEV), y)
    got = out.cpu()
    at_once, _, syncs, graphs = grown(before)
    # arange's out=, isin, where (empty, fill and the copy are the device's own ops)
    assert at_once >= 3 and syncs == 0 and graphs == 0, (at_once, syncs, graphs)
    ref = torch.where(torch.isin(torch.arange(6), torch.tensor([1, 4])), torch.full((), -1.0), y_ref)
    torch.testing.assert_close(got, ref)


def test_large_tensors_are_still_recorded():
    lazyjit.sync()
    _, _, y, _ = program()
    big = torch.randn(600, 600)  # 360,000 elements: past the at-once limit
    b = big.to(DEV)
    before = counts()
    r = (b * 2 + 1).relu()
    at_once, traced, _, _ = grown(before)
    assert at_once == 0 and traced >= 3, (at_once, traced)
    torch.testing.assert_close(r.cpu(), (big * 2 + 1).relu())


def test_an_op_reading_a_pending_value_is_recorded_and_keeps_eagers_value():
    lazyjit.sync()
    _, _, y, y_ref = program()
    big = torch.randn(600, 600, generator=torch.Generator().manual_seed(5))
    pending = (big.to(DEV) * 3).sum()  # recorded: large input; its result is pending
    before = counts()
    z = pending + y.sum()  # reads a pending value: recorded too, nothing syncs
    at_once, traced, syncs, _ = grown(before)
    assert traced >= 1 and syncs == 0, (traced, syncs)
    # A sum of 360,000 float32 values in another order than eager's: equal to a few
    # units in the last place of the elements' magnitude, not of the (small) sum.
    torch.testing.assert_close(z.cpu(), (big * 3).sum() + y_ref.sum(), rtol=1e-5, atol=1e-3)


def test_in_place_write_leaves_a_pending_graph_the_old_elements():
    lazyjit.sync()
    _, _, y, y_ref = program()
    w = y.clone()  # small, on hand (run at once)
    big = torch.randn(600, 600)
    later = big.to(DEV) * w[0, 0]  # recorded; the graph reads w's elements as they are now
    w.add_(10)  # at once, in place
    w_ref = y_ref.clone()
    later_ref = big * w_ref[0, 0]
    w_ref.add_(10)
    torch.testing.assert_close(w.cpu(), w_ref)
    torch.testing.assert_close(later.cpu(), later_ref)


def test_nothing_runs_at_once_in_a_strict_region():
    lazyjit.sync()
    _, _, y, y_ref = program()
    before = counts()
    with lazyjit.strict():
        z = y * 5 - 1
    at_once, traced, _, _ = grown(before)
    assert at_once == 0 and traced >= 2, (at_once, traced)
    lazyjit.sync()
    torch.testing.assert_close(z.cpu(), y_ref * 5 - 1)


def test_autograd_through_ops_run_at_once():
    lazyjit.sync()
    f = torch.compile(lambda x: x.exp(), backend="lazyjit")
    a = torch.randn(5, requires_grad=True)
    al = a.detach().to(DEV).requires_grad_()
    y = f(al)
    before = counts()
    loss = (y * y).sum()
    assert grown(before)[0] >= 2
    loss.backward()
    (a.exp() * a.exp()).sum().backward()
    torch.testing.assert_close(al.grad.cpu(), a.grad)


def test_a_write_run_at_once_never_lands_in_memory_someone_else_holds():
    lazyjit.sync()
    _, _, y, y_ref = program()
    w = y * 1  # at once: on hand
    held = lazyjit._C.data_views([w])[0]  # its data's memory, held outside
    before = held.clone()
    w.mul_(0.5).add_(1.0)  # at once, in place
    torch.testing.assert_close(held, before, rtol=0, atol=0)
    torch.testing.assert_close(w.cpu(), y_ref * 0.5 + 1.0)
