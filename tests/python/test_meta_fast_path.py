"""The tracer's native meta fast path (tracer/meta_fast_path.h), eager PyTorch on the CPU as
the oracle: pointwise ops, native_layer_norm, addmm/mm, triu/tril over dtypes, broadcasting,
0-d CPU tensors and Python scalars give eager's values, dtypes, shapes and strides; invalid
arguments raise eager's exception type; and the common ops never import torch._dynamo (what
the Python meta kernels they replace do). Also the ops answered by PyTorch's C++ structured meta
functions (tracer/meta_structured.h): bmm, cumsum, argmax/argmin, topk, and add/sub/mul/div of
non-contiguous tensors."""
import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

from conftest import DEV, lazyjit, run_python  # noqa: F401

DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.int64, torch.bool]


def _id(x):
    return str(x).split(".")[-1]


def _make(shape, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype.is_floating_point:
        return (torch.randn(shape, generator=g) + 0.1).to(dtype)
    return torch.randint(1, 6, shape, generator=g).to(dtype)  # no zero divisors


def _to_dev(a):
    """Non-0-d tensors to lazyjit; 0-d ones marked ("cpu0d", t) stay on the CPU."""
    if isinstance(a, tuple) and a and a[0] == "cpu0d":
        return a[1]
    if isinstance(a, torch.Tensor):
        return a.to(DEV)
    if isinstance(a, (list, tuple)):
        return type(a)(_to_dev(x) for x in a)
    return a


def _to_cpu_arg(a):
    if isinstance(a, tuple) and a and a[0] == "cpu0d":
        return a[1]
    return a


def _outs(r):
    return list(r) if isinstance(r, (tuple, list)) else [r]


def check(fn, *args):
    cpu_args = [_to_cpu_arg(a) for a in args]
    try:
        want = fn(*cpu_args)
    except Exception as e:  # eager's error: lazyjit raises the same type
        with pytest.raises(type(e)):
            for o in _outs(fn(*[_to_dev(a) for a in args])):
                o.cpu()
        return
    got = fn(*[_to_dev(a) for a in args])
    for g, w in zip(_outs(got), _outs(want)):
        assert g.device.type == "lazyjit"
        assert (g.dtype, g.shape, g.stride()) == (w.dtype, w.shape, w.stride())
        gc = g.cpu()
        if w.dtype.is_floating_point:
            assert_close(gc, w, equal_nan=True, atol=1e-2 if w.dtype == torch.bfloat16 else 1e-5,
                         rtol=1e-2 if w.dtype == torch.bfloat16 else 1e-5)
        else:
            assert torch.equal(gc, w)


BINARY = {
    "add": torch.add,
    "add_alpha": lambda a, b: torch.add(a, b, alpha=2),
    "sub": torch.sub,
    "sub_alpha_float": lambda a, b: torch.sub(a, b, alpha=0.5),
    "mul": torch.mul,
    "div": torch.div,
    "div_trunc": lambda a, b: torch.div(a, b, rounding_mode="trunc"),
    "div_floor": lambda a, b: torch.div(a, b, rounding_mode="floor"),
    "maximum": torch.maximum,
    "minimum": torch.minimum,
    "pow": torch.pow,
    "eq": torch.eq,
    "ne": torch.ne,
    "lt": torch.lt,
    "ge": torch.ge,
}

SHAPES = [((3, 4), (3, 4)), ((3, 4), (4,)), ((2, 1, 4), (3, 1)), ((1, 4), (3, 1)), ((4, 1), (4, 1)), ((5,), ())]


@pytest.mark.parametrize("name", list(BINARY))
@pytest.mark.parametrize("dtype", DTYPES, ids=_id)
def test_binary_tensor_tensor(name, dtype):
    fn = BINARY[name]
    for i, (sa, sb) in enumerate(SHAPES):
        check(fn, _make(sa, dtype, i), _make(sb, dtype, i + 10))


@pytest.mark.parametrize("name", list(BINARY))
def test_binary_mixed_dtypes_scalars_and_cpu_0d(name):
    fn = BINARY[name]
    pairs = [(torch.int64, torch.float32), (torch.bfloat16, torch.float32), (torch.bool, torch.int64),
             (torch.float64, torch.bfloat16), (torch.bool, torch.float32)]
    for i, (da, db) in enumerate(pairs):
        check(fn, _make((3, 4), da, i), _make((4,), db, i + 1))
        # 0-d operands: a 0-d CPU tensor, a 0-d lazyjit tensor, on either side
        check(fn, _make((3, 4), da, i), ("cpu0d", _make((), db, i + 2)))
        check(fn, ("cpu0d", _make((), db, i + 2)), _make((2, 3), da, i))
        check(fn, _make((3, 4), da, i), _make((), db, i + 3))
    for dtype in DTYPES:
        for s in [2, 3.5, True]:
            check(fn, _make((2, 3), dtype, 5), s)
            check(lambda a, b: fn(b, a), _make((2, 3), dtype, 6), s)


@pytest.mark.parametrize("dtype", DTYPES, ids=_id)
def test_operators_with_python_scalars(dtype):
    x = _make((3, 4), dtype, 1)
    check(lambda a: a * 2 + 1, x)
    check(lambda a: a * 0.5 - 1, x)
    check(lambda a: (a > 1) & (a < 3), x)
    check(lambda a: 2 / (a + 3), x)


UNARY = ["neg", "abs", "relu", "floor", "ceil", "trunc", "exp", "exp2", "expm1", "log", "log2", "log1p",
         "sin", "cos", "tanh", "sigmoid", "sqrt", "rsqrt", "reciprocal", "erf", "erfc"]


@pytest.mark.parametrize("name", UNARY)
@pytest.mark.parametrize("dtype", DTYPES, ids=_id)
def test_unary(name, dtype):
    fn = getattr(torch, name)
    for i, shape in enumerate([(3, 4), (2, 1, 5), (7,), ()]):
        check(fn, _make(shape, dtype, i))


@pytest.mark.parametrize("dtype", DTYPES, ids=_id)
def test_activations(dtype):
    for i, shape in enumerate([(3, 4), (1, 5), ()]):
        x = _make(shape, dtype, i)
        check(F.gelu, x)
        check(lambda a: F.gelu(a, approximate="tanh"), x)
        check(F.silu, x)
    check(lambda a: F.gelu(a, approximate="bogus"), _make((3,), dtype))  # eager's error


@pytest.mark.parametrize("dtype", DTYPES, ids=_id)
def test_where_clamp_pow_scalar(dtype):
    for i, (sc, sa, sb) in enumerate([((3, 4), (3, 4), (3, 4)), ((3, 1), (4,), (3, 4)), ((4,), (2, 4), ())]):
        cond = _make(sc, torch.bool, i)
        check(torch.where, cond, _make(sa, dtype, i), _make(sb, dtype, i + 1))
        check(torch.where, cond, _make(sa, dtype, i), _make(sb, torch.float32, i + 1))
        check(torch.where, cond, _make(sa, dtype, i), ("cpu0d", torch.tensor(1.5)))
        check(lambda c, a: torch.where(c, a, 0.5), cond, _make(sa, dtype, i))
    x = _make((3, 4), dtype, 3)
    check(lambda a: torch.clamp(a, min=2), x)
    check(lambda a: torch.clamp(a, min=0.5, max=2.5), x)
    check(lambda a: torch.clamp(a, max=1), x)
    check(lambda a: torch.clamp_min(a, 1), x)
    check(lambda a: a.pow(2), x)
    check(lambda a: a.pow(0.5), x)
    check(lambda a: a.pow(-1), x)
    check(lambda a: a ** 3, _make((), dtype, 4))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=_id)
