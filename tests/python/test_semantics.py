"""PyTorch semantics on lazyjit (issue 3, items 1-8), eager PyTorch on the CPU as the oracle:
aliasing views and in-place ops, dtypes and promotion, data-dependent ops, scalars as program
arguments, autograd and optimizers, random ops, graph-cut accounting and torch.nn modules."""
import copy
import inspect
import itertools
import re

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

from conftest import DEV, lazyjit, run_python

THIS_FILE = "test_semantics.py"


def _line():
    """The caller's current line number (use on the same line as the op under test)."""
    return inspect.currentframe().f_back.f_lineno


def _id(d):
    return str(d).split(".")[-1]


def _exact(got, want):
    assert got.device.type == "lazyjit"
    assert got.dtype == want.dtype and got.shape == want.shape
    assert_close(got.cpu(), want, rtol=0, atol=0, equal_nan=True)


# ---- 1. views and in-place ops with aliasing ------------------------------------------

VIEWS = {
    "view": lambda x: x.view(4, 2, 3),
    "reshape_view": lambda x: x.reshape(2, 12),
    "transpose": lambda x: x.transpose(0, 1),
    "permute": lambda x: x.view(2, 2, 6).permute(2, 0, 1),
    "slice_step": lambda x: x[1:, ::2],
    "neg_slice_index": lambda x: x[-3:-1, 1:5:3],
    "ellipsis_none": lambda x: x[..., None, 2:4],
    "select": lambda x: x[2],
    "select_dim1": lambda x: x.select(1, 3),
    "expand": lambda x: x[:, :1].expand(4, 5),
    "unsqueeze": lambda x: x.unsqueeze(1),
    "as_strided": lambda x: x.as_strided((3, 3), (7, 1), 2),
    "narrow": lambda x: x.narrow(1, 2, 3),
    "chunk": lambda x: x.chunk(3, dim=1)[1],
    "split": lambda x: x.split([1, 3], dim=0)[1],
    "diagonal": lambda x: x.diagonal(offset=1),
    "unbind": lambda x: x.unbind(1)[4],
    "t_flatten_view": lambda x: x.t()[::2].unflatten(0, (1, 3)),
}
# Views that can be written through element-wise (expand aliases elements: eager refuses).
WRITABLE = [k for k in VIEWS if k != "expand"]


@pytest.mark.parametrize("name", list(VIEWS))
def test_view_values_and_metadata(name):
    x = torch.randn(4, 6)
    fn = VIEWS[name]
    want, got = fn(x), fn(x.to(DEV))
    assert got.shape == want.shape
    assert got.stride() == want.stride()
    assert got.storage_offset() == want.storage_offset()
    assert got.is_contiguous() == want.is_contiguous()
    assert got._is_view()
    assert_close(got.cpu(), want, rtol=0, atol=0)


@pytest.mark.parametrize("name", WRITABLE)
def test_inplace_through_view_updates_base_and_siblings(name):
    x = torch.randn(4, 6)
    xl = x.to(DEV)
    fn = VIEWS[name]
    # Sibling views taken before the write: they must all see it.
    sib_e = (x.view(-1), x.t(), x[1:3])
    sib_l = (xl.view(-1), xl.t(), xl[1:3])
    fn(x).mul_(-2).add_(0.5)
    fn(xl).mul_(-2).add_(0.5)
    assert_close(xl.cpu(), x, rtol=0, atol=0)
    for se, sl in zip(sib_e, sib_l):
        assert_close(sl.cpu(), se, rtol=0, atol=0)
    # And a view taken afterwards, and the view itself.
    assert_close(fn(xl).cpu(), fn(x), rtol=0, atol=0)


def _write_to_expanded(xl):
    try:
        xl.expand(4, 3).add_(1)
    except RuntimeError as e:
        return str(e)
    try:
        lazyjit.sync()   # a deferred error surfaces here; drain it
    except RuntimeError:
        pass
    return None


def test_write_to_expanded_view_raises_at_the_op_like_eager():
    x = torch.randn(4, 1)
    with pytest.raises(RuntimeError, match="unsupported operation"):
        x.expand(4, 3).add_(1)
    err = _write_to_expanded(x.to(DEV))
    assert err is not None and "unsupported operation" in err, \
        "lazyjit did not raise at the op (eager does)"


def test_refused_write_leaves_tensors_intact():
    # Eager refuses the write and changes nothing: the base and other pending results keep
    # their values, wherever lazyjit reports the error.
    x = torch.randn(4, 1)
    xl = x.to(DEV)
    other = xl * 2 + 1
    _write_to_expanded(xl)
    assert_close(xl.cpu(), x)
    assert_close(other.cpu(), x * 2 + 1)


def test_write_through_one_view_read_through_overlapping_view():
    x = torch.arange(24.0)
    xl = x.to(DEV)
    for t in (x, xl):
        a = t.as_strided((4, 4), (5, 1), 0)   # overlapping windows of the same storage
        b = t.view(4, 6)[:, 1:4]
        a[1].fill_(-1)
        b.add_(100)
        a.diagonal().mul_(3)
    assert_close(xl.cpu(), x)
    assert_close(xl.as_strided((4, 4), (5, 1), 0).cpu(), x.as_strided((4, 4), (5, 1), 0))


def test_inplace_on_graph_input_updates_callers_tensor():
    x = torch.randn(5, 4)
    x_lazy = x.to(DEV)
    lazyjit.sync()  # x_lazy is now materialised data: a graph input

    def update(t):
        t.mul_(2)
        t[:, 1].sub_(t[:, 0])
        t.t()[2].clamp_(max=0.25)
        return (t * t).sum()

    want_sum = update(x)
    got_sum = update(x_lazy)
    before = lazyjit.metrics()["graphs_executed"]
    assert_close(got_sum.cpu(), want_sum)   # one sync runs the graph ...
    assert lazyjit.metrics()["graphs_executed"] == before + 1
    assert_close(x_lazy.cpu(), x)           # ... and the caller's tensor is updated
    assert lazyjit.metrics()["graphs_executed"] == before + 1


