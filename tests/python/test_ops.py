"""Every lowered op against eager PyTorch (the oracle).

Each check runs the same function on CPU tensors (eager) and on lazyjit
tensors, syncs with .cpu() and compares values, dtype and shape with
torch.testing.assert_close. Elementwise ops are also checked to run without
falling back to eager kernels.
"""
import math

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close, make_tensor

from conftest import DEV, lazyjit

FLOATS = [torch.float32, torch.float64]
LOW_FLOATS = [torch.float16, torch.bfloat16]
INTS = [torch.int32, torch.int64, torch.uint8]
ALL = FLOATS + LOW_FLOATS + INTS + [torch.bool]


# ---- helpers -------------------------------------------------------------------

class Cpu:
    """An operand that stays on the CPU (a 0-d CPU tensor)."""

    def __init__(self, t):
        self.t = t


class View:
    """An operand made by `view` from `base` (on the device for lazyjit)."""

    def __init__(self, base, view):
        self.base, self.view = base, view


def _eager_arg(a):
    if isinstance(a, Cpu):
        return a.t
    if isinstance(a, View):
        return a.view(a.base.clone())
    if isinstance(a, torch.Tensor):
        return a.clone()
    return a


def _lazy_arg(a):
    if isinstance(a, Cpu):
        return a.t
    if isinstance(a, View):
        return a.view(a.base.to(DEV))
    if isinstance(a, torch.Tensor):
        return a.to(DEV)
    return a


def _to_cpu(r):
    if isinstance(r, torch.Tensor):
        assert r.device.type == "lazyjit", f"result on {r.device}, expected lazyjit"
        return r.cpu()
    if isinstance(r, (tuple, list)):
        return type(r)(_to_cpu(x) for x in r)
    return r


def check(fn, *args, no_fallback=True, **tol):
    """fn(*args) on lazyjit equals fn(*args) eagerly: values, dtype, shape."""
    want = fn(*[_eager_arg(a) for a in args])
    before = dict(lazyjit.metrics()["fallbacks"])
    got_lazy = fn(*[_lazy_arg(a) for a in args])
    if isinstance(got_lazy, torch.Tensor):
        # Known at once, before any sync.
        assert got_lazy.shape == want.shape
        assert got_lazy.dtype == want.dtype
    got = _to_cpu(got_lazy)
    assert_close(got, want, equal_nan=True, **tol)
    if no_fallback:
        assert lazyjit.metrics()["fallbacks"] == before, "an elementwise op fell back to eager"
    return got


def mk(shape, dtype, low=None, high=None, exclude_zero=False):
    if dtype == torch.bool:
        return make_tensor(shape, dtype=dtype, device="cpu")
    if not dtype.is_floating_point:
        low = None if low is None else math.ceil(low)
        high = None if high is None else math.floor(high)
        if dtype == torch.uint8 and low is not None:
            low = max(low, 0)
    return make_tensor(shape, dtype=dtype, device="cpu", low=low, high=high,
                       exclude_zero=exclude_zero)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(1234)


# ---- op tables ---------------------------------------------------------------------
# name -> (fn, dtypes, (low, high), exclude_zero)

UNARY = {
    "abs": (torch.abs, FLOATS + LOW_FLOATS + INTS, (-9, 9), False),
    "neg": (torch.neg, FLOATS + LOW_FLOATS + INTS, (-9, 9), False),
    "exp": (torch.exp, FLOATS + LOW_FLOATS + INTS + [torch.bool], (-5, 5), False),
    "log": (torch.log, FLOATS + LOW_FLOATS + INTS, (0.05, 9), False),
    "sqrt": (torch.sqrt, FLOATS + LOW_FLOATS + INTS, (0, 9), False),
    "rsqrt": (torch.rsqrt, FLOATS + LOW_FLOATS + INTS, (0.05, 9), False),
    "tanh": (torch.tanh, FLOATS + LOW_FLOATS + INTS, (-5, 5), False),
    "sigmoid": (torch.sigmoid, FLOATS + LOW_FLOATS + INTS, (-9, 9), False),
    "relu": (torch.relu, FLOATS + LOW_FLOATS + INTS, (-9, 9), False),
    "gelu": (F.gelu, FLOATS + LOW_FLOATS, (-5, 5), False),
    "gelu_tanh": (lambda x: F.gelu(x, approximate="tanh"), FLOATS + LOW_FLOATS, (-5, 5), False),
    "silu": (F.silu, FLOATS + LOW_FLOATS, (-9, 9), False),
    "reciprocal": (torch.reciprocal, FLOATS + LOW_FLOATS + INTS, (-9, 9), True),
    "sin": (torch.sin, FLOATS + LOW_FLOATS + INTS, (-6, 6), False),
    "cos": (torch.cos, FLOATS + LOW_FLOATS + INTS, (-6, 6), False),
    "log1p": (torch.log1p, FLOATS + LOW_FLOATS + INTS, (-0.9, 9), False),
    "expm1": (torch.expm1, FLOATS + LOW_FLOATS + INTS, (-5, 5), False),
    "erf": (torch.erf, FLOATS + LOW_FLOATS + INTS, (-3, 3), False),
    "logical_not": (torch.logical_not, ALL, (-3, 3), False),
    "clamp_min_only": (lambda x: torch.clamp(x, min=-1), FLOATS + LOW_FLOATS + INTS, (-5, 5), False),
    "clamp_max_only": (lambda x: torch.clamp(x, max=2), FLOATS + LOW_FLOATS + INTS, (-5, 5), False),
    "clamp_both": (lambda x: torch.clamp(x, -1.5, 2.5), FLOATS + LOW_FLOATS, (-5, 5), False),
    "clamp_both_int": (lambda x: torch.clamp(x, 1, 3), FLOATS + INTS, (-5, 5), False),
    "clamp_min_fn": (lambda x: torch.clamp_min(x, 0.5), FLOATS + LOW_FLOATS, (-5, 5), False),
    "clamp_max_fn": (lambda x: torch.clamp_max(x, 0.5), FLOATS + LOW_FLOATS, (-5, 5), False),
    "clamp_min_fn_int": (lambda x: torch.clamp_min(x, 2), INTS, (-5, 5), False),
    "pow_scalar2": (lambda x: torch.pow(x, 2), FLOATS + LOW_FLOATS + INTS, (-4, 4), False),
    "pow_scalar_half": (lambda x: x ** 0.5, FLOATS + LOW_FLOATS, (0, 9), False),
    "pow_scalar_neg": (lambda x: x ** -1.5, FLOATS, (0.1, 9), False),
    "pow_scalar_3": (lambda x: x ** 3, FLOATS + INTS, (-4, 4), False),
    "rpow_scalar": (lambda x: torch.pow(2.0, x), FLOATS + LOW_FLOATS + INTS, (-4, 4), False),
    "rpow_scalar_int": (lambda x: torch.pow(3, x), FLOATS + INTS, (0, 4), False),
}

