"""Memory of a training step on the device (issue 58, item 5).

An optimizer step's in-place updates (parameters, exp_avg, exp_avg_sq) are
computed in the memory of the values they replace, as eager's in-place ops
are, when nothing else holds that memory: the step does not hold every
parameter and state tensor twice at its end. Eager PyTorch is the oracle for
every value.
"""
import lazyjit
import torch

L = "lazyjit"


def data_ptr(t):
    """The address of the memory behind a lazyjit tensor (after a sync); the
    view is dropped at once, so it holds nothing."""
    return lazyjit._C.data_views([t])[0].data_ptr()


def _model():
    torch.manual_seed(0)
    # 512 x 512 float32: 1 MiB, pooled sizes (executor/buffer_pool.h).
    return torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 512))


def _step(model, opt, x):
    opt.zero_grad(set_to_none=True)
    loss = model(x).square().mean()
    loss.backward()
    opt.step()
    return loss


def test_adamw_updates_parameters_and_state_where_they_are_and_equals_eager():
    eager, dev = _model(), _model().to(L)
    opt_e = torch.optim.AdamW(eager.parameters(), lr=1e-3, weight_decay=0.01)
    opt_d = torch.optim.AdamW(dev.parameters(), lr=1e-3, weight_decay=0.01)
    x = torch.randn(64, 256, generator=torch.Generator().manual_seed(1))
    xd = x.to(L)
    ptrs = []
    for _ in range(4):
        le = _step(eager, opt_e, x)
        ld = _step(dev, opt_d, xd)
        torch.testing.assert_close(ld.cpu(), le, rtol=1e-5, atol=1e-6)
        w = dev[2].weight
        ptrs.append((data_ptr(w), data_ptr(opt_d.state[w]["exp_avg"]), data_ptr(opt_d.state[w]["exp_avg_sq"])))
    for pe, pd in zip(eager.parameters(), dev.parameters()):
        # AdamW's m/sqrt(v) amplifies float32 sums taken in another order:
        # bench/workloads.py's TRAIN_STATE_TOL, a tenth of one step.
        torch.testing.assert_close(pd.detach().cpu(), pe.detach(), rtol=1e-4, atol=1e-4)
    for pe, pd in zip(eager.parameters(), dev.parameters()):
        for k in ("exp_avg", "exp_avg_sq"):
            torch.testing.assert_close(opt_d.state[pd][k].cpu(), opt_e.state[pe][k], rtol=1e-4, atol=1e-6)
    # From the second step on (the first creates the state), each step's
    # program writes the new state into the old state's memory.
    state = [p[1:] for p in ptrs]
    assert state[1] == state[2] == state[3], ptrs


def test_memory_someone_else_holds_is_not_overwritten():
    w = torch.randn(512, 512)
    wd = w.to(L)
    for _ in range(2):  # the second sync runs the program compiled for the first
        held = lazyjit._C.data_views([wd])[0]  # the old value's memory, still held
        before = held.clone()
        wd.mul_(0.5).add_(1.0)
        got = wd.cpu()
        torch.testing.assert_close(held, before, rtol=0, atol=0)
        torch.testing.assert_close(got, before * 0.5 + 1.0)
        assert held.data_ptr() != data_ptr(wd)
        del held
    # Nothing holds it now: the update is computed where it is.
    ptr = data_ptr(wd)
    wd.mul_(0.5).add_(1.0)
    torch.testing.assert_close(wd.cpu(), (before * 0.5 + 1.0) * 0.5 + 1.0)
    assert data_ptr(wd) == ptr