def test_inplace_on_input_seen_by_views_taken_before():
    x = torch.randn(6)
    xl = x.to(DEV)
    lazyjit.sync()
    v_e, v_l = x[::2], xl[::2]
    x.add_(1)
    xl.add_(1)
    lazyjit.sync()
    assert_close(v_l.cpu(), v_e)
    assert_close(xl.cpu(), x)


def _out_case(fn, a, b, c):
    ce, cl = c.clone(), c.to(DEV)
    re_ = fn(a, b, ce)
    rl = fn(a.to(DEV), b.to(DEV), cl)
    return ce, cl, re_, rl


@pytest.mark.parametrize("case", [
    "same_shape", "resize_empty", "resize_wrong_shape", "out_dtype_wider", "matmul_out",
    "sum_dim_out", "out_noncontiguous_view", "clamp_out"])
def test_out_variants(case):
    a, b = torch.randn(3, 4), torch.randn(3, 4)
    c = torch.full((3, 4), 7.0)
    if case == "same_shape":
        fn = lambda a, b, c: torch.add(a, b, out=c)
    elif case == "resize_empty":
        c = torch.empty(0)
        fn = lambda a, b, c: torch.add(a, b, alpha=2, out=c)
    elif case == "resize_wrong_shape":
        c = torch.zeros(5)  # eager warns and resizes an out= tensor with elements
        fn = lambda a, b, c: torch.mul(a, b, out=c)
    elif case == "out_dtype_wider":
        c = torch.zeros(3, 4, dtype=torch.float64)
        fn = lambda a, b, c: torch.sub(a, b, out=c)
    elif case == "matmul_out":
        c = torch.empty(0)
        fn = lambda a, b, c: torch.matmul(a, b.t(), out=c)
    elif case == "sum_dim_out":
        c = torch.empty(2)
        fn = lambda a, b, c: torch.sum(a * b, 1, out=c)
    elif case == "out_noncontiguous_view":
        c = torch.zeros(4, 3)
        fn = lambda a, b, c: torch.add(a, b, out=c.t())
    elif case == "clamp_out":
        fn = lambda a, b, c: torch.clamp(a, -0.3, 0.3, out=c)
    ce, cl, re_, rl = _out_case(fn, a, b, c)
    assert cl.shape == ce.shape and cl.dtype == ce.dtype and cl.stride() == ce.stride()
    assert_close(cl.cpu(), ce)
    assert rl.shape == re_.shape and rl.dtype == re_.dtype
    assert_close(rl.cpu(), re_)


def test_copy_fill_zero():
    x = torch.randn(4, 5)
    src = torch.arange(5, dtype=torch.int32)           # broadcast + dtype conversion
    for t in (x, xl := x.clone().to(DEV)):
        s = src if t is x else src.to(DEV)
        t[1:3].copy_(s)
        t[:, 4].fill_(2.5)
        t[3].fill_(torch.tensor(-1.5))                 # 0-d CPU tensor value
        t.t()[0].zero_()
    assert_close(xl.cpu(), x, rtol=0, atol=0)
    # copy_ from a CPU tensor into a lazy view, and from a lazy view into a CPU tensor
    y = torch.zeros(3, 4)
    yl = y.to(DEV)
    z = torch.randn(4, 3)
    y[:, 1:].copy_(z[1:].t())
    yl[:, 1:].copy_(z[1:].t())
    assert_close(yl.cpu(), y, rtol=0, atol=0)
    out = torch.empty(4, 3)
    out.copy_(yl.t())
    assert_close(out, y.t(), rtol=0, atol=0)


@pytest.mark.parametrize("case", ["int_idx", "int_idx_2d", "accumulate_dups", "bool_mask",
                                  "tuple_idx", "broadcast_value", "index_put_fn", "cpu_index"])
def test_index_put(case):
    x = torch.randn(6, 4)
    idx = torch.tensor([4, 0, 2])
    v = torch.randn(3, 4)

    def fn(t, idx, v):
        k = lambda *vals: torch.tensor(vals).to(t.device)  # an index on t's device
        if case == "int_idx":
            t[idx] = v
        elif case == "int_idx_2d":
            t[idx.view(3, 1), k(1, 3)] = v[:, :2]
        elif case == "accumulate_dups":
            t.index_put_((k(1, 1, 5, 1),), v[:1].expand(4, 4) * 2, accumulate=True)
        elif case == "bool_mask":
            t[t > 0.5] = -7.0
        elif case == "tuple_idx":
            t.index_put_((idx, k(0, 3, 3)), v[:, 0])
        elif case == "broadcast_value":
            t[:, idx[1:]] = torch.tensor(9.0)
        elif case == "cpu_index":
            # CPU index tensors are allowed for an accelerator tensor (as on CUDA)
            t[torch.tensor([5, 1])] = v[:2]
            return t[torch.tensor([0, 5, 1])]
        elif case == "index_put_fn":
            return torch.index_put(t, (idx,), v)
        return t

    want = fn(x.clone(), idx, v)
    xl = x.to(DEV)
    # index tensors may be CPU or lazyjit; values lazyjit
    got = fn(xl, idx.to(DEV), v.to(DEV))
    assert_close(got.cpu(), want, rtol=0, atol=0)
    if case == "cpu_index":
        base = x.clone()
        base[torch.tensor([5, 1])] = v[:2]
        assert_close(xl.cpu(), base, rtol=0, atol=0)
    elif case != "index_put_fn":
        assert_close(xl.cpu(), want, rtol=0, atol=0)
    else:
        assert_close(xl.cpu(), x, rtol=0, atol=0)   # out-of-place leaves the input alone