# name -> (fn, dtypes, (low, high) for b, exclude_zero for b)
BINARY = {
    "add": (torch.add, ALL, (-9, 9), False),
    "add_alpha": (lambda a, b: torch.add(a, b, alpha=2), FLOATS + LOW_FLOATS + INTS, (-9, 9), False),
    "add_alpha_float": (lambda a, b: torch.add(a, b, alpha=0.25), FLOATS + LOW_FLOATS, (-9, 9), False),
    "sub": (torch.sub, FLOATS + LOW_FLOATS + INTS, (-9, 9), False),
    "sub_alpha": (lambda a, b: torch.sub(a, b, alpha=3), FLOATS + LOW_FLOATS + INTS, (-9, 9), False),
    "mul": (torch.mul, ALL, (-9, 9), False),
    "div": (torch.div, FLOATS + LOW_FLOATS + INTS, (-9, 9), True),
    "div_trunc": (lambda a, b: torch.div(a, b, rounding_mode="trunc"), FLOATS + LOW_FLOATS + INTS, (-9, 9), True),
    "div_floor": (lambda a, b: torch.div(a, b, rounding_mode="floor"), FLOATS + LOW_FLOATS + INTS, (-9, 9), True),
    "remainder": (torch.remainder, FLOATS + LOW_FLOATS + INTS, (-9, 9), True),
    "pow_tt": (torch.pow, FLOATS + LOW_FLOATS, (-2, 2), False),
    "maximum": (torch.maximum, ALL, (-9, 9), False),
    "minimum": (torch.minimum, ALL, (-9, 9), False),
    "eq": (torch.eq, ALL, (-2, 2), False),
    "ne": (torch.ne, ALL, (-2, 2), False),
    "lt": (torch.lt, ALL, (-2, 2), False),
    "le": (torch.le, ALL, (-2, 2), False),
    "gt": (torch.gt, ALL, (-2, 2), False),
    "ge": (torch.ge, ALL, (-2, 2), False),
    "logical_and": (torch.logical_and, ALL, (-2, 2), False),
    "logical_or": (torch.logical_or, ALL, (-2, 2), False),
    "bitwise_and": (torch.bitwise_and, INTS + [torch.bool], (-9, 9), False),
    "bitwise_or": (torch.bitwise_or, INTS + [torch.bool], (-9, 9), False),
    "bitwise_xor": (torch.bitwise_xor, INTS + [torch.bool], (-9, 9), False),
}

# Value range for the first operand of binary ops.
A_RANGE = {"pow_tt": (0.1, 3), "eq": (-2, 2), "ne": (-2, 2), "lt": (-2, 2), "le": (-2, 2),
           "gt": (-2, 2), "ge": (-2, 2), "logical_and": (-2, 2), "logical_or": (-2, 2)}


def _cases(table):
    return [pytest.param(name, dt, id=f"{name}-{str(dt).split('.')[-1]}")
            for name, (_, dts, _, _) in table.items() for dt in dts]


def _float32_only(table):
    return [pytest.param(name, id=name) for name, (_, dts, _, _) in table.items()
            if torch.float32 in dts]


SHAPE = (7, 37)  # an odd size: vector bodies and tails


# ---- unary ops -------------------------------------------------------------------

@pytest.mark.parametrize("name,dtype", _cases(UNARY))
def test_unary(name, dtype):
    fn, _, (lo, hi), nz = UNARY[name]
    check(fn, mk(SHAPE, dtype, lo, hi, nz))


UNARY_LAYOUTS = {
    "0d": lambda t: View(t.reshape(-1)[0].clone(), lambda x: x),
    "empty": lambda t: t[:0],
    "empty_inner": lambda t: t[:, :0],
    "transposed": lambda t: View(t, lambda x: x.t()),
    "step_slice": lambda t: View(t, lambda x: x[::2, 1::3]),
    "expanded": lambda t: View(t[:, :1].clone(), lambda x: x.expand(-1, 6)),
    "permuted_3d": lambda t: View(t.reshape(2, 3, -1), lambda x: x.permute(2, 0, 1)),
}


@pytest.mark.parametrize("dtype", FLOATS, ids=["f32", "f64"])
@pytest.mark.parametrize("layout", list(UNARY_LAYOUTS))
@pytest.mark.parametrize("name", _float32_only(UNARY))
def test_unary_layouts(name, layout, dtype):
    fn, _, (lo, hi), nz = UNARY[name]
    base = mk((6, 8), dtype, lo, hi, nz)
    check(fn, UNARY_LAYOUTS[layout](base))


