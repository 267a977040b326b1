"""Comparison helpers of the OpInfo conformance harness (tools/opinfo_conformance.py):
how samples and values are described in the report, the tolerances (assert_close's
defaults per dtype, or the loose rtol = atol = LOOSE_TOL), and the comparison of
lazyjit's results with eager's value for value. tools/opinfo_dynamo.py compares
with these too.

Light to import: torch is imported inside the functions or passed in.
"""
from __future__ import annotations

LOOSE_TOL = 1e-3


class _Mismatch(Exception):
    pass


def _dtype_short(dt):
    import torch
    table = {torch.float32: "f32", torch.float64: "f64", torch.float16: "f16",
             torch.bfloat16: "bf16", torch.int64: "i64", torch.int32: "i32",
             torch.int16: "i16", torch.int8: "i8", torch.uint8: "u8", torch.bool: "b8",
             torch.complex64: "c64", torch.complex128: "c128"}
    return table.get(dt, str(dt).replace("torch.", ""))


def _describe(x, depth=0):
    import torch
    if isinstance(x, torch.Tensor):
        s = f"{_dtype_short(x.dtype)}{list(x.shape)}"
        if x.layout != torch.strided:
            s += f"<{str(x.layout).replace('torch.', '')}>"
        elif x.numel() > 1 and not x.is_contiguous():
            s += f"(strides={list(x.stride())})"
        return s
    if depth > 3:
        return "..."
    if isinstance(x, (list, tuple)):
        inner = ", ".join(_describe(v, depth + 1) for v in x[:8])
        if len(x) > 8:
            inner += ", ..."
        return ("[" + inner + "]") if isinstance(x, list) else ("(" + inner + ("," if len(x) == 1 else "") + ")")
    if isinstance(x, dict):
        return "{" + ", ".join(f"{k}={_describe(v, depth + 1)}" for k, v in x.items()) + "}"
    if callable(x) and hasattr(x, "__name__"):
        return x.__name__
    r = repr(x)
    return r if len(r) <= 40 else r[:37] + "..."


def _describe_sample(sample):
    parts = [_describe(sample.input)]
    parts += [_describe(a) for a in sample.args]
    parts += [f"{k}={_describe(v)}" for k, v in sample.kwargs.items()]
    s = ", ".join(parts)
    return s if len(s) <= 300 else s[:297] + "..."


_DEFAULT_TOL = {
    "float16": (1e-3, 1e-5), "bfloat16": (1.6e-2, 1e-5), "float32": (1.3e-6, 1e-5),
    "float64": (1e-7, 1e-7), "complex32": (1e-3, 1e-5), "complex64": (1.3e-6, 1e-5),
    "complex128": (1e-7, 1e-7),
}


def _tol(dtype, loose):
    name = str(dtype).replace("torch.", "")
    if name not in _DEFAULT_TOL:
        return 0.0, 0.0
    rtol, atol = _DEFAULT_TOL[name]
    if loose:
        rtol, atol = max(rtol, LOOSE_TOL), max(atol, LOOSE_TOL)
    return rtol, atol


def _check_header(actual, expected, path):
    """A tensor result's layout, dtype and shape against eager's."""
    if actual.layout != expected.layout:
        raise _Mismatch(f"{path}: layout {actual.layout} vs expected {expected.layout}")
    if actual.dtype != expected.dtype:
        raise _Mismatch(f"dtype {_dtype_short(actual.dtype)} vs expected {_dtype_short(expected.dtype)}")
    if actual.shape != expected.shape:
        raise _Mismatch(f"shape {list(actual.shape)} vs expected {list(expected.shape)}")


def _compare(actual, expected, path, loose, torch):
    if isinstance(expected, torch.Tensor):
        if not isinstance(actual, torch.Tensor):
            raise _Mismatch(f"{path}: expected Tensor, got {type(actual).__name__}")
        _check_header(actual, expected, path)
        if expected.layout != torch.strided:
            actual, expected = actual.to_dense(), expected.to_dense()
        rtol, atol = _tol(expected.dtype, loose)
        try:
            torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol, equal_nan=True,
                                       check_device=False, check_stride=False)
        except AssertionError:
            a, e = actual, expected
            if a.dtype == torch.bool:
                a, e = a.int(), e.int()
            if a.is_complex():
                diff = (a - e).abs()
            else:
                a64, e64 = a.double(), e.double()
                diff = (a64 - e64).abs()
                both_nan = a64.isnan() & e64.isnan()
                same_inf = (a64 == e64)
                diff = torch.where(both_nan | same_inf, torch.zeros_like(diff), diff)
                diff = torch.where(a64.isnan() ^ e64.isnan(), torch.full_like(diff, float("inf")), diff)
            bad = int((diff > atol + rtol * e.abs().double() if not e.is_complex() else diff > atol).sum())
            md = float(diff.max()) if diff.numel() else 0.0
            raise _Mismatch(f"values differ{(' at ' + path) if path else ''}: max abs diff {md:.3g}, "
                            f"{bad}/{expected.numel()} elements")
        return
    if isinstance(expected, (list, tuple)):
        if not isinstance(actual, (list, tuple)):
            raise _Mismatch(f"{path}: expected sequence, got {type(actual).__name__}")
        if len(actual) != len(expected):
            raise _Mismatch(f"{path}: length {len(actual)} vs expected {len(expected)}")
        for i, (a, e) in enumerate(zip(actual, expected)):
            _compare(a, e, f"{path}[{i}]", loose, torch)
        return
    if isinstance(expected, dict):
        if not isinstance(actual, dict) or set(actual) != set(expected):
            raise _Mismatch(f"{path}: dict keys differ")
        for k in expected:
            _compare(actual[k], expected[k], f"{path}[{k!r}]", loose, torch)
        return
    if isinstance(expected, (bool, int, float, complex)) and isinstance(actual, (bool, int, float, complex)):
        try:
            torch.testing.assert_close(actual, expected, equal_nan=True,
                                       rtol=LOOSE_TOL if loose else None, atol=LOOSE_TOL if loose else None)
        except AssertionError:
            raise _Mismatch(f"{path}: scalar {actual!r} vs expected {expected!r}")
        except Exception:
            if actual != expected:
                raise _Mismatch(f"{path}: scalar {actual!r} vs expected {expected!r}")
        return
    if actual != expected:
        raise _Mismatch(f"{path}: {type(actual).__name__} {str(actual)[:40]} vs expected {str(expected)[:40]}")


def _first_line(e):
    msg = str(e).strip().splitlines()
    first = msg[0] if msg else ""
    # Skip PyTorch's generic preambles to get at the real message.
    for ln in msg:
        if ln.strip() and not ln.startswith("Traceback"):
            first = ln.strip()
            break
    if len(first) > 240:
        first = first[:237] + "..."
    return f"{type(e).__name__}: {first}"
