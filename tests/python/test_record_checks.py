"""Errors that need no data raise at the op, as in eager (issue 17, item 7).

Overlap and aliasing rules of copy_ and out=/in-place ops, the storage bounds of
views and the dtypes each op's CPU kernel implements are known when the op is
recorded: lazyjit must raise eager's exception (type and message) there, not at
the next sync with internal wording, and say which op and which line raised it.
Everything recorded before the bad op keeps its value, and the graph stays usable.
Eager PyTorch on the CPU is the oracle."""
import os

import pytest
import torch
from torch.testing import assert_close

from conftest import DEV, caller_line as _line, eager_error as _eager_error, lazyjit

THIS_FILE = os.path.basename(__file__)




def _base(device):
    return torch.arange(8, dtype=torch.float32).to(device) + 1


def _assert_raised_like_eager(got, want, op, line):
    msg = str(got.value)
    assert type(got.value) is type(want), (type(got.value), type(want))
    assert msg.startswith(str(want)), msg  # eager's message, then which op and where
    assert f"(lazyjit: raised by {op} at " in msg and f"{THIS_FILE}:{line}, when recorded)" in msg, msg


def _check(bad, op, eager_state=None):
    """Records work, then `bad` (which eager rejects); the error must be eager's,
    at the op, naming this file's line; the work recorded before it is kept and
    the graph stays usable."""
    x = _base("cpu")
    y = x * 2
    want = _eager_error(lambda: bad(x))
    lx = _base(DEV)
    ly = lx * 2  # recorded before the bad op, not synced
    with pytest.raises(type(want)) as got:
        bad(lx)
    _assert_raised_like_eager(got, want, op, bad.__code__.co_firstlineno)  # the lambda's line
    assert_close(ly.cpu(), y)
    assert_close(lx.cpu(), x)  # what eager left there (the bad op wrote nothing)
    # The graph is usable: more work records and syncs.
    assert_close((lx + ly).sum().cpu(), (x + y).sum())
    lazyjit.sync()


# ---- the reproduced failures ----------------------------------------------------

def test_overlapping_copy_raises_at_the_op():
    # Was accepted (the shifted copy computed as if from a clone).
    _check(lambda x: x[1:].copy_(x[:-1]), "aten::copy_")


def test_out_partially_overlapping_an_input_raises_at_the_op():
    _check(lambda x: torch.add(x[:-1], x[:-1], out=x[1:]), "aten::add.out")
    _check(lambda x: torch.mul(x[1:], 2, out=x[:-1]), "aten::mul.out")
    _check(lambda x: torch.clamp(x[:-1], 0, 3, out=x[1:]), "aten::clamp.out")


def test_inplace_op_partially_overlapping_an_input_raises_at_the_op():
    _check(lambda x: x[1:].add_(x[:-1]), "aten::add_.Tensor")
    _check(lambda x: x[1:].addcmul_(x[:-1], x[:-1]), "aten::addcmul_")
    _check(lambda x: x[2:].lt_(x[:-2]), "aten::lt_.Tensor")


def test_as_strided_outside_its_storage_raises_at_the_op():
    # Was accepted, and failed at the sync as "malformed graph".
    _check(lambda x: x.as_strided((3, 3), (3, 1)), "aten::as_strided")
    _check(lambda x: x.as_strided((2,), (1,), 7), "aten::as_strided")


def test_bitwise_ops_on_floats_raise_eagers_not_implemented_error_at_the_op():
    # Was recorded, and failed at the sync as "kernel fused_0: bitwise_and on a floating dtype".
    _check(lambda x: x & x, "aten::bitwise_and.Tensor")
    _check(lambda x: x | 1, "aten::bitwise_or.Tensor")  # the scalar arrives as a tensor
    _check(lambda x: x.bitwise_xor_(x.to(torch.int64)), "aten::bitwise_xor_.Tensor")


# ---- other errors that need no data --------------------------------------------

def test_copy_from_a_tensor_that_does_not_broadcast_raises():
    # Was accepted, silently.
    _check(lambda x: x.copy_(torch.ones(3).to(x.device)), "aten::copy_")
    _check(lambda x: x.copy_(torch.ones(2, 8).to(x.device)), "aten::copy_")


def test_inplace_result_that_cannot_be_cast_to_self_raises():
    # bool.mul_(int64) was accepted silently; int64.mul_(1.5) raised at the sync.
    _check(lambda x: (x > 2).mul_(x.to(torch.int64)), "aten::mul_.Tensor")
    _check(lambda x: x.to(torch.int64).mul_(1.5), "aten::mul_.Tensor")


def test_dtypes_the_cpu_kernel_rejects_raise_at_the_op():
    # Each raised at the sync before.
    _check(lambda x: torch.mm(x.view(2, 4), x.view(4, 2).double()), "aten::mm")
    _check(lambda x: x.index_select(0, x[:2]), "aten::index_select")
    _check(lambda x: (x > 2).abs(), "aten::abs")  # claimed by the device (tracer/api.cpp)
    _check(lambda x: torch.nn.functional.gelu(x.to(torch.int64)), "aten::gelu")


def test_errors_meta_kernels_raise_name_the_line_too():
    _check(lambda x: x + x[:3], "aten::add.Tensor")
    _check(lambda x: x.view(2, 4) @ x.view(2, 4), "aten::mm")
    _check(lambda x: x.add_(x.view(2, 4)), "aten::add_.Tensor")
    _check(lambda x: x.expand(2, 8).add_(1), "aten::add_.Tensor")


def test_inplace_on_a_leaf_that_requires_grad_raises_eagers_error():
    # Autograd raises it before the op reaches lazyjit, at the op, as in eager.
    want = _eager_error(lambda: torch.ones(3).requires_grad_().add_(1))
    with pytest.raises(type(want)) as got:
        torch.ones(3).to(DEV).requires_grad_().add_(1)
    assert str(got.value) == str(want)


def test_an_error_in_a_nested_op_names_the_op_the_user_called_once():
    lx = _base(DEV)
    with pytest.raises(RuntimeError) as got:
        lx[1:].copy_(lx[:-1])
    assert str(got.value).count("lazyjit: raised by") == 1


# ---- what eager accepts stays accepted, in the graph -----------------------------

def test_what_eager_accepts_records_without_running_eagerly():
    def program(x):
        x.copy_(x)                            # the same elements: nothing to do
        x[:4].copy_(x[4:])                    # disjoint parts of one storage
        x[4:].add_(x[:4])
        torch.mul(x, 2, out=x)                # out= the input itself
        y = x.as_strided((2, 2), (4, 1), 1)   # inside the storage
        x[1:].copy_(x[:-1].clone())
        return x, y
    x = _base("cpu")
    want = program(x)
    lazyjit.reset_metrics()
    lx = _base(DEV)
    got = program(lx)
    assert lazyjit.metrics()["fallbacks"] == {}, lazyjit.metrics()["fallbacks"]
    for g, w in zip(got, want):
        assert_close(g.cpu(), w)


def test_overlap_eager_allows_gives_eagers_result():
    # relu's out= variant does not check overlap on the CPU: lazyjit runs the op
    # now, so the result is eager's, whatever it is.
    x = _base("cpu") - 4
    torch.ops.aten.relu.out(x[:-1], out=x[1:])
    lx = _base(DEV) - 4
    torch.ops.aten.relu.out(lx[:-1], out=lx[1:])
    assert_close(lx.cpu(), x)