# ---- binary ops -------------------------------------------------------------------

def _binary_inputs(name, dtype, sa, sb):
    lo, hi = A_RANGE.get(name, (-9, 9))
    _, _, (blo, bhi), nz = BINARY[name]
    return mk(sa, dtype, lo, hi), mk(sb, dtype, blo, bhi, nz)


# Half-type ops where CPU eager rounds in between, or overflows, in some of its
# paths: per element, eager's value or the op computed in the wider dtype and
# rounded once (as fusing compilers and CUDA eager compute it) is accepted.
# name -> the wider dtype.
# - div_trunc, div_floor: eager rounds the quotient to the half type before
#   truncating (74 for trunc(73.8) in bfloat16).
# - sub_alpha: eager's scalar loop (the elements after its last full vector:
#   here the last 3 of 259) rounds alpha * b to the half type first; its vector
#   loop does not (7.25 - 3 * 2.390625: 0.0625 against 0.078125 in bfloat16).
# - remainder: eager's vector loop computes a - floor(a / b) * b in float32,
#   whose quotient overflows for a divisor near the smallest normal float
#   (5.90625 % 2**-126: NaN; its scalar loop and Python's modulus: 0).
ROUNDED_ONCE = {"div_trunc": torch.float32, "div_floor": torch.float32, "sub_alpha": torch.float32,
                "remainder": torch.float64}


@pytest.mark.parametrize("name,dtype", _cases(BINARY))
def test_binary(name, dtype):
    fn = BINARY[name][0]
    a, b = _binary_inputs(name, dtype, SHAPE, SHAPE)
    if name in ROUNDED_ONCE and dtype in LOW_FLOATS:
        got = fn(a.to(DEV), b.to(DEV)).cpu()
        want = fn(a, b)
        wide = ROUNDED_ONCE[name]
        want_once = fn(a.to(wide), b.to(wide)).to(dtype)
        assert got.dtype == want.dtype and got.shape == want.shape
        ok = (got == want) | (got == want_once) | (got.isnan() & want.isnan())
        assert bool(ok.all()), f"{got[~ok]} vs eager {want[~ok]}, once in {wide} {want_once[~ok]}"
        return
    check(fn, a, b)


def _layout_args(layout, a, b):
    """Operands for `layout`, from a [4, 6] and b [4, 6] float tensors."""
    if layout == "bcast_4x1_1x5":
        return a[:, :1].clone(), b[:1, :5].clone()
    if layout == "bcast_3_2x3":
        return a[0, :3].clone(), b[:2, :3].clone()
    if layout == "bcast_2x3_3":
        return a[:2, :3].clone(), b[0, :3].clone()
    if layout == "bcast_3d":
        return a.reshape(2, 1, 12)[:, :, :6].clone(), b[:3, :1].clone()
    if layout == "0d_lazy_both":
        return a[0, 0].clone(), b[0, 1].clone()
    if layout == "0d_lazy_rhs":
        return a, b[0, 0].clone()
    if layout == "0d_lazy_lhs":
        return a[0, 0].clone(), b
    if layout == "0d_cpu_rhs":
        return a, Cpu(b[0, 0].clone())
    if layout == "0d_cpu_lhs":
        return Cpu(a[0, 0].clone()), b
    if layout == "empty":
        return a[:0], b[:0]
    if layout == "empty_bcast":
        return a[:0, :1], b[:1, :5]
    if layout == "transposed_lhs":
        return View(a, lambda x: x.t()), b.t().contiguous()
    if layout == "both_transposed":
        return View(a, lambda x: x.t()), View(b, lambda x: x.t())
    if layout == "step_slice":
        return View(a, lambda x: x[::2, ::3]), View(b, lambda x: x[1::2, 1::3])
    if layout == "expanded":
        return View(a[:, :1].clone(), lambda x: x.expand(4, 6)), b
    if layout == "transposed_bcast":
        return View(a, lambda x: x.t()), b[:1, :4].clone().reshape(4)
    raise AssertionError(layout)


BINARY_LAYOUTS = ["bcast_4x1_1x5", "bcast_3_2x3", "bcast_3d", "0d_lazy_both",
                  "0d_lazy_rhs", "0d_cpu_rhs", "0d_cpu_lhs", "empty",
                  "empty_bcast", "transposed_lhs", "both_transposed", "step_slice", "expanded",
                  "transposed_bcast"]


@pytest.mark.parametrize("dtype", FLOATS, ids=["f32", "f64"])
@pytest.mark.parametrize("layout", BINARY_LAYOUTS)
@pytest.mark.parametrize("name", _float32_only(BINARY))
def test_binary_layouts(name, layout, dtype):
    if layout == "0d_cpu_lhs" and name in ("logical_and", "logical_or"):
        # ATen allocates these ops' result on the first operand's device, so a CPU
        # scalar first operand is refused by CUDA too.
        pytest.skip("not supported with a CPU scalar first operand on CUDA either")
    fn = BINARY[name][0]
    a, b = _binary_inputs(name, dtype, (4, 6), (4, 6))
    check(fn, *_layout_args(layout, a, b))


@pytest.mark.parametrize("layout", ["bcast_4x1_1x5", "0d_cpu_rhs", "step_slice", "empty"])
@pytest.mark.parametrize("name", ["add", "mul", "div_floor", "remainder", "maximum", "lt",
                                  "bitwise_xor"])
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64], ids=["i32", "i64"])
def test_binary_layouts_int(name, layout, dtype):
    fn = BINARY[name][0]
    a, b = _binary_inputs(name, dtype, (4, 6), (4, 6))
    check(fn, *_layout_args(layout, a, b))