def test_layer_norm(dtype):
    for shape, norm in [((4, 8), (8,)), ((2, 3, 8), (8,)), ((2, 3, 8), (3, 8)), ((1, 1, 8), (8,))]:
        x = _make(shape, dtype, 1)
        w, b = _make(norm, dtype, 2), _make(norm, dtype, 3)
        check(lambda a, w, b: torch.native_layer_norm(a, list(norm), w, b, 1e-5), x, w, b)
        check(lambda a: torch.native_layer_norm(a, list(norm), None, None, 1e-5), x)
        check(lambda a, w: torch.native_layer_norm(a, list(norm), w, None, 1e-5), x, w)
        check(lambda a, w, b: F.layer_norm(a, norm, w, b), x, w, b)
        if dtype == torch.bfloat16:  # mixed: float parameters, float statistics
            check(lambda a, w, b: torch.native_layer_norm(a, list(norm), w, b, 1e-5), x, w.float(), b.float())
    x = _make((2, 8), dtype)
    # eager's errors: normalized_shape or weight not matching the input
    check(lambda a: torch.native_layer_norm(a, [4], None, None, 1e-5), x)
    check(lambda a, w: torch.native_layer_norm(a, [8], w, None, 1e-5), x, _make((4,), dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=_id)
def test_addmm_mm_linear(dtype):
    x, w, bias = _make((5, 8), dtype, 1), _make((6, 8), dtype, 2), _make((6,), dtype, 3)
    check(F.linear, x, w, bias)
    check(F.linear, x, w)
    check(F.linear, _make((2, 3, 8), dtype, 4), w, bias)
    check(torch.mm, x, w.t())
    check(lambda a, b: torch.mm(a, b.t()), x, w)
    check(lambda c, a, b: torch.addmm(c, a, b.t(), beta=0.5, alpha=2), bias, x, w)
    check(lambda c, a, b: torch.addmm(c, a, b.t()), _make((5, 6), dtype, 5), x, w)
    check(lambda c, a, b: torch.addmm(c, a, b.t()), _make((5, 1), dtype, 5), x, w)
    check(torch.mm, x, x)  # eager's shape error
    check(lambda c, a, b: torch.addmm(c, a, b.t()), _make((4,), dtype), x, w)


@pytest.mark.parametrize("dtype", DTYPES, ids=_id)
def test_triu_tril(dtype):
    for shape in [(4, 5), (2, 3, 3)]:
        x = _make(shape, dtype)
        check(torch.triu, x)
        check(lambda a: torch.tril(a, -1), x)
        check(lambda a: torch.triu(a, 2), x)
    check(torch.triu, _make((4,), dtype))  # eager's error


def test_errors_match_eager():
    check(torch.add, _make((3,), torch.float32), _make((4,), torch.float32))
    check(torch.mul, _make((2, 3), torch.float32), _make((3, 2), torch.float32))
    check(torch.where, _make((3,), torch.bool), _make((4,), torch.float32), _make((3,), torch.float32))
    check(torch.sub, _make((3,), torch.bool), _make((3,), torch.bool))
    check(torch.neg, _make((3,), torch.bool))
    check(lambda a: torch.add(a, 1, alpha=0.5), _make((3,), torch.int64))
    check(lambda a: a.pow(-1), _make((3,), torch.int64))


def test_non_contiguous_and_varying_shapes():
    """Permuted and expanded inputs (the meta kernel's layout rules) and a new size per call."""
    x = _make((4, 6), torch.float32)
    check(lambda a: a.t() * 2, x)
    check(lambda a: a.t() + a.t(), x)
    check(lambda a: a[:, ::2].exp(), x)
    check(lambda a: a[:1].expand(3, 6) + 1, x)
    for b in range(1, 6):
        check(lambda a: F.gelu(a * 2 + 1) - a / 3, _make((b, 6), torch.float32, b))


def test_common_ops_do_not_import_dynamo():
    code = """
import sys, torch, lazyjit
x = torch.ones(4, 4).to('lazyjit')
(x * 2 + 1).cpu()
assert 'torch._dynamo' not in sys.modules, 'pointwise'
torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.GELU(), torch.nn.Linear(32, 8),
                        torch.nn.LayerNorm(8)).to('lazyjit')
g = torch.nn.GELU(approximate='tanh')
for b in (3, 5):
    x = torch.randn(b, 8).to('lazyjit')
    with torch.no_grad():
        m(x).cpu()
        (x + m(x)).cpu()
        g(x).cpu()
    m(x).cpu()
print('torch._dynamo' in sys.modules)
"""
    assert run_python(code).stdout.strip().splitlines()[-1] == "False"


@pytest.mark.parametrize("dtype", DTYPES, ids=_id)
def test_cat(dtype):
    a, b = _make((2, 3, 4), dtype, 1), _make((2, 5, 4), dtype, 2)
    check(lambda a, b: torch.cat([a, b], 1), a, b)
    check(lambda a, b: torch.cat([a, a, a], -1), a, b)
    check(lambda a, b: torch.cat([a[..., :2], -b[:, :3, 2:]], -1), a, b)  # slices: non-contiguous inputs
    check(lambda a, b: torch.cat([a.float(), b.double()], 1), a, b)  # promotion
    check(lambda a, b: torch.cat([a, b], 0), a, b)  # eager's size error
    x = _make((2, 3, 4, 5), dtype, 3)
    check(lambda x: torch.cat([x, x.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2)], 1), x)