def test_masked_fill():
    x = torch.randn(5, 6)
    m = x.abs() < 0.4
    xl, ml = x.to(DEV), m.to(DEV)
    x.masked_fill_(m, 3.0)
    xl.masked_fill_(ml, 3.0)
    x[:, ::2].masked_fill_(m[:, ::2], torch.tensor(-2.0))
    xl[:, ::2].masked_fill_(ml[:, ::2], torch.tensor(-2.0))
    x.masked_fill_(m[0], float("-inf"))                 # broadcast mask
    xl.masked_fill_(ml[0], float("-inf"))
    assert_close(xl.cpu(), x, rtol=0, atol=0)
    assert_close(xl.masked_fill(~ml, 0).cpu(), x.masked_fill(~m, 0), rtol=0, atol=0)


def test_resize_():
    x = torch.arange(12.0)
    xl = x.to(DEV)
    x.resize_(3, 2)
    xl.resize_(3, 2)
    assert xl.shape == x.shape and xl.stride() == x.stride()
    assert_close(xl.cpu(), x, rtol=0, atol=0)        # shrinking keeps the prefix
    x.resize_(4, 5)
    xl.resize_(4, 5)
    assert xl.shape == (4, 5) and xl.stride() == (5, 1)
    # Growing keeps the old 12 elements; the rest is uninitialised in eager too.
    assert_close(xl.view(-1)[:12].cpu(), torch.arange(12.0), rtol=0, atol=0)
    xl.fill_(1.0)
    xl[2:].mul_(3)
    x.fill_(1.0)
    x[2:].mul_(3)
    assert_close(xl.cpu(), x)
    e = torch.empty(0, device=DEV)
    e.resize_(2, 3).copy_(torch.ones(2, 3))
    assert_close(e.cpu(), torch.ones(2, 3))


def test_detach_shares_storage():
    x = torch.randn(4, requires_grad=True)
    xl = x.detach().to(DEV).requires_grad_()
    for t in (x, xl):
        d = t.detach()
        d.add_(10)           # writes through to t's data
    assert_close(xl.detach().cpu(), x.detach())
    assert_close(x.detach(), xl.detach().cpu())


# ---- 2. dtypes and promotion -----------------------------------------------------------

DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int8, torch.int16,
          torch.int32, torch.int64, torch.uint8, torch.bool]


def _sample(dtype, n=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.rand(n, generator=g) > 0.5
    if dtype == torch.uint8:
        return torch.randint(0, 250, (n,), generator=g, dtype=torch.uint8)
    if not dtype.is_floating_point:
        return torch.randint(-100, 100, (n,), generator=g, dtype=dtype)
    return (torch.randn(n, generator=g, dtype=torch.float64) * 50).to(dtype)


@pytest.mark.parametrize("op", ["add", "mul", "sub", "maximum", "eq", "true_div"])
def test_promotion_all_pairs(op):
    fns = {"add": torch.add, "mul": torch.mul, "sub": torch.sub, "maximum": torch.maximum,
           "eq": torch.eq, "true_div": torch.true_divide}
    fn = fns[op]
    mismatches = []
    for da, db in itertools.product(DTYPES, DTYPES):
        if op == "sub" and torch.bool in (da, db):
            continue  # eager refuses bool subtraction
        a, b = _sample(da, seed=1), _sample(db, seed=2)
        want = fn(a, b)
        got = fn(a.to(DEV), b.to(DEV))
        if got.dtype != want.dtype:
            mismatches.append((da, db, "dtype", got.dtype, want.dtype))
            continue
        g = got.cpu()
        tol = {} if want.dtype in (torch.float16, torch.bfloat16) else dict(rtol=1e-6, atol=0)
        try:
            assert_close(g, want, equal_nan=True, **tol)
        except AssertionError as e:
            mismatches.append((da, db, str(e).splitlines()[0]))
    assert not mismatches, mismatches


@pytest.mark.parametrize("expr", [
    pytest.param(lambda t, s: t + 2.5, id="int_plus_float_scalar"),
    pytest.param(lambda t, s: t * 3, id="tensor_times_int_scalar"),
    pytest.param(lambda t, s: t + s, id="plus_0d_float64_tensor"),
    pytest.param(lambda t, s: t + True, id="plus_bool_scalar"),
    pytest.param(lambda t, s: s.to(torch.int64) * t, id="0d_int64_times_tensor"),
    pytest.param(lambda t, s: t / 2, id="true_div_int_scalar"),
])
@pytest.mark.parametrize("dtype", [torch.int8, torch.uint8, torch.int32, torch.float16,
                                   torch.bfloat16, torch.bool], ids=_id)
def test_promotion_with_scalars_and_0d(expr, dtype):
    t = _sample(dtype, seed=3)
    s = torch.tensor(1.75, dtype=torch.float64)
    want = expr(t, s)
    for s_dev in (s, s.to(DEV)):  # a CPU 0-d tensor and a lazyjit 0-d tensor
        got = expr(t.to(DEV), s_dev)
        assert got.dtype == want.dtype
        assert_close(got.cpu(), want, rtol=0, atol=0)


INT_DTYPES = [torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8]


@pytest.mark.parametrize("dtype", INT_DTYPES + [torch.float32, torch.float64], ids=_id)
def test_integer_division_and_remainder_signs(dtype):
    vals = [-7, -6, -1, 0, 1, 5, 7, 9]
    divs = [3, -3, 2, -2, 4, 7, -7, 1]
    if dtype == torch.uint8:
        vals, divs = [0, 1, 5, 7, 9, 200, 255, 13], [3, 2, 4, 7, 1, 9, 16, 255]
    a = torch.tensor([v for v in vals for _ in divs], dtype=dtype)
    b = torch.tensor([d for _ in vals for d in divs], dtype=dtype)
    al, bl = a.to(DEV), b.to(DEV)
    cases = {
        "floordiv": lambda x, y: x // y,
        "div_floor": lambda x, y: torch.div(x, y, rounding_mode="floor"),
        "div_trunc": lambda x, y: torch.div(x, y, rounding_mode="trunc"),
        "div_true": lambda x, y: torch.div(x, y),
        "mod": lambda x, y: x % y,
        "remainder_scalar": lambda x, y: torch.remainder(x, 3),
        "fmod": lambda x, y: torch.fmod(x, y),
        "floordiv_scalar_neg": lambda x, y: x // (-2 if dtype != torch.uint8 else 2),
        "rtruediv": lambda x, y: 10 / y,
    }
    for name, fn in cases.items():
        want = fn(a, b)
        got = fn(al, bl)
        assert got.dtype == want.dtype, name
        assert_close(got.cpu(), want, rtol=0, atol=0, msg=name)


def test_integer_division_by_zero_raises_like_eager():
    # Eager raises "ZeroDivisionError" for integer division by zero. lazyjit must not crash the
    # process (SIGFPE); run it in a subprocess and require an exception, like eager.
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        torch.tensor([4, 5]) // torch.tensor([2, 0])
    proc = run_python(
        "import torch, lazyjit\n"
        "a = torch.tensor([4, 5]).to('lazyjit'); b = torch.tensor([2, 0]).to('lazyjit')\n"
        "try:\n"
        "    (a // b).cpu(); print('NO ERROR')\n"
        "except RuntimeError as e:\n"
        "    print('RAISED', 'ZeroDivisionError' in str(e))\n")
    assert "RAISED True" in proc.stdout, proc.stdout


@pytest.mark.parametrize("dtype", INT_DTYPES, ids=_id)
def test_integer_overflow_wraps_like_eager(dtype):
    info = torch.iinfo(dtype)
    a = torch.tensor([info.max, info.min, info.max - 1, 0], dtype=dtype)
    for fn in (lambda t: t + 1, lambda t: t - 2, lambda t: t * 3, lambda t: -t,
               lambda t: t.abs(), lambda t: t.sum(dtype=dtype)):
        _exact(fn(a.to(DEV)), fn(a))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16],
                         ids=_id)