# ---- Python scalars and mixed dtypes -----------------------------------------------

SCALAR_EXPRS = {
    "add_int": lambda x: x + 2,
    "add_float": lambda x: x + 2.5,
    "add_bool": lambda x: x + True,
    "radd_float": lambda x: 1.5 + x,
    "sub_int": lambda x: x - 3,
    "rsub_float": lambda x: 0.5 - x,
    "sub_bool": lambda x: x - True,
    "mul_float": lambda x: x * 0.5,
    "mul_bool": lambda x: x * False,
    "div_int": lambda x: x / 4,
    "rdiv_float": lambda x: 2.0 / (x.abs() + 1),
    "div_trunc_scalar": lambda x: torch.div(x, 3, rounding_mode="trunc"),
    "div_floor_scalar": lambda x: torch.div(x, -3, rounding_mode="floor"),
    "remainder_int": lambda x: x % 3,
    "remainder_neg": lambda x: torch.remainder(x, -2.5),
    "pow_2": lambda x: x ** 2,
    "eq_int": lambda x: x == 1,
    "ne_float": lambda x: x != 0.0,
    "gt_float": lambda x: x > 0.5,
    "le_int": lambda x: x <= -1,
    "ge_bool": lambda x: x >= True,
    "maximum_0d": lambda x: torch.maximum(x, torch.tensor(1, dtype=x.dtype)),
    "where_scalars": lambda x: torch.where(x > 0, 1.0, -1.0),
    "where_scalar_other": lambda x: torch.where(x > 0, x, 0),
    "clamp_float_bounds": lambda x: x.clamp(-0.5, 0.5),
    "add_alpha_scalar": lambda x: torch.add(x, 2, alpha=3),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int32, torch.int64,
                                   torch.float16, torch.bfloat16],
                         ids=["f32", "f64", "i32", "i64", "f16", "bf16"])
@pytest.mark.parametrize("name", list(SCALAR_EXPRS))
def test_python_scalars(name, dtype):
    fn = SCALAR_EXPRS[name]
    x = mk((5, 9), dtype, -5, 5)
    try:
        fn(x.clone())
    except RuntimeError:
        # Not supported eagerly for this dtype (e.g. remainder by a float on ints, clamp
        # of an int by floats): lazyjit must refuse too.
        with pytest.raises(RuntimeError):
            fn(x.to(DEV)).cpu()
        return
    check(fn, x)


@pytest.mark.parametrize("expr", [
    pytest.param(lambda x, s: x * s, id="mul"),
    pytest.param(lambda x, s: x + s, id="add"),
    pytest.param(lambda x, s: x - s, id="sub"),
    pytest.param(lambda x, s: s - x, id="rsub"),
    pytest.param(lambda x, s: x / s, id="div"),
    pytest.param(lambda x, s: torch.maximum(x, s), id="maximum"),
    pytest.param(lambda x, s: x > s, id="gt"),
    pytest.param(lambda x, s: torch.where(x > 0, x, s), id="where"),
    pytest.param(lambda x, s: torch.clamp(x, min=s), id="clamp_tensor_min"),
])
@pytest.mark.parametrize("sdtype", [torch.float32, torch.float64, torch.int64, torch.bool],
                         ids=["f32", "f64", "i64", "bool"])
@pytest.mark.parametrize("xdtype", [torch.float32, torch.int32], ids=["x_f32", "x_i32"])
def test_cpu_0d_tensor_operand(expr, sdtype, xdtype):
    """0-d CPU tensors mix with lazyjit tensors (as on CUDA) and promote like 0-d tensors."""
    x = mk((3, 5), xdtype, -4, 4)
    s = torch.tensor(3, dtype=sdtype) if sdtype != torch.bool else torch.tensor(True)
    try:
        expr(x.clone(), s)
    except RuntimeError:
        with pytest.raises(RuntimeError):
            expr(x.to(DEV), s).cpu()
        return
    check(expr, x, Cpu(s))


@pytest.mark.parametrize("a_dt,b_dt", [
    (torch.int32, torch.float32), (torch.float32, torch.int64), (torch.int64, torch.float64),
    (torch.float16, torch.float32), (torch.bfloat16, torch.float16), (torch.bool, torch.int32),
    (torch.uint8, torch.int32), (torch.uint8, torch.bool), (torch.float32, torch.float64),
    (torch.bool, torch.float32), (torch.int32, torch.int64),
], ids=lambda d: str(d).split(".")[-1])
@pytest.mark.parametrize("name", ["add", "mul", "div", "maximum", "lt", "eq"])
def test_mixed_dtype_promotion(name, a_dt, b_dt):
    fn = BINARY[name][0]
    a = mk((4, 6), a_dt, -5, 5)
    b = mk((4, 6), b_dt, -5, 5, exclude_zero=True)
    check(fn, a, b)


# ---- where and clamp with tensor operands -------------------------------------------------

@pytest.mark.parametrize("dtype", FLOATS + LOW_FLOATS + INTS + [torch.bool],
                         ids=lambda d: str(d).split(".")[-1])
def test_where(dtype):
    cond = mk((5, 7), torch.bool)
    check(torch.where, cond, mk((5, 7), dtype, -5, 5), mk((5, 7), dtype, -5, 5))


