"""Memory of a training step on the device (issue 58, item 5).

An optimizer step's in-place updates (parameters, exp_avg, exp_avg_sq) are
computed in the memory of the values they replace, as eager's in-place ops
are, when nothing else holds that memory: the step does not hold every
parameter and state tensor twice at its end. Eager PyTorch is the oracle for
every value.
"""
import json

import lazyjit
import pytest
import torch
from conftest import run_python

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



# An optimizer step run op by op: each parameter's update is computed in the
# parameter's and the state's memory, as eager's in-place ops compute it, and
# fused multiply-adds (lerp, addcmul) in slices. Before, the run held a decayed
# copy of every parameter and a scaled copy of every exp_avg_sq at once (foreach
# AdamW's first ops), and float64 copies of an fma's operands: over twice what
# eager's step adds. Measured as the growth of peak RSS (VmHWM, reset through
# /proc/self/clear_refs before each step) in one process for both, with every
# block of 1 MiB or more mapped and unmapped on its own (MALLOC_MMAP_THRESHOLD_)
# so that RSS follows what is held. Syncs past the first run op by op, with no
# compile beside them (the eager stance: one compile at the call site).
OP_BY_OP_STEP = r"""
import json, torch, lazyjit
L = "lazyjit"
def field(name):
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) * 1024 for l in f if l.startswith(name + ":"))
def growth(fn):
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # VmHWM := VmRSS
    base = field("VmHWM")
    fn()
    return field("VmHWM") - base
def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(*[torch.nn.Linear(WIDTH, WIDTH, bias=False) for _ in range(LAYERS)])
eager, dev = model(), model().to(L)
opts = [torch.optim.AdamW(m.parameters(), lr=1e-2, weight_decay=0.1, foreach=True) for m in (eager, dev)]
x = torch.randn(16, WIDTH, generator=torch.Generator().manual_seed(1))
def backward(m, opt, x):
    opt.zero_grad(set_to_none=True)
    m(x).square().mean().backward()
def sync():
    lazyjit.sync()  # every sync at this one call site
keep = torch.ones(2, device=L).add(1)
sync()  # its one compile, on a graph of its own: every later sync runs op by op
backward(eager, opts[0], x)
backward(dev, opts[1], x.to(L))
sync()
# The first step: it makes the state (exp_avg, exp_avg_sq) and updates it.
grow = {"eager": growth(opts[0].step), "device": growth(lambda: (opts[1].step(), sync()))}
how = lazyjit.last_sync()
err = max(max((pd.detach().cpu() - pe.detach()).abs().max().item() for pe, pd in zip(eager.parameters(), dev.parameters())),
          max((opts[1].state[pd][k].cpu() - opts[0].state[pe][k]).abs().max().item()
              for pe, pd in zip(eager.parameters(), dev.parameters()) for k in ("exp_avg", "exp_avg_sq")))
print(json.dumps({"how": how, "grow": grow, "err": err, "param_bytes": [p.nbytes for p in eager.parameters()]}))
"""
EAGER_STANCE = {"LAZYJIT_BACKGROUND_COMPILE": "off", "LAZYJIT_DYNAMIC": "off", "LAZYJIT_RECOMPILE_LIMIT": "1",
                "LAZYJIT_ON_RECOMPILE_LIMIT": "op_by_op", "LAZYJIT_CACHE": "off", "MALLOC_MMAP_THRESHOLD_": "1048576"}


# Eight layers of 4 MiB: no one parameter is most of the bytes. One layer of
# 16 MiB: its lerp's and addcmul's fma (4M elements) is the largest op.
@pytest.mark.parametrize("width,layers", [(1024, 8), (2048, 1)])
def test_an_optimizer_step_run_op_by_op_updates_in_place_and_holds_what_eager_holds(width, layers):
    proc = run_python(f"WIDTH, LAYERS = {width}, {layers}\n" + OP_BY_OP_STEP, env_extra=EAGER_STANCE)
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["how"] == "op_by_op_past_recompile_limit", out
    assert out["err"] == 0, out  # both op by op, as eager: bit for bit
    # Eager's foreach AdamW makes exp_avg and exp_avg_sq and holds
    # sqrt(exp_avg_sq) of every parameter at once, and updates the rest in place. The op-by-op run holds that and at most
    # one temporary of a parameter's size (addcdiv's quotient, which eager's
    # in-place addcdiv_ does not make). Before: over twice eager's.
    assert out["grow"]["eager"] >= 3 * sum(out["param_bytes"]), out  # the new state, and the square roots
    assert out["grow"]["device"] <= out["grow"]["eager"] + max(out["param_bytes"]), out
