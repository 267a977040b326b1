"""Judging rules of the OpInfo conformance harness (tools/opinfo_conformance.py;
docs/conformance/README.md, "Skips" and "Rules"): which ops are skipped and why,
the rule an op's samples are compared under (_op_rule), and the comparisons of
the rules for outputs that cannot be compared value for value: uninitialized
(_compare_metadata), order_undefined (_compare_order_undefined and the
canonicalisers), overflow_cast (_overflow_cast_reason). eager_raises runs the
sample on lazyjit itself, so it lives with the sample runner
(tools/opinfo_runner.py, _run_eager_raises).
"""
from __future__ import annotations

from opinfo_compare import _Mismatch, _check_header, _compare, _dtype_short

RANDOM_WORDS = ("rand", "normal", "bernoulli", "dropout", "multinomial", "uniform",
                "exponential", "geometric", "cauchy", "poisson", "log_normal")
UNINITIALIZED_WORDS = ("empty",)  # empty, empty_like, new_empty, empty_strided, ...
# OpInfo skips of TestCommon.test_compare_cpu whose message says the output
# cannot be compared value for value across devices. Randomness is NOT among
# them: lazyjit draws from the CPU generator in program order, so random ops
# compare exactly. Some of these outputs are still compared, by the rule that
# is the op's contract (_op_rule; docs/conformance/README.md, "Rules"):
OPINFO_SKIP_WORDS = ("undefined", "uninitialized")
# "Output order is undefined when sorted=False": compared exactly, or after
# canonicalising the order (ops with a canonicaliser, _CANONICALISERS).
ORDER_UNDEFINED_WORDS = ("order is undefined",)
# "Overflow when downcasting signed type is undefined": compared anyway; a
# difference confined to out-of-range elements is a fail that says so.
OVERFLOW_CAST_WORDS = ("overflow when downcasting",)

# Rules under which samples the harness used to skip are compared (each sample
# compared under one carries it as "rule" in the JSON):
#   uninitialized   empty*: values are undefined by contract; metadata compared
#   order_undefined unique(sorted=False): exact, or equal after canonicalising
#   overflow_cast   float -> integer casts with out-of-range elements
#   eager_raises    eager CPU raises: lazyjit must raise the same exception type
RULES = ("uninitialized", "order_undefined", "overflow_cast", "eager_raises")


def _decorator_skip_messages(op, dtype):
    """The messages of the op's unittest.skip decorators on TestCommon.test_compare_cpu
    that apply to the CPU and dtype."""
    msgs = []
    for d in getattr(op, "decorators", ()) or ():
        if getattr(d, "test_name", None) != "test_compare_cpu":
            continue
        if getattr(d, "device_type", None) not in (None, "cpu"):
            continue
        if not getattr(d, "active_if", True):
            continue
        dts = getattr(d, "dtypes", None)
        if dts is not None and dtype not in dts:
            continue
        for dec in d.decorators:
            msg = None
            for cell in (getattr(dec, "__closure__", None) or ()):
                try:
                    v = cell.cell_contents
                except ValueError:
                    continue
                if isinstance(v, str):
                    msg = v
            if msg:
                msgs.append(msg)
    return msgs


def _op_rule(op, dtype):
    """(skip reason, rule) for the whole op in dtype: a skip reason when its
    samples cannot be compared at all, else the comparison rule its samples
    are compared under (one of RULES, None for the ordinary comparison)."""
    name = op.name.lower()
    if any(w in name for w in UNINITIALIZED_WORDS):
        # Values are uninitialized memory (these OpInfos also say
        # has_nondeterministic_output): sizes, strides, dtype and device compare.
        return None, "uninitialized"
    # Random ops are compared: lazyjit draws from the CPU generator at trace time,
    # in program order, and both runs start from the same seed (_run_sample).
    if getattr(op, "has_nondeterministic_output", False):
        return "nondeterministic output", None
    for msg in _decorator_skip_messages(op, dtype):
        low = msg.lower()
        if any(w in low for w in ORDER_UNDEFINED_WORDS) and op.name in _CANONICALISERS:
            return None, "order_undefined"
        if any(w in low for w in OVERFLOW_CAST_WORDS):
            return None, "overflow_cast"
        if any(w in low for w in OPINFO_SKIP_WORDS):
            return f"opinfo: {msg}", None
    return None, None


def _skip_reason(op, dtype):
    """Why the whole op is skipped for dtype, or None."""
    return _op_rule(op, dtype)[0]


# ---- comparison rules for outputs that cannot be compared value for value ----

def _compare_metadata(actual_lazy, expected, path, torch):
    """Rule "uninitialized": the result's values are undefined (uninitialized
    memory), so only what the op defines is compared: the structure of the
    result and, per tensor, layout, dtype, sizes, strides, and that the result
    is on the lazyjit device (checked before it is copied to the CPU)."""
    if isinstance(expected, torch.Tensor):
        if not isinstance(actual_lazy, torch.Tensor):
            raise _Mismatch(f"{path}: expected Tensor, got {type(actual_lazy).__name__}")
        if actual_lazy.device.type != "lazyjit":
            raise _Mismatch(f"{path}: on {actual_lazy.device}, expected the lazyjit device")
        _check_header(actual_lazy, expected, path)
        if expected.layout == torch.strided and actual_lazy.stride() != expected.stride():
            raise _Mismatch(f"{path}: strides {list(actual_lazy.stride())} vs expected {list(expected.stride())}")
        return
    if isinstance(expected, (list, tuple)):
        if not isinstance(actual_lazy, (list, tuple)) or len(actual_lazy) != len(expected):
            raise _Mismatch(f"{path}: structure differs")
        for i, (a, e) in enumerate(zip(actual_lazy, expected)):
            _compare_metadata(a, e, f"{path}[{i}]", torch)
        return
    if actual_lazy != expected:
        raise _Mismatch(f"{path}: {str(actual_lazy)[:40]} vs expected {str(expected)[:40]}")