@pytest.mark.parametrize("layout", ["bcast", "0d_cpu", "noncontig", "empty", "cond_from_cmp"])
@pytest.mark.parametrize("dtype", FLOATS, ids=["f32", "f64"])
def test_where_layouts(layout, dtype):
    a = mk((4, 6), dtype, -5, 5)
    b = mk((4, 6), dtype, -5, 5)
    c = mk((4, 6), torch.bool)
    if layout == "bcast":
        check(torch.where, c[:, :1].clone(), a[:1, :].clone(), b[0, :].clone())
    elif layout == "0d_cpu":
        check(torch.where, c, a, Cpu(torch.tensor(7.0, dtype=dtype)))
    elif layout == "noncontig":
        check(torch.where, View(c, lambda t: t.t()), View(a, lambda t: t.t()), b.t().contiguous())
    elif layout == "empty":
        check(torch.where, c[:0], a[:0], b[:0])
    else:
        check(lambda x, y: torch.where(x > y, x * 2, y - 1), a, b)


@pytest.mark.parametrize("which", ["min", "max", "both", "bcast_both", "0d_lazy"])
@pytest.mark.parametrize("dtype", FLOATS + [torch.int32, torch.int64],
                         ids=["f32", "f64", "i32", "i64"])
def test_clamp_tensor_bounds(which, dtype):
    x = mk((4, 6), dtype, -9, 9)
    lo = mk((4, 6), dtype, -5, 0)
    hi = mk((4, 6), dtype, 1, 5)
    if which == "min":
        check(lambda x, lo: torch.clamp(x, min=lo), x, lo)
    elif which == "max":
        check(lambda x, hi: torch.clamp(x, max=hi), x, hi)
    elif which == "both":
        check(torch.clamp, x, lo, hi)
    elif which == "bcast_both":
        check(torch.clamp, x, lo[:1].clone(), hi[:, :1].clone())
    else:
        check(torch.clamp, x, lo[0, 0].clone(), hi[0, 0].clone())


# ---- NaN and Inf ---------------------------------------------------------------------

SPECIAL = [0.0, -0.0, 1.5, -2.0, float("nan"), float("inf"), -float("inf"), 3.0]


@pytest.mark.parametrize("fn", [
    pytest.param(torch.maximum, id="maximum"),
    pytest.param(torch.minimum, id="minimum"),
    pytest.param(lambda a, b: torch.clamp(a, min=b), id="clamp_tensor_min"),
    pytest.param(lambda a, b: torch.clamp(a, max=b), id="clamp_tensor_max"),
    pytest.param(lambda a, b: torch.clamp(a, b, b + 1), id="clamp_tensor_both"),
    pytest.param(lambda a, b: a + b, id="add"),
    pytest.param(lambda a, b: a / b, id="div"),
    pytest.param(lambda a, b: torch.remainder(a, b), id="remainder"),
    pytest.param(lambda a, b: a < b, id="lt"),
    pytest.param(lambda a, b: a == b, id="eq"),
    pytest.param(lambda a, b: a != b, id="ne"),
    pytest.param(lambda a, b: a ** b, id="pow"),
])
@pytest.mark.parametrize("dtype", FLOATS, ids=["f32", "f64"])
def test_nan_inf_binary(fn, dtype):
    v = torch.tensor(SPECIAL, dtype=dtype)
    a = v.repeat_interleave(len(SPECIAL)).reshape(len(SPECIAL), len(SPECIAL))
    b = v.repeat(len(SPECIAL)).reshape(len(SPECIAL), len(SPECIAL))
    check(fn, a, b)


# torch 2.11's CPU clamp with a NaN number bound returns its input unchanged;
# torch.clamp_min(x, nan), a NaN tensor bound, CUDA eager and torch 2.13's CPU
# clamp return NaN. Decided by asking the running torch.
_EAGER_CLAMP_IGNORES_NAN_BOUND = not bool(torch.clamp(torch.ones(1), min=float("nan")).isnan().all())


@pytest.mark.parametrize("fn", [
    pytest.param(torch.relu, id="relu"),
    pytest.param(lambda x: torch.clamp(x, min=0.0), id="clamp_min"),
    pytest.param(lambda x: torch.clamp(x, max=0.0), id="clamp_max"),
    pytest.param(lambda x: torch.clamp(x, -1.0, 1.0), id="clamp_both"),
    pytest.param(lambda x: torch.clamp_min(x, 1.0), id="clamp_min_fn"),
    pytest.param(lambda x: torch.clamp_max(x, 1.0), id="clamp_max_fn"),
    pytest.param(lambda x: torch.clamp(x, min=float("nan")), id="clamp_nan_bound",
                 marks=pytest.mark.xfail(_EAGER_CLAMP_IGNORES_NAN_BOUND, strict=True, raises=AssertionError,
                                         reason="this torch's CPU clamp ignores a NaN number bound (2.11: it "
                                                "returns the input; its clamp_min, a NaN tensor bound, CUDA "
                                                "eager and 2.13's CPU clamp return NaN, as lazyjit does)")),
    pytest.param(lambda x: torch.maximum(x, torch.zeros_like(x)), id="maximum_zero"),
    pytest.param(torch.abs, id="abs"),
    pytest.param(torch.neg, id="neg"),
    pytest.param(torch.exp, id="exp"),
    pytest.param(torch.log, id="log"),
    pytest.param(torch.sqrt, id="sqrt"),
    pytest.param(torch.rsqrt, id="rsqrt"),
    pytest.param(torch.tanh, id="tanh"),
    pytest.param(torch.sigmoid, id="sigmoid"),
    pytest.param(F.gelu, id="gelu"),
    pytest.param(lambda x: F.gelu(x, approximate="tanh"), id="gelu_tanh"),
    pytest.param(F.silu, id="silu"),
    pytest.param(torch.reciprocal, id="reciprocal"),
    pytest.param(torch.erf, id="erf"),
    pytest.param(torch.expm1, id="expm1"),
    pytest.param(torch.log1p, id="log1p"),
    pytest.param(torch.logical_not, id="logical_not"),
])
@pytest.mark.parametrize("dtype", FLOATS, ids=["f32", "f64"])
def test_nan_inf_unary(fn, dtype):
    values = SPECIAL + [-1.0, 100.0, -100.0]
    if fn is F.gelu:
        # Eager's float32 erf-GELU gives nan for +inf (float64 gives inf): no oracle there.
        values = [v for v in values if not math.isinf(v)]
    check(fn, torch.tensor(values, dtype=dtype))