def test_nan_inf_propagation(dtype):
    x = torch.tensor([1.0, float("nan"), float("inf"), -float("inf"), -2.0, 0.0, 3.0, -0.0],
                     dtype=dtype)
    y = torch.tensor([float("nan"), 2.0, float("inf"), 1.0, -float("inf"), 0.0, -1.0, 0.0],
                     dtype=dtype)
    cases = [
        lambda a, b: a + b, lambda a, b: a * b, lambda a, b: a / b, lambda a, b: a - b,
        lambda a, b: torch.maximum(a, b), lambda a, b: torch.minimum(a, b),
        lambda a, b: torch.fmax(a, b), lambda a, b: torch.fmin(a, b),
        lambda a, b: a.clamp(-1, 1), lambda a, b: a.relu(), lambda a, b: torch.sign(a),
        lambda a, b: a.max().reshape(1), lambda a, b: a.min().reshape(1),
        lambda a, b: a.sum().reshape(1), lambda a, b: a[2:4].sum().reshape(1),
        lambda a, b: a.argmax().reshape(1).to(a.dtype), lambda a, b: torch.isnan(a),
        lambda a, b: torch.isinf(b), lambda a, b: torch.nan_to_num(a),
        lambda a, b: a == a, lambda a, b: a < b, lambda a, b: a.exp(), lambda a, b: b.log(),
        lambda a, b: torch.where(a > b, a, b),
        lambda a, b: torch.softmax(torch.tensor([0.0, -float("inf"), 1.0], dtype=a.dtype), 0),
        lambda a, b: a / torch.zeros_like(a),
    ]
    for i, fn in enumerate(cases):
        want = fn(x, y)
        got = fn(x.to(DEV), y.to(DEV))
        assert got.dtype == want.dtype, i
        assert_close(got.cpu(), want, equal_nan=True, msg=f"case {i}")


@pytest.mark.parametrize("src", DTYPES, ids=_id)
def test_casts_all_pairs(src):
    # Values every destination can represent (out-of-range float->int is undefined in C++).
    if src == torch.bool:
        x = torch.tensor([True, False, True, True, False])
    elif src == torch.uint8:
        x = torch.tensor([0, 1, 7, 100, 127], dtype=src)
    elif src.is_floating_point:
        x = torch.tensor([0.0, 1.0, 2.75, -0.0, 99.5, 0.1, 1 / 3, 126.9], dtype=src)
    else:
        x = torch.tensor([0, 1, -1, 100, -128 if src == torch.int8 else -300, 127], dtype=src)
    xl = x.to(DEV)
    bad = []
    for dst in DTYPES:
        v = x
        if dst == torch.uint8 and (src.is_floating_point):
            v = x.abs()          # negative float -> uint8 is undefined
        if dst in (torch.int8, torch.uint8) and src.is_floating_point:
            v = v.clamp(-128, 127)
        want = v.to(dst)
        got = (xl if v is x else v.to(DEV)).to(dst)
        try:
            _exact(got, want)
            _exact((xl * 1 if src != torch.bool else xl).to(dst) if v is x else got, want)
        except AssertionError as e:
            bad.append((dst, str(e).splitlines()[0]))
    assert not bad, bad