@pytest.mark.parametrize("dtype", DTYPES, ids=_id)
def test_sum_mean(dtype):
    x = _make((2, 3, 4), dtype, 1)
    for dims in [(-1,), (1,), (0, 2), ()]:
        for keep in [False, True]:
            check(lambda a: torch.sum(a, dims, keepdim=keep), x)
            check(lambda a: torch.mean(a, dims, keepdim=keep), x)
    check(lambda a: a.sum(-1, dtype=torch.float64), x)
    check(lambda a: a.mean(-1, dtype=torch.float32), x)
    check(lambda a: a.sum((1, 1)), x)  # eager's error
    check(lambda a: a.pow(2).mean(-1, keepdim=True), _make((1, 5, 8), dtype, 2))


def test_cat_skips_legacy_empty_and_keeps_eager_layout():
    k = _make((2, 5, 4, 16), torch.float32).transpose(1, 2)  # a permuted key, as in an attention cache
    check(lambda e, k: torch.cat([e, k], -2), torch.empty(0), k)
    check(lambda e, k: torch.cat([k, e, k], 1), torch.empty(0, dtype=torch.float64), k)
    check(lambda e: torch.cat([e, e]), torch.empty(0))
    check(lambda k: torch.cat([k, k], -1), k)


@pytest.mark.parametrize("dtype", DTYPES, ids=_id)
def test_index_select_embedding(dtype):
    w = _make((10, 4), dtype, 1)
    idx = torch.tensor([3, 0, 9, 3])
    check(lambda w, i: torch.index_select(w, 0, i), w, idx)
    check(lambda w, i: torch.index_select(w, 1, i[:2] % 4), w, idx)
    check(lambda w, i: torch.index_select(w.t(), -1, i), w, idx)
    check(lambda w, i: torch.index_select(w, 0, i.int()), w, idx)
    check(lambda w, i: torch.index_select(w, 0, i[0]), w, idx)
    check(lambda w, i: torch.index_select(w, 2, i), w, idx)  # eager's error
    if dtype.is_floating_point:
        check(lambda w, i: F.embedding(i.view(2, 2), w), w, idx)