def test_large_magnitudes_transcendental():
    x = torch.tensor([-1e4, -90.0, -20.0, -1e-7, 0.0, 1e-7, 20.0, 88.0, 89.0, 1e4])
    for fn in (torch.exp, torch.tanh, torch.sigmoid, F.silu, F.gelu, torch.expm1, torch.erf,
               lambda t: F.gelu(t, approximate="tanh")):
        check(fn, x)


# ---- in-place -------------------------------------------------------------------------

INPLACE = {
    "add_": lambda x, y: x.add_(y),
    "add_alpha": lambda x, y: x.add_(y, alpha=-2),
    "sub_": lambda x, y: x.sub_(y),
    "mul_": lambda x, y: x.mul_(y),
    "mul_scalar": lambda x, y: x.mul_(3),
    "mul_float_scalar": lambda x, y: x.mul_(0.5),
    "div_": lambda x, y: x.div_(y.abs() + 1),
    "div_floor_": lambda x, y: x.div_(y.abs() + 1, rounding_mode="floor"),
    "add_scalar": lambda x, y: x.add_(1.5),
    "relu_": lambda x, y: x.relu_(),
    "F_relu_inplace": lambda x, y: F.relu(x, inplace=True),
    "sigmoid_": lambda x, y: x.sigmoid_(),
    "tanh_": lambda x, y: x.tanh_(),
    "exp_": lambda x, y: x.exp_(),
    "neg_": lambda x, y: x.neg_(),
    "abs_": lambda x, y: x.abs_(),
    "clamp_": lambda x, y: x.clamp_(-1, 1),
    "clamp_min_": lambda x, y: x.clamp_min_(0),
    "clamp_max_": lambda x, y: x.clamp_max_(0.25),
    "pow_": lambda x, y: x.pow_(2),
    "maximum_out": lambda x, y: torch.maximum(x, y, out=x),
    "add_bcast": lambda x, y: x.add_(y[:1]),
    "iadd": lambda x, y: x.__iadd__(y),
    "imul_0d": lambda x, y: x.__imul__(y[0, 0]),
    "remainder_": lambda x, y: x.remainder_(3),
    "where_chain": lambda x, y: x.mul_(2).add_(y).relu_(),
    "gelu_via_F": lambda x, y: x.copy_(F.gelu(x)),
}


@pytest.mark.parametrize("dtype", FLOATS, ids=["f32", "f64"])
@pytest.mark.parametrize("name", list(INPLACE))
def test_inplace(name, dtype):
    fn = INPLACE[name]
    x = mk((4, 6), dtype, -5, 5)
    y = mk((4, 6), dtype, -5, 5)

    def run(x, y):
        r = fn(x, y)
        assert r is x  # in-place ops return self
        return x

    check(run, x, y)


@pytest.mark.parametrize("name", ["add_", "sub_", "mul_", "mul_scalar", "add_bcast", "neg_",
                                  "abs_", "clamp_", "remainder_", "maximum_out"])
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64], ids=["i32", "i64"])
def test_inplace_int(name, dtype):
    fn = INPLACE[name]
    check(lambda x, y: (fn(x, y), x)[1], mk((4, 6), dtype, -5, 5), mk((4, 6), dtype, -5, 5))


def test_inplace_int_by_float_is_refused_like_eager():
    x = torch.arange(6, dtype=torch.int64)
    with pytest.raises(RuntimeError):
        x.clone().add_(1.5)
    with pytest.raises(RuntimeError):
        x.to(DEV).add_(1.5).cpu()


def test_inplace_mixed_dtype():
    # float32 += float64 / int: the result keeps self's dtype, as eagerly.
    check(lambda x, y: x.add_(y), mk((3, 4), torch.float32), mk((3, 4), torch.float64))
    check(lambda x, y: x.mul_(y), mk((3, 4), torch.float32), mk((3, 4), torch.int32))
    check(lambda x, y: x.add_(y), mk((3, 4), torch.float16), mk((3, 4), torch.float32))
    check(lambda x, y: x.add_(y), mk((3, 4), torch.int64), mk((3, 4), torch.int32))


def test_inplace_on_noncontiguous_view():
    def fn(x, y):
        x.t().add_(y.t())
        x[::2].mul_(3)
        x[:, 1::2].relu_()
        return x
    check(fn, mk((4, 6), torch.float32), mk((4, 6), torch.float32))


# ---- fused chains ------------------------------------------------------------------