# ---- 3. data-dependent ops: eager results, cut recorded with reason and site ----------

_SITE = re.compile(r"^(?P<op>\S+): (?P<reason>.+) @ (?P<file>.+):(?P<line>\d+)$")


def _sites_at(line, key="fallback_sites"):
    out = []
    for k, n in lazyjit.metrics()[key].items():
        if k.endswith(f"{THIS_FILE}:{line}"):
            out.append((k, n))
    return out


def _assert_cut_recorded(line):
    fb = _sites_at(line)
    sy = _sites_at(line, "sync_reasons")
    assert fb or sy, (line, lazyjit.metrics()["fallback_sites"], lazyjit.metrics()["sync_reasons"])
    for k, _ in fb:
        m = _SITE.match(k)
        assert m, k
        assert m["op"].startswith("aten::") and m["reason"].strip(), k
    for k, _ in sy:
        reason, _, site = k.rpartition(" @ ")
        assert reason.strip() and site.endswith(f"{THIS_FILE}:{line}"), k


def test_nonzero_is_eager_and_recorded(fresh):
    x = torch.randn(5, 6)
    d = x.to(DEV) * 1
    got, line = torch.nonzero(d > 0), _line()
    assert_close(got.cpu(), torch.nonzero(x > 0))
    assert got.dtype == torch.int64 and got.device.type == "lazyjit"
    _assert_cut_recorded(line)
    assert any(k.startswith("aten::nonzero: ") for k, _ in _sites_at(line))


@pytest.mark.parametrize("kw", [{}, {"return_inverse": True}, {"return_counts": True},
                                {"return_inverse": True, "return_counts": True, "dim": 0}],
                         ids=["plain", "inverse", "counts", "dim"])
def test_unique_is_eager_and_recorded(fresh, kw):
    x = torch.randint(0, 4, (6, 3))
    d = x.to(DEV) + 0
    got, line = torch.unique(d, **kw), _line()
    want = torch.unique(x, **kw)
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.device.type == "lazyjit"
        assert_close(g.cpu(), w, rtol=0, atol=0)
    _assert_cut_recorded(line)
    # The results keep working in later lazy graphs.
    assert_close((got[0] * 2 + 1).cpu(), want[0] * 2 + 1)


def test_masked_select_is_eager_and_recorded(fresh):
    x = torch.randn(4, 5)
    d = x.to(DEV).exp()
    got, line = torch.masked_select(d, d > 1.5), _line()
    assert_close(got.cpu(), torch.masked_select(x.exp(), x.exp() > 1.5))
    _assert_cut_recorded(line)


def test_boolean_indexing_is_eager_and_recorded(fresh):
    x = torch.randn(6, 4)
    d = x.to(DEV) - 0.1
    got, line = d[d > 0], _line()
    assert_close(got.cpu(), (x - 0.1)[(x - 0.1) > 0])
    _assert_cut_recorded(line)
    rows, line2 = d[(d.sum(1) > 0)], _line()
    assert_close(rows.cpu(), (x - 0.1)[(x - 0.1).sum(1) > 0])
    _assert_cut_recorded(line2)


def test_item_in_python_control_flow_is_eager_and_recorded(fresh):
    x = torch.randn(8)
    d = x.to(DEV)
    results = []
    lines = []
    for k in range(4):
        s = (d * (k - 1.5)).sum()
        lines.append(_line() + 1)
        if s.item() > 0:
            results.append("pos")
        else:
            results.append("neg")
    want = ["pos" if (x * (k - 1.5)).sum().item() > 0 else "neg" for k in range(4)]
    assert results == want
    assert len(set(lines)) == 1
    sy = _sites_at(lines[0], "sync_reasons")
    assert sy and sum(n for _, n in sy) == 4, lazyjit.metrics()["sync_reasons"]
    assert all(k.startswith("item() @ ") for k, _ in sy), sy
    # bool(tensor) in an if is also an implicit sync with a site
    line = _line() + 1
    if d.max() > -100:
        pass
    assert _sites_at(line, "sync_reasons"), lazyjit.metrics()["sync_reasons"]


# ---- 4. scalars are program arguments, not part of the key ----------------------------
#
# Policy (docs/limits.md, "What is specialised, what is an argument"): a compiled program is keyed by
# graph structure, shapes/strides and target. Python numbers and 0-d CPU tensors are program
# arguments; only their kind (float/int/bool) is in the key. The one specialised value is
# alpha == 1 in add/sub (alpha=1 and alpha=2 give different programs; alpha=2 and alpha=3 share one).

def _step_counters():
    m = lazyjit.metrics()
    return m["compiles"], m["cache_misses"]


def test_lr_step_counter_and_tensor_scalar_do_not_recompile(fresh):
    torch.manual_seed(0)
    p0, g0 = torch.randn(16), torch.randn(16)
    pe, pl = p0.clone(), p0.to(DEV)
    gl = g0.to(DEV)
    seen = []
    for step in range(1, 6):
        lr = 0.1 / step                                  # changing Python float
        decay = torch.tensor(1.0 - 0.01 * step)          # changing 0-d tensor, moved to lazyjit
        for p, g, dec in ((pe, g0, decay), (pl, gl, decay.to(DEV))):
            p.mul_(dec).add_(g, alpha=-lr)               # alpha != 1 always: one program
            p.add_(g * step, alpha=-0.001)               # changing Python int step counter
            p.clamp_(-lr * 40, lr * 40)
        assert_close(pl.cpu(), pe, rtol=1e-6, atol=1e-6)
        seen.append(_step_counters())
    # Step 1 compiles; steps 2..5 compile nothing and miss nothing.
    assert seen[0][0] >= 1
    assert all(s == seen[0] for s in seen[1:]), seen
    assert lazyjit.metrics()["cache_hits"] >= 4