@pytest.mark.parametrize("dtype", DTYPES, ids=_id)
def test_softmax_log_softmax(dtype):
    x = _make((3, 4, 5), dtype, 1)
    for dim in (-1, 0, 1, 2):
        check(lambda a: torch.softmax(a, dim), x)
        check(lambda a: torch.log_softmax(a, dim), x)
    check(lambda a: F.softmax(a.transpose(0, 2), -1), x)  # a non-contiguous input: the meta kernel
    check(lambda a: torch.softmax(a, 3), x)  # eager's error
    check(lambda a: torch.softmax(a, -1, dtype=torch.float64), x)  # a dtype argument: a cast, then _softmax


def test_first_softmax_does_not_import_sympy():
    # softmax's meta kernel is Python and imports sympy for its dtype rule: ~700 ms
    # on the first softmax of a process, before this path answered for it.
    code = """
import sys, torch, lazyjit
x = torch.randn(4, 8).to('lazyjit')
(torch.softmax(x, -1) + torch.log_softmax(x * 2, 0)).cpu()
print('sympy' in sys.modules)
"""
    assert run_python(code).stdout.strip().splitlines()[-1] == "False"


@pytest.mark.parametrize("dtype", DTYPES, ids=_id)
def test_structured_pointwise_on_non_contiguous_inputs(dtype):
    x, y = _make((4, 6), dtype, 1), _make((6, 4), dtype, 2)
    check(lambda a, b: a.t() + b, x, y)
    check(lambda a, b: torch.sub(a.t(), b, alpha=2), x, y)
    check(lambda a, b: a.t() * b, x, y)
    check(lambda a, b: a.t() / b, x, y)
    check(lambda a, b: torch.div(a.t(), b, rounding_mode="floor"), x, y)
    check(lambda a, b: torch.div(a.t(), b, rounding_mode="trunc"), x, y)
    check(lambda a, b: a[:1].expand(3, 6) + a[1:4], x, y)  # expanded: stride 0
    check(lambda a, b: a[:, ::2] * a[:, 1::2], x, y)  # sliced
    check(lambda a, b: a.t() + 1, x, y)  # a Python scalar (a wrapped number)
    check(lambda a, b: a.t() + torch.tensor(2.5), x, y)  # a 0-d CPU tensor
    check(lambda a, b: a.t().unsqueeze(0) * b.t().unsqueeze(1), x, y)  # broadcast of two views
    check(lambda a, b: a.t() + a, x, y)  # eager's size error