def _exact(a, e, what, torch):
    if a.dtype != e.dtype or a.shape != e.shape:
        raise _Mismatch(f"{what}: {_dtype_short(a.dtype)}{list(a.shape)} vs expected "
                        f"{_dtype_short(e.dtype)}{list(e.shape)}")
    if not torch.equal(a, e) and not (a.is_floating_point() and bool(
            ((a == e) | (a.isnan() & e.isnan())).all())):
        raise _Mismatch(f"{what}: values differ")


def _canonical_unique(out, sample, torch):
    """torch.unique's result in a canonical order: the unique values (slices
    along `dim`) sorted, counts permuted with them, inverse indices renumbered
    to point at the same values. Returns (values, inverse or None, counts or None)."""
    kw = sample.kwargs
    inv_on, cnt_on = kw.get("return_inverse", False), kw.get("return_counts", False)
    parts = list(out) if isinstance(out, (tuple, list)) else [out]
    if len(parts) != 1 + inv_on + cnt_on:
        raise _Mismatch(f"unique returned {len(parts)} results, expected {1 + inv_on + cnt_on}")
    values = parts[0]
    inverse = parts[1] if inv_on else None
    counts = parts[-1] if cnt_on else None
    dim = kw.get("dim")
    if values.dim() == 0:
        raise _Mismatch("unique returned a 0-d tensor")
    d = 0 if dim is None else dim % values.dim()
    k = values.shape[d]
    rows = values.movedim(d, 0).reshape(k, values.numel() // k if k else 0)
    keys = [tuple(float("inf") if x != x else x for x in r) for r in rows.double().tolist()]
    perm = sorted(range(len(keys)), key=lambda i: keys[i])
    perm_t = torch.tensor(perm, dtype=torch.long)
    inv_perm = torch.empty_like(perm_t)
    inv_perm[perm_t] = torch.arange(len(perm), dtype=torch.long)
    if inverse is not None and inverse.numel() and (int(inverse.min()) < 0 or int(inverse.max()) >= k):
        raise _Mismatch(f"inverse indices out of range for {k} unique values")
    if counts is not None and counts.shape != (k,):
        raise _Mismatch(f"counts of shape {list(counts.shape)} for {k} unique values")
    values_c = values.index_select(d, perm_t)
    inverse_c = inv_perm[inverse].to(inverse.dtype) if inverse is not None and inverse.numel() else inverse
    counts_c = counts[perm_t] if counts is not None else counts
    return values_c, inverse_c, counts_c


def _check_unique_contract(out, sample, torch):
    """values[inverse] (index_select along dim) reproduces the input, and the
    counts say how often each value occurs in it."""
    x = sample.input
    values, inverse, counts = _canonical_unique(out, sample, torch)
    dim = sample.kwargs.get("dim")
    if inverse is not None:
        if dim is None:
            rebuilt = values[inverse] if values.numel() else values.new_empty(inverse.shape)
        else:
            rebuilt = values.index_select(dim, inverse.reshape(-1)) if inverse.numel() else \
                values.new_empty(x.shape)
        _exact(rebuilt, x.detach(), "values[inverse] vs the input", torch)


def _compare_order_undefined(op, sample, actual, expected, torch):
    """Rule "order_undefined": exactly as eager, or the same up to the order the
    op leaves undefined. Returns "exact" or "canonical"; raises _Mismatch."""
    try:
        _compare(actual, expected, "out", False, torch)
        return "exact"
    except _Mismatch:
        pass
    canon = _CANONICALISERS[op.name]
    a, e = canon[0](actual, sample, torch), canon[0](expected, sample, torch)
    for name, x, y in zip(("values", "inverse", "counts"), a, e):
        if (x is None) != (y is None):
            raise _Mismatch(f"{name}: present on one side only")
        if x is not None:
            _exact(x, y, f"{name} (canonical order)", torch)
    canon[1](actual, sample, torch)
    return "canonical"


# op name -> (canonicaliser, contract check) for ops whose output order is
# undefined.
_CANONICALISERS = {"unique": (_canonical_unique, _check_unique_contract)}


def _overflow_cast_reason(actual, expected, sample, torch):
    """Rule "overflow_cast": the reason a float->integer cast whose results
    differ fails; it says whether every differing element is one whose value is
    out of the target dtype's range (undefined in C++, so the CPU's result is
    whatever its static_cast compiled to) or not."""
    x = sample.input
    a, e = actual, expected
    if not (isinstance(a, torch.Tensor) and isinstance(e, torch.Tensor)) or a.shape != e.shape \
            or a.dtype != e.dtype or e.is_floating_point() or e.dtype == torch.bool or x.shape != e.shape:
        return None
    diff = a != e
    n = int(diff.sum())
    if n == 0:
        return None
    info = torch.iinfo(e.dtype)
    xd = x.detach().double().trunc()
    oor = ~xd.isfinite() | (xd < info.min) | (xd > info.max)
    in_range_bad = int((diff & ~oor).sum())
    if in_range_bad:
        return (f"mismatch: cast to {_dtype_short(e.dtype)} differs on {in_range_bad} in-range "
                f"element(s) ({n} in all)")
    i = int(diff.reshape(-1).nonzero()[0])
    return (f"mismatch only on out-of-range elements (undefined overflow): cast to "
            f"{_dtype_short(e.dtype)} differs on {n}/{e.numel()} elements, all out of range; e.g. "
            f"{float(x.reshape(-1)[i]):g} -> CPU {int(e.reshape(-1)[i])}, lazyjit {int(a.reshape(-1)[i])}")