def test_alpha_one_is_the_only_specialised_value(fresh):
    x, y = torch.randn(8).to(DEV), torch.randn(8).to(DEV)
    lazyjit.sync()
    lazyjit.reset_metrics()

    def run(alpha):
        out = torch.add(x, y, alpha=alpha).cpu()
        assert_close(out, x.cpu() + alpha * y.cpu())
        return lazyjit.metrics()["compiles"]

    c2 = run(2.0)
    assert run(3.0) == c2          # a changed alpha is an argument
    assert run(-0.5) == c2
    c1 = run(1.0)                  # alpha == 1 is specialised: a new program ...
    assert c1 == c2 + 1
    assert run(1.0) == c1          # ... compiled once


# ---- 5. autograd and optimizers --------------------------------------------------------

def _mlp():
    return torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 16),
                               torch.nn.GELU(), torch.nn.Linear(16, 2))


@pytest.mark.parametrize("opt_name", ["sgd_momentum", "adamw"])
def test_optimizer_steps_match_eager(opt_name):
    torch.manual_seed(1)
    m = _mlp()
    ml = copy.deepcopy(m).to(DEV)

    def make(params):
        if opt_name == "sgd_momentum":
            return torch.optim.SGD(params, lr=0.05, momentum=0.9, weight_decay=1e-3)
        return torch.optim.AdamW(params, lr=1e-2, weight_decay=0.05)

    oe, ol = make(m.parameters()), make(ml.parameters())
    for step in range(3):
        x, y = torch.randn(7, 6), torch.randn(7, 2)
        le = F.mse_loss(m(x), y)
        ll = F.mse_loss(ml(x.to(DEV)), y.to(DEV))
        le.backward()
        ll.backward()
        for (n, p), (_, q) in zip(m.named_parameters(), ml.named_parameters()):
            assert_close(q.grad.cpu(), p.grad, rtol=0, atol=1e-5, msg=f"step {step} grad {n}")
        oe.step()
        ol.step()
        oe.zero_grad()
        ol.zero_grad()
        assert_close(ll.detach().cpu(), le.detach(), rtol=0, atol=1e-5)
        for (n, p), (_, q) in zip(m.named_parameters(), ml.named_parameters()):
            assert_close(q.detach().cpu(), p.detach(), rtol=0, atol=1e-5, msg=f"step {step} {n}")
    # Optimizer state lives on the device and matches.
    for p, q in zip(m.parameters(), ml.parameters()):
        for k, v in oe.state[p].items():
            w = ol.state[q][k]
            if isinstance(v, torch.Tensor) and v.dim() > 0:
                assert w.device.type == "lazyjit"
                assert_close(w.cpu(), v, rtol=0, atol=1e-5, msg=k)


def test_no_grad_detach_requires_grad_():
    x = torch.randn(4, 3)
    w = torch.randn(3, 2)
    xl, wl = x.to(DEV), w.to(DEV)
    assert not wl.requires_grad
    wl.requires_grad_()
    we = w.clone().requires_grad_()
    assert wl.requires_grad and wl.is_leaf
    with torch.no_grad():
        nl = xl @ wl
        ne = x @ we
    assert not nl.requires_grad and nl.grad_fn is None
    assert_close(nl.cpu(), ne)
    hl = (xl @ wl).tanh()
    he = (x @ we).tanh()
    dl, de = hl.detach(), he.detach()
    assert not dl.requires_grad and dl.grad_fn is None
    # detached branch contributes no gradient
    ((hl * dl).sum() + (dl ** 2).sum()).backward()
    ((he * de).sum() + (de ** 2).sum()).backward()
    assert_close(wl.grad.cpu(), we.grad, rtol=1e-5, atol=1e-6)
    # requires_grad_(False) stops tracking
    wl.requires_grad_(False)
    assert not (xl @ wl).requires_grad


def test_gradient_accumulation_and_zero_grad_modes():
    torch.manual_seed(2)
    m = _mlp()
    ml = copy.deepcopy(m).to(DEV)
    xs = [torch.randn(3, 6) for _ in range(4)]
    oe = torch.optim.SGD(m.parameters(), lr=0.1)
    ol = torch.optim.SGD(ml.parameters(), lr=0.1)

    def compare(tag):
        for (n, p), (_, q) in zip(m.named_parameters(), ml.named_parameters()):
            if p.grad is None:
                assert q.grad is None, (tag, n)
            else:
                assert q.grad is not None and q.grad.device.type == "lazyjit", (tag, n)
                assert_close(q.grad.cpu(), p.grad, rtol=0, atol=1e-5, msg=f"{tag} {n}")

    # two backward calls accumulate
    for x in xs[:2]:
        m(x).pow(2).mean().backward()
        ml(x.to(DEV)).pow(2).mean().backward()
    compare("accumulated")
    oe.step()
    ol.step()
    # set_to_none=False: zeros on the device, then accumulates into them
    oe.zero_grad(set_to_none=False)
    ol.zero_grad(set_to_none=False)
    compare("zeroed")
    assert all(float(q.grad.abs().sum()) == 0.0 for q in ml.parameters())
    m(xs[2]).sum().backward()
    ml(xs[2].to(DEV)).sum().backward()
    compare("after zeroed")
    # set_to_none=True: grads become None, then fresh grads
    oe.zero_grad(set_to_none=True)
    ol.zero_grad(set_to_none=True)
    compare("none")
    assert all(q.grad is None for q in ml.parameters())
    m(xs[3]).abs().sum().backward()
    ml(xs[3].to(DEV)).abs().sum().backward()
    compare("after none")
    oe.step()
    ol.step()
    for p, q in zip(m.parameters(), ml.parameters()):
        assert_close(q.detach().cpu(), p.detach(), rtol=0, atol=1e-5)