@pytest.mark.parametrize("dtype", DTYPES, ids=_id)
def test_structured_bmm_cumsum_argmax_topk(dtype):
    a, b = _make((3, 4, 5), dtype, 1), _make((3, 5, 2), dtype, 2)
    check(torch.bmm, a, b)
    check(lambda a, b: torch.bmm(a.transpose(1, 2), a), a, b)
    check(lambda a, b: a @ b, a, b)
    check(torch.bmm, a, a)  # eager's size error
    for dim in (0, 1, -1):
        check(lambda a: torch.cumsum(a, dim), a)
    check(lambda a: torch.cumsum(a, 1, dtype=torch.float64), a)
    check(lambda a: torch.cumsum(a, 3), a)  # eager's error
    for dim in (None, 0, -1):
        for keep in (False, True):
            check(lambda a: torch.argmax(a, dim, keepdim=keep), a)
            check(lambda a: torch.argmin(a, dim, keepdim=keep), a)
    for largest in (True, False):
        check(lambda a: torch.topk(a, 2, -1, largest=largest).values, a)
        check(lambda a: torch.topk(a, 2, 1, largest=largest, sorted=True).indices, a)
    check(lambda a: torch.topk(a, 9, -1), a)  # eager's error: k too large


def test_first_bmm_cumsum_argmax_topk_import_neither_sympy_nor_dynamo():
    # Their Python meta kernels (over the C++ ones) import sympy through
    # torch._check, and add on an expanded tensor imports torch._dynamo: 0.5-2 s each.
    code = """
import sys, torch, lazyjit
x = torch.randn(2, 4, 8).to('lazyjit')
ids = torch.arange(6).view(2, 3).to('lazyjit')
outs = [x @ x.transpose(1, 2), torch.bmm(x, x.transpose(1, 2)), ids.cumsum(-1), x.argmax(-1),
        x.topk(2, -1).values, x[:, :1].expand(2, 4, 8) + x, x.transpose(1, 2) * 2]
for o in outs:
    o.cpu()
print('sympy' in sys.modules, 'torch._dynamo' in sys.modules)
"""
    assert run_python(code).stdout.strip().splitlines()[-1] == "False False"