def gelu_tanh_primitives(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


CHAINS = {
    "gelu_tanh_primitives": lambda x, y: gelu_tanh_primitives(x),
    "swish_plus_one": lambda x, y: x * torch.sigmoid(x) + 1,
    "residual_mix": lambda x, y: torch.relu(x * 2 + y) - torch.exp(-y.abs()) / (1 + x * x),
    "softplus_like": lambda x, y: torch.log1p(torch.exp(-x.abs())) + torch.clamp(x, min=0),
    "masked": lambda x, y: torch.where(x > y, torch.sqrt(x.abs() + 1), -torch.rsqrt(y * y + 1)),
    "compare_chain": lambda x, y: ((x > 0) & (y < 0)) | ((x * y).abs() < 1),
    "bcast_chain": lambda x, y: (x[:, :1] * y[:1, :] + x.sum(0, keepdim=True)).tanh(),
    "int_chain": lambda x, y: (x.round().to(torch.int32) * 3 + 1) % 5,
    "multi_use": lambda x, y: (lambda t: (t, t * t, t.sin()))(x + y),
    "erf_gelu": lambda x, y: x * 0.5 * (1 + torch.erf(x / math.sqrt(2))),
    "expm1_log": lambda x, y: torch.expm1(x / 4) * torch.log(y.abs() + 0.5) - F.silu(x),
    "pow_chain": lambda x, y: (x.abs() + 0.1) ** (y / 4) + 2 ** (y / 3),
    "clamp_chain": lambda x, y: x.clamp(-1, 1) * y.clamp_min(0) + y.clamp_max(0) ** 2,
    "inplace_chain": lambda x, y: x.clone().mul_(2).add_(y, alpha=0.5).sigmoid_() + y,
    "view_chain": lambda x, y: (x.t() * 2).reshape(-1)[::3] + 1,
    "long_chain": lambda x, y: (lambda t: [t := (t * 1.01 + 0.01).tanh() for _ in range(40)][-1])(x),
}


@pytest.mark.parametrize("dtype", FLOATS + LOW_FLOATS, ids=["f32", "f64", "f16", "bf16"])
@pytest.mark.parametrize("name", list(CHAINS))
def test_fused_chains(name, dtype):
    if name == "long_chain" and dtype in LOW_FLOATS:
        pytest.skip("40 rounding steps in half precision: not comparable op for op")
    fn = CHAINS[name]
    tol = {}
    if dtype in LOW_FLOATS:
        # A fused chain may keep float32 intermediates where eager rounds after each op.
        tol = dict(rtol=2e-2, atol=2e-2)
    check(fn, mk((9, 33), dtype, -3, 3), mk((9, 33), dtype, -3, 3), no_fallback=False, **tol)


def test_fused_chain_compiles_once_without_fallbacks(fresh):
    x = torch.randn(16, 16)
    got = gelu_tanh_primitives(x.to(DEV)) * torch.sigmoid(x.to(DEV))
    assert fresh.metrics()["compiles"] == 0  # nothing runs before the sync
    out = got.cpu()
    assert_close(out, gelu_tanh_primitives(x) * torch.sigmoid(x))
    m = fresh.metrics()
    assert m["fallbacks"] == {}
    assert m["compiles"] == 1
    assert m["graphs_executed"] == 1


# ---- matmul ops (ATen steps) -----------------------------------------------------------

MATMUL = {
    "mm": (lambda a, b, c: torch.mm(a, b), [(5, 7), (7, 3), None]),
    "mm_transposed": (lambda a, b, c: torch.mm(a.t(), b.t()), [(7, 5), (3, 7), None]),
    "addmm": (lambda a, b, c: torch.addmm(c, a, b), [(5, 7), (7, 3), (3,)]),
    "addmm_beta_alpha": (lambda a, b, c: torch.addmm(c, a, b, beta=0.5, alpha=2), [(5, 7), (7, 3), (5, 3)]),
    "bmm": (lambda a, b, c: torch.bmm(a, b), [(4, 5, 7), (4, 7, 3), None]),
    "bmm_transposed": (lambda a, b, c: torch.bmm(a, b.transpose(1, 2)), [(4, 5, 7), (4, 3, 7), None]),
    "linear": (lambda a, b, c: F.linear(a, b, c), [(5, 7), (3, 7), (3,)]),
    "linear_nobias": (lambda a, b, c: F.linear(a, b), [(5, 7), (3, 7), None]),
    "linear_3d": (lambda a, b, c: F.linear(a, b, c), [(2, 5, 7), (3, 7), (3,)]),
    "matmul_bcast": (lambda a, b, c: a @ b, [(2, 5, 7), (7, 3), None]),
    "mm_then_elementwise": (lambda a, b, c: torch.relu(torch.mm(a * 2, b) + c).sigmoid(), [(5, 7), (7, 3), (3,)]),
    "mm_empty_k": (lambda a, b, c: torch.mm(a, b), [(5, 0), (0, 3), None]),
    "linear_gelu_linear": (lambda a, b, c: F.linear(F.gelu(F.linear(a, b, c)), b.t()), [(5, 7), (3, 7), (3,)]),
}


@pytest.mark.parametrize("dtype", FLOATS, ids=["f32", "f64"])
@pytest.mark.parametrize("name", list(MATMUL))
def test_matmul(name, dtype):
    fn, shapes = MATMUL[name]
    args = [mk(s, dtype, -2, 2) if s is not None else None for s in shapes]
    check(fn, *args)


@pytest.mark.parametrize("dtype", FLOATS + [torch.bfloat16], ids=["f32", "f64", "bf16"])
@pytest.mark.parametrize("exponent", [2, 3, -2, -1, 0, 1, 0.5, -0.5, 2.5, -3.0])
def test_pow_by_python_scalar(exponent, dtype):
    # ATen special-cases 2, 3, -2, -1, 0.5, -0.5 (x*x, x*x*x, ..., sqrt, rsqrt);
    # the kernel branches on the scalar argument the same way, so in f32/f64 the
    # first four match bit for bit (ATen's vectorized sqrt is itself up to an
    # ulp from the correctly rounded sqrt that LLVM emits).
    # Other exponents call libm/libmvec pow (1 ulp from ATen's); bf16 computes
    # in f32 and rounds once, where ATen may round in between.
    x = torch.cat([torch.randn(4000) * 3, torch.tensor([0.0, -0.0, float("inf"), float("-inf"), float("nan")])])
    x = x.to(dtype)
    want = x.pow(exponent)
    got = x.to("lazyjit").pow(exponent).cpu()
    exact = exponent in (2, 3, -2, -1, 0, 1) and dtype != torch.bfloat16
    tol = dict(rtol=0, atol=0) if exact else {}
    torch.testing.assert_close(got, want, equal_nan=True, **tol)


POINTWISE_COMPOSITES = {
    "addcmul": lambda a, b, c: torch.addcmul(a, b, c, value=-0.3),
    "addcmul_1": lambda a, b, c: torch.addcmul(a, b, c),
    "addcdiv": lambda a, b, c: torch.addcdiv(a, b, c.abs() + 0.5, value=0.7),
    "addcmul_": lambda a, b, c: a.addcmul_(b, c, value=2),
    "addcdiv_": lambda a, b, c: a.addcdiv_(b, c.abs() + 0.5, value=-1.5),
    "lerp_scalar_small": lambda a, b, c: torch.lerp(a, b, 0.1),
    "lerp_scalar_large": lambda a, b, c: torch.lerp(a, b, 0.9),
    "lerp_tensor": lambda a, b, c: torch.lerp(a, b, c.sigmoid()),
    "lerp_": lambda a, b, c: a.lerp_(b, 0.25),
    "addcmul_bcast": lambda a, b, c: torch.addcmul(a[:1], b, c[:, :1], value=0.5),
}


@pytest.mark.parametrize("dtype", FLOATS + [torch.bfloat16], ids=["f32", "f64", "bf16"])
@pytest.mark.parametrize("name", list(POINTWISE_COMPOSITES))
def test_pointwise_composites_fuse_and_match_eager(name, dtype, fresh):
    # What AdamW's foreach updates call per tensor: recorded as elementwise
    # nodes (one kernel, no library step), matching eager within tolerance.
    fn = POINTWISE_COMPOSITES[name]
    a, b, c = (torch.randn(6, 7).to(dtype) for _ in range(3))
    want = fn(a.clone(), b, c)
    la, lb, lc = (t.to("lazyjit") for t in (a, b, c))
    fresh.sync()
    got = fn(la, lb, lc)
    m_before = fresh.metrics()["fallbacks"]
    torch.testing.assert_close(got.cpu(), want)
    if name.endswith("_"):
        torch.testing.assert_close(la.cpu(), want)  # in place
    assert fresh.metrics()["fallbacks"] == m_before == {}


@pytest.mark.parametrize("case", ["mul", "add_scalar", "sqrt", "wrapped_number", "resize", "dtype"])
def test_out_variants(case, fresh):
    a, b = torch.randn(5, 6), torch.randn(5, 6)
    la, lb = a.to("lazyjit"), b.to("lazyjit")
    if case == "mul":
        o, lo = torch.empty(5, 6), torch.empty(5, 6).to("lazyjit")
        torch.mul(a, b, out=o); torch.mul(la, lb, out=lo)
    elif case == "add_scalar":
        o, lo = torch.empty(5, 6), torch.empty(5, 6).to("lazyjit")
        torch.add(a, b, alpha=3, out=o); torch.add(la, lb, alpha=3, out=lo)
    elif case == "sqrt":
        o, lo = torch.empty(5, 6), torch.empty(5, 6).to("lazyjit")
        torch.sqrt(a.abs(), out=o); torch.sqrt(la.abs(), out=lo)
    elif case == "wrapped_number":
        o, lo = torch.empty(5, 6), torch.empty(5, 6).to("lazyjit")
        torch.mul(torch.tensor(0.5, dtype=torch.float64), a, out=o)
        torch.mul(torch.tensor(0.5, dtype=torch.float64), la, out=lo)
    elif case == "resize":  # out has the wrong size: resized, with the deprecation warning
        o, lo = torch.empty(0), torch.empty(0).to("lazyjit")
        torch.mul(a, b, out=o); torch.mul(la, lb, out=lo)
    else:  # out of another dtype: computed, then cast
        o, lo = torch.empty(5, 6, dtype=torch.float64), torch.empty(5, 6, dtype=torch.float64).to("lazyjit")
        torch.mul(a, b, out=o); torch.mul(la, lb, out=lo)
    torch.testing.assert_close(lo.cpu(), o)


@pytest.mark.parametrize("name", ["abs", "logical_not", "nan_to_num"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool])
def test_composite_unary_ops_claimed_by_the_device(name, dtype):
    # Their only kernel is a composite over the CPU .out kernel; lazyjit records
    # them as themselves (tracer/api.cpp), so abs fuses with its neighbours.
    if name == "abs" and dtype == torch.bool:
        pytest.skip("eager has no abs for bool")
    if name == "nan_to_num" and dtype == torch.bool:
        pytest.skip("eager has no nan_to_num for bool")
    x = torch.tensor([[1.5, -2.0, float("nan")], [0.0, float("inf"), -float("inf")]])
    x = x if dtype == torch.float32 else torch.tensor([[1, -2, 0], [3, 0, -7]]).to(dtype)
    op = getattr(torch, name)
    got = (op(x.to("lazyjit") * 1) + 0).cpu() if dtype != torch.bool else op(x.to("lazyjit")).cpu()
    want = (op(x * 1) + 0) if dtype != torch.bool else op(x)
    torch.testing.assert_close(got, want, equal_nan=True)


@pytest.mark.parametrize("name", ["logical_and", "logical_or", "logical_xor"])
def test_composite_binary_logical_ops_claimed_by_the_device(name):
    a = torch.tensor([1.0, 0.0, -2.0, float("nan")])
    b = torch.tensor([True, True, False, False])
    op = getattr(torch, name)
    torch.testing.assert_close(op(a.to("lazyjit"), b.to("lazyjit")).cpu(), op(a, b))