def test_backward_through_views_and_inplace():
    x = torch.randn(4, 5)
    xe = x.clone().requires_grad_()
    xl = x.to(DEV).requires_grad_()
    outs = []
    for t in (xe, xl):
        h = t * 2
        h[1:3].mul_(t[:2] + 1)
        h.t()[0].relu_()
        v = h.view(-1)[3:15].view(3, 4)
        outs.append((v.sin() * v).sum() + h.diagonal().sum())
    outs[0].backward()
    outs[1].backward()
    assert_close(outs[1].detach().cpu(), outs[0].detach())
    assert_close(xl.grad.cpu(), xe.grad, rtol=1e-5, atol=1e-6)


# ---- 6. random ops: reproducible, and the CPU generator's numbers -------------------------

def _random_program(dev):
    out = []
    out.append(torch.rand(3, 4, device=dev))
    out.append(torch.randn(5, device=dev, dtype=torch.float64))
    out.append(torch.randint(-3, 9, (6,), device=dev))
    out.append(torch.randint(10, (2, 2), device=dev, dtype=torch.int32))
    base = torch.full((4, 5), 0.0, device=dev)
    out.append(torch.bernoulli(base + 0.5, p=0.3))
    out.append(torch.empty(7, device=dev).bernoulli_(0.6))
    out.append(torch.bernoulli(torch.linspace(0, 1, 9, device=dev)))
    x = torch.ones(10, 4, device=dev)
    out.append(F.dropout(x, p=0.4, training=True))
    out.append(torch.nn.Dropout(0.25).train()(x * 3))
    out.append(torch.empty(3, 3, device=dev).normal_(mean=1.5, std=2.0))
    out.append(torch.empty(6, device=dev).uniform_(-2, 2))
    out.append(torch.randn_like(x))
    out.append(torch.normal(torch.zeros(4, device=dev), torch.ones(4, device=dev)))
    out.append(torch.randperm(8, device=dev))
    return out


def test_random_ops_reproducible_and_equal_cpu_generator():
    torch.manual_seed(1234)
    want = _random_program("cpu")
    after_cpu = torch.rand(2)                 # generator state after the program
    runs = []
    for _ in range(2):
        torch.manual_seed(1234)
        got = _random_program(DEV)
        after_lazy = torch.rand(2)            # draws happen at trace time, in program order
        runs.append([g.cpu() for g in got])
        assert_close(after_lazy, after_cpu, rtol=0, atol=0)
    for i, (a, b, w) in enumerate(zip(runs[0], runs[1], want)):
        assert_close(a, b, rtol=0, atol=0, msg=f"op {i} not reproducible")
        assert a.dtype == w.dtype, i
        assert_close(a, w, rtol=0, atol=0, msg=f"op {i} differs from the CPU generator")


def test_random_interleaved_with_cpu_draws_and_generator_arg():
    g = torch.Generator().manual_seed(7)
    torch.manual_seed(5)
    e1 = torch.randn(4)
    e2 = torch.rand(3, generator=g)
    e3 = torch.randn(2)
    g.manual_seed(7)
    torch.manual_seed(5)
    l1 = torch.randn(4, device=DEV)
    l2c = torch.rand(3, generator=g)            # an explicit CPU generator on the CPU
    l3 = torch.randn(2, device=DEV)
    assert_close(l1.cpu(), e1, rtol=0, atol=0)
    assert_close(l2c, e2, rtol=0, atol=0)
    assert_close(l3.cpu(), e3, rtol=0, atol=0)
    # torch.lazyjit.manual_seed / get_rng_state follow the same generator
    torch.lazyjit.manual_seed(11)
    a = torch.rand(5, device=DEV).cpu()
    torch.manual_seed(11)
    assert_close(a, torch.rand(5), rtol=0, atol=0)


# ---- 7. every cut accounted for ------------------------------------------------------

def test_implicit_sync_and_fallback_counted_with_site(fresh):
    x = torch.randn(10)
    d = x.to(DEV) * 3
    v, sync_line = (d.sum()).item(), _line()
    f, fb_line = torch.logcumsumexp(d, 0), _line()
    assert v == pytest.approx((x * 3).sum().item(), rel=1e-5)
    assert_close(f.cpu(), torch.logcumsumexp(x * 3, 0))
    m = lazyjit.metrics()
    sync_key = [k for k in m["sync_reasons"] if k.endswith(f"{THIS_FILE}:{sync_line}")]
    assert len(sync_key) == 1 and sync_key[0].startswith("item() @ "), m["sync_reasons"]
    assert m["sync_reasons"][sync_key[0]] == 1
    fb_key = [k for k in m["fallback_sites"] if k.endswith(f"{THIS_FILE}:{fb_line}")]
    assert len(fb_key) == 1, m["fallback_sites"]
    mm = _SITE.match(fb_key[0])
    assert mm and "logcumsumexp" in mm["op"] and mm["reason"].strip()
    assert sum(m["fallbacks"].values()) == sum(m["fallback_sites"].values())
    # Every sync is accounted for by a reason (counts add up).
    assert m["syncs"] == sum(m["sync_reasons"].values())
    report = lazyjit.metrics_report()
    assert sync_key[0] in report
    assert fb_key[0] in report
    assert f"{THIS_FILE}:{sync_line}" in report and f"{THIS_FILE}:{fb_line}" in report