FLOATS = [torch.float32, torch.float64, torch.bfloat16]


@pytest.mark.parametrize("dtype", DTYPES, ids=_id)
def test_var_var_mean(dtype):
    x = _make((3, 4, 5), dtype, 1)
    for dim in (None, -1, 1, (0, 2)):
        for keep in (False, True):
            check(lambda a: torch.var(a, dim, keepdim=keep), x)
            check(lambda a: torch.var_mean(a, dim, keepdim=keep), x)
    check(lambda a: torch.var_mean(a, -1, correction=0), x)
    check(lambda a: torch.var(a.transpose(0, 2), 0), x)
    check(lambda a: torch.var(a, 3), x)  # eager's error


@pytest.mark.parametrize("dtype", FLOATS, ids=_id)
def test_scaled_dot_product_attention(dtype):
    q, k, v = (_make((2, 3, 5, 8), dtype, s) for s in (1, 2, 3))
    check(F.scaled_dot_product_attention, q, k, v)
    check(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), q, k, v)
    check(lambda q, k, v: F.scaled_dot_product_attention(q, k[:, :, :3], v[:, :, :3]), q, k, v)  # shorter keys
    check(lambda q, k, v: F.scaled_dot_product_attention(q.transpose(1, 2).contiguous().transpose(1, 2), k, v),
          q, k, v)  # a query laid out as [B, L, H, D]
    mask = torch.rand(5, 5, generator=torch.Generator().manual_seed(4)) > 0.3
    check(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m), q, k, v, mask | torch.eye(5).bool())


@pytest.mark.parametrize("dtype", DTYPES, ids=_id)
def test_masked_fill(dtype):
    x = _make((3, 4, 5), dtype, 1)
    m = _make((3, 4, 5), torch.bool, 2)
    fill = True if dtype == torch.bool else 7
    check(lambda a, m: a.masked_fill(m, fill), x, m)
    check(lambda a, m: a.masked_fill(m[:1, :, :1], fill), x, m)  # a broadcast mask
    check(lambda a, m: a.masked_fill(m[0, 0], fill), x, m)  # a 1-D mask
    check(lambda a, m: a.masked_fill(m, torch.tensor(fill, dtype=dtype)), x, m)  # a 0-d tensor value
    check(lambda a, m: a.transpose(0, 2).masked_fill(m.transpose(0, 2), fill), x, m)
    check(lambda a, m: a[0].masked_fill(m, fill), x, m)  # eager's error: the mask is larger


@pytest.mark.parametrize("dtype", FLOATS, ids=_id)
def test_gather_sort_baddbmm(dtype):
    x = _make((3, 4, 5), dtype, 1)
    idx = torch.randint(0, 5, (3, 4, 2), generator=torch.Generator().manual_seed(2))
    check(lambda a, i: torch.gather(a, -1, i), x, idx)
    check(lambda a, i: torch.gather(a, 2, i[:, :2]), x, idx)
    check(lambda a, i: torch.gather(a, 3, i), x, idx)  # eager's error
    for desc in (False, True):
        check(lambda a: torch.sort(a, -1, descending=desc).values, x)
        check(lambda a: torch.sort(a, 1, descending=desc, stable=True).indices, x)
    b = _make((3, 5, 2), dtype, 3)
    check(lambda c, a, b: torch.baddbmm(c, a, b), _make((3, 4, 2), dtype, 4), x, b)
    check(lambda c, a, b: torch.baddbmm(c, a, b, beta=0.5, alpha=2), _make((1, 4, 2), dtype, 4), x, b)
    check(lambda c, a, b: torch.baddbmm(c, a, a), _make((3, 4, 2), dtype, 4), x, b)  # eager's error