def test_cut_counts_accumulate_per_site(fresh):
    d = torch.randn(6).to(DEV)
    for _ in range(3):
        line = _line() + 1
        float(d.abs().sum())
    m = lazyjit.metrics()
    keys = [k for k in m["sync_reasons"] if k.endswith(f"{THIS_FILE}:{line}")]
    assert keys and sum(m["sync_reasons"][k] for k in keys) == 3, m["sync_reasons"]
    assert m["syncs"] == sum(m["sync_reasons"].values())


# ---- 8. torch.nn modules after model.to("lazyjit") --------------------------------------

def _pair(mod):
    torch.manual_seed(0)
    return mod, copy.deepcopy(mod).to(DEV)


@pytest.mark.parametrize("train", [False, True], ids=["eval", "train"])
def test_conv_batchnorm(train):
    m, ml = _pair(torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1, stride=2),
                                      torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                                      torch.nn.Conv2d(8, 4, 1, bias=False), torch.nn.BatchNorm2d(4)))
    if not train:
        # non-trivial running stats
        for bn in (m[1], m[4]):
            bn.running_mean.uniform_(-0.5, 0.5)
            bn.running_var.uniform_(0.5, 2.0)
        ml = copy.deepcopy(m).to(DEV)
    m.train(train)
    ml.train(train)
    for step in range(2):
        x = torch.randn(2, 3, 9, 9)
        want = m(x)
        got = ml(x.to(DEV))
        assert_close(got.detach().cpu(), want.detach(), rtol=1e-5, atol=1e-5)
        if train:
            want.square().mean().backward()
            got.square().mean().backward()
    for (n, b), (_, bl) in zip(m.named_buffers(), ml.named_buffers()):
        assert bl.device.type == "lazyjit"
        assert_close(bl.cpu(), b, rtol=1e-5, atol=1e-6, msg=n)   # running stats, batch count
    if train:
        for (n, p), (_, q) in zip(m.named_parameters(), ml.named_parameters()):
            assert_close(q.grad.cpu(), p.grad, rtol=1e-4, atol=1e-5, msg=n)


def test_embedding():
    m, ml = _pair(torch.nn.Embedding(20, 6, padding_idx=3))
    idx = torch.tensor([[1, 3, 5, 5], [19, 0, 3, 2]])
    want = m(idx)
    got = ml(idx.to(DEV))
    assert_close(got.detach().cpu(), want.detach(), rtol=0, atol=0)
    (want * torch.arange(6.0)).sum().backward()
    (got * torch.arange(6.0).to(DEV)).sum().backward()
    assert_close(ml.weight.grad.cpu(), m.weight.grad, rtol=0, atol=1e-6)
    assert float(ml.weight.grad[3].abs().sum()) == 0.0


@pytest.mark.parametrize("cls", [torch.nn.LSTM, torch.nn.GRU], ids=["lstm", "gru"])
def test_recurrent(cls):
    m, ml = _pair(cls(5, 7, num_layers=2, batch_first=True, bidirectional=True))
    x = torch.randn(3, 4, 5)
    out_e, h_e = m(x)
    out_l, h_l = ml(x.to(DEV))
    assert_close(out_l.detach().cpu(), out_e.detach(), rtol=1e-5, atol=1e-5)
    h_e = h_e if isinstance(h_e, tuple) else (h_e,)
    h_l = h_l if isinstance(h_l, tuple) else (h_l,)
    for a, b in zip(h_l, h_e):
        assert_close(a.detach().cpu(), b.detach(), rtol=1e-5, atol=1e-5)
    out_e.sum().backward()
    out_l.sum().backward()
    for (n, p), (_, q) in zip(m.named_parameters(), ml.named_parameters()):
        assert_close(q.grad.cpu(), p.grad, rtol=1e-4, atol=1e-5, msg=n)


def test_multihead_attention():
    m, ml = _pair(torch.nn.MultiheadAttention(16, 4, batch_first=True))
    m.eval()
    ml.eval()
    q, k = torch.randn(2, 5, 16), torch.randn(2, 7, 16)
    pad = torch.zeros(2, 7, dtype=torch.bool)
    pad[1, -2:] = True
    causal = torch.triu(torch.ones(5, 7, dtype=torch.bool), 3)
    out_e, w_e = m(q, k, k, key_padding_mask=pad, attn_mask=causal)
    out_l, w_l = ml(q.to(DEV), k.to(DEV), k.to(DEV), key_padding_mask=pad.to(DEV),
                    attn_mask=causal.to(DEV))
    assert_close(out_l.detach().cpu(), out_e.detach(), rtol=1e-5, atol=1e-5)
    assert_close(w_l.detach().cpu(), w_e.detach(), rtol=1e-5, atol=1e-5)
    out_e.sum().backward()
    out_l.sum().backward()
    for (n, p), (_, q_) in zip(m.named_parameters(), ml.named_parameters()):
        assert_close(q_.grad.cpu(), p.grad, rtol=1e-4, atol=1e-5, msg=n)


def test_layernorm_and_dropout_eval():
    m, ml = _pair(torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(0.5),
                                      torch.nn.LayerNorm(8), torch.nn.Dropout(0.9)))
    m.eval()
    ml.eval()
    x = torch.randn(4, 3, 8)
    before = torch.get_rng_state()
    got = ml(x.to(DEV))
    assert torch.equal(torch.get_rng_state(), before)   # eval dropout draws nothing
    assert_close(got.detach().cpu(), m(x).detach(), rtol=1e-5, atol=1e-5)