def check_grad(fn, *args):
    """fn's value and the gradients of its first argument against eager's."""
    want_x = args[0].clone().requires_grad_()
    want = fn(want_x, *args[1:])
    want.sum().backward()
    got_x = args[0].to(DEV).requires_grad_()
    got = fn(got_x, *[a.to(DEV) if isinstance(a, torch.Tensor) else a for a in args[1:]])
    got.sum().backward()
    assert_close(got.cpu(), want.detach(), rtol=1e-5, atol=1e-5)
    assert (got_x.grad.dtype, got_x.grad.shape) == (want_x.grad.dtype, want_x.grad.shape)
    assert_close(got_x.grad.cpu(), want_x.grad, rtol=1e-4, atol=1e-5)


def test_losses_and_backward_ops():
    x = _make((6, 5), torch.float32, 1)
    t = torch.tensor([0, 4, 2, 2, 1, 3])
    w = torch.rand(5, generator=torch.Generator().manual_seed(3)) + 0.5
    for red in ("mean", "sum", "none"):
        check_grad(lambda a, t: F.cross_entropy(a, t, reduction=red), x, t)
        check_grad(lambda a, t, w: F.cross_entropy(a, t, weight=w, reduction=red, ignore_index=2), x, t, w)
        check_grad(lambda a, y: F.mse_loss(a, y, reduction=red), x, _make((6, 5), torch.float32, 2))
    check_grad(lambda a, t: F.nll_loss(F.log_softmax(a, -1), t), x, t)
    for act in (F.gelu, lambda a: F.gelu(a, approximate="tanh"), torch.tanh, torch.sigmoid, F.silu, F.relu,
                lambda a: torch.softmax(a, 0), lambda a: torch.log_softmax(a, -1)):
        check_grad(lambda a: act(a) * torch.arange(5.0, device=a.device), x)


def test_first_attention_and_loss_ops_import_neither_sympy_nor_dynamo():
    code = """
import sys, torch, lazyjit
import torch.nn.functional as F
q = torch.randn(1, 2, 4, 8).to('lazyjit')
x = torch.randn(4, 8).to('lazyjit')
t = torch.tensor([1, 0, 3, 2]).to('lazyjit')
outs = [F.scaled_dot_product_attention(q, q, q, is_causal=True), x.masked_fill(x > 0, -1e9),
        torch.var_mean(x, -1)[0], F.cross_entropy(x, t), torch.gather(x, 1, t[:, None]), x.sort(-1).values,
        torch.baddbmm(q[0][:, :, :4], q[0], q[0].transpose(1, 2))]
for o in outs:
    o.cpu()
print('sympy' in sys.modules, 'torch._dynamo' in sys.modules)
"""
    assert run_python(code).stdout.strip().splitlines()[-1] == "False False"


@pytest.mark.parametrize("dtype", DTYPES, ids=_id)
def test_structured_reductions_and_index_ops(dtype):
    x = _make((3, 4, 5), dtype, 1)
    idx = torch.tensor([2, 0, 2])
    check(lambda a, i: a[i], x, idx)
    check(lambda a, i: a[:, i.int()], x, idx)
    check(lambda a, i: a[i, :, i], x, idx)  # two index tensors, broadcast together
    check(lambda a, i: a[i[:, None], i[:2]], x, idx)
    check(lambda a, i: a[a > a.flatten()[0]], x, idx)  # a bool mask: data-dependent, the meta kernel
    check(lambda a, i: a[i + 5], x, idx)  # eager's error: out of range
    for dims in ((0,), (1, 2), ()):
        for keep in (False, True):
            check(lambda a: torch.amax(a, dims, keepdim=keep), x)
            check(lambda a: torch.amin(a, dims, keepdim=keep), x)
    check(lambda a: torch.any(a), x)
    check(lambda a: torch.all(a, 1), x)
    check(lambda a: torch.any(a, (0, 2), keepdim=True), x)
    check(lambda a: torch.all(a, -1, keepdim=True), x)
    check(lambda a: a.flip(0), x)
    check(lambda a: a.flip((1, -1)), x)
    check(lambda a: a.transpose(0, 2).flip(0), x)  # a permuted (dense) input: its strides
    check(lambda a: a[:, ::2].flip(1), x)  # not dense: the meta kernel
    check(lambda a: a.flip((0, 0)), x)  # eager's error
    if dtype in (torch.int64, torch.bool):
        check(lambda a: a & a.flip(0), x)
        check(lambda a: a | a.transpose(0, 2).transpose(0, 2), x)
        check(lambda a: a ^ torch.tensor(True if dtype == torch.bool else 3), x)
    else:
        check(lambda a: a & a, x)  # eager's error: no bitwise ops on floats
    ix = torch.randint(0, 5, (3, 4, 2), generator=torch.Generator().manual_seed(5))
    check(lambda a, i: a.scatter(2, i, 1), x, ix)
    check(lambda a, i: a.scatter(2, i, a[:, :, :2].contiguous()), x, ix)
    check(lambda a: torch.cumprod(a, 1), x)
    check(lambda a: torch.cumprod(a, -1, dtype=torch.float64), x)


def test_structured_isin_norm_softplus():
    x = _make((4, 6), torch.float32, 1)
    ids = torch.tensor([[3, 1, 4], [1, 5, 9]])
    check(lambda a, b: torch.isin(a, b), ids, torch.tensor([1, 9, 2]))
    check(lambda a, b: torch.isin(a, b, invert=True), ids, torch.tensor([1, 9, 2]))
    for p in (2, 1, float("inf"), None):
        check(lambda a: a.norm(p=p, dim=-1), x)
        check(lambda a: a.norm(p=p, dim=(0, 1), keepdim=True), x)
    check(lambda a: torch.linalg.vector_norm(a, 3, dim=0), x)
    check(lambda a: torch.linalg.vector_norm(a, dim=None, dtype=torch.float64), x)
    check(lambda a: F.softplus(a), x)
    check(lambda a: F.softplus(a.t(), beta=2, threshold=1), x)


def test_first_index_reduction_and_mask_ops_import_neither_sympy_nor_dynamo():
    code = """
import sys, torch, lazyjit
import torch.nn.functional as F
x = torch.randn(4, 8).to('lazyjit')
i = torch.tensor([1, 3]).to('lazyjit')
outs = [x[i], x.amax(-1), (x > 0).any(), torch.isin(i, i), x.scatter(1, i.expand(4, 2), 1.0), x.norm(dim=-1),
        (x > 0) & (x < 1), x.cumprod(-1), F.softplus(x), x.flip(0)]
for o in outs:
    o.cpu()
print('sympy' in sys.modules, 'torch._dynamo' in sys.modules)
"""
    assert run_python(code).stdout.strip().splitlines()[-1] == "False False"


def test_arange_lengths_and_errors():
    # torch.arange on the device records arange.start_out into a new int64 tensor.
    for args in [(8,), (2, 9), (2, 9, 3), (9, 2, -3), (0,), (5, 5), (-3, 7, 2), (7, -3, -4)]:
        got, want = torch.arange(*args, device=DEV), torch.arange(*args)
        assert (got.dtype, got.shape, got.stride()) == (want.dtype, want.shape, want.stride()), args
        assert torch.equal(got.cpu(), want), args
    got, want = torch.arange(0.5, 3.2, 0.7, device=DEV), torch.arange(0.5, 3.2, 0.7)  # floats: the meta kernel
    assert got.shape == want.shape and torch.equal(got.cpu(), want)
    for bad in [(5, 2), (2, 5, -1), (1, 5, 0)]:
        with pytest.raises(RuntimeError):
            torch.arange(*bad)
        with pytest.raises(RuntimeError):
            torch.arange(*bad, device=DEV).cpu()


def test_first_arange_imports_neither_sympy_nor_dynamo():
    code = """
import sys, torch, lazyjit
x = torch.randn(6, 4).to('lazyjit')
pos = torch.arange(6, device='lazyjit')
(x * pos[:, None]).cpu()
print('sympy' in sys.modules, 'torch._dynamo' in sys.modules)
"""
    assert run_python(code).stdout.strip().splitlines()[-1] == "False False"
