#!/usr/bin/env python3
"""OpInfo conformance harness for lazyjit.

Drives PyTorch's own operator database
(torch.testing._internal.common_methods_invocations.op_db): for every op and
every sample input it generates on CPU, the op runs once eagerly on CPU and once
with all tensor arguments moved to the "lazyjit" device; the lazyjit outputs are
brought back with .cpu() and compared with torch.testing.assert_close
(equal_nan=True).  Tensor arguments the op mutated are compared as well, so an
in-place op that forgets to update its input fails.

Samples run in worker subprocesses.  A sample that kills its worker (segfault,
abort, ...) is recorded as "crash" (after one confirming re-run in a fresh
worker), a sample that takes longer than --timeout seconds as "timeout"; in both
cases the worker is restarted and the op resumes after that sample.  The parent
process never imports lazyjit.

Statuses:
  pass     outputs (and mutated inputs) match within tolerance, or by the rule
           the sample is compared under (below)
  fail     lazyjit raised, or the results differ; the reason says which
  skip     the op's outputs cannot be compared at all (nondeterministic, or
           undefined where no rule applies)
  crash    the worker process died while running the sample
  timeout  the sample ran longer than --timeout seconds

Rules for outputs that cannot be compared value for value (RULES; each sample
compared under one carries it as "rule"; docs/conformance/README.md, "Rules"):
  uninitialized    empty*: layout, dtype, sizes, strides and device compared
  order_undefined  unique: equal exactly, or after canonicalising the order
  overflow_cast    byte/char/short/int/long: compared; a fail says whether it
                   is confined to out-of-range (undefined) elements
  eager_raises     eager CPU raises: lazyjit must raise the same exception type

Tolerances: a sample passes if it matches at assert_close's default
tolerances for its dtype ("strict"), or -- for floating/complex outputs -- at
rtol = atol = 1e-3, the tolerance PyTorch's own TestCommon.test_compare_cpu
uses for comparing a device against CPU.  Samples that only pass at the looser
tolerance are counted ("loose") in the report.  Integer and bool outputs must
match exactly.

Examples:
  .venv/bin/python tools/opinfo_conformance.py                  # full float32 pass
  .venv/bin/python tools/opinfo_conformance.py --ops add,mul --max-samples-per-op 5
  .venv/bin/python tools/opinfo_conformance.py --sample-other-dtypes
"""
from __future__ import annotations

import argparse
import collections
import datetime
import json
import os
import queue
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

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

# Ops whose sample generators create some tensor arguments on the CPU whatever
# the device (indices that the op requires on the CPU): only sample.input and
# kwargs move to lazyjit for these.
KEEP_ARGS_ON_CPU = ("tensor_split",)

DEFAULT_OTHER_DTYPES = ("float64", "int64", "bool", "bfloat16")
OTHER_DTYPES_STRIDE = 7
LOOSE_TOL = 1e-3

from opinfo_report import STATUSES, group_key, write_reports  # noqa: E402

SAMPLE_SEED = 20261129  # both runs of a sample draw random numbers from here


# --------------------------------------------------------------------------
# Worker side (runs in a subprocess; imports torch and lazyjit)
# --------------------------------------------------------------------------

class _Mismatch(Exception):
    pass


def _worker_main():
    # The protocol uses the original stdout; anything else written to fd 1
    # (C++ prints, warnings) goes to stderr.
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = os.fdopen(1, "w", buffering=1)

    import warnings
    warnings.simplefilter("ignore")

    import torch
    lazyjit = None
    last_err = None
    for attempt in range(4):
        try:
            import lazyjit  # noqa: F401  (registers the device)
            break
        except Exception as e:  # the library may be being rebuilt
            last_err = e
            time.sleep(30)
    if lazyjit is None:
        proto.write(json.dumps({"ev": "fatal", "reason": f"import lazyjit: {last_err!r}"}) + "\n")
        return
    torch.set_num_threads(1)
    from torch.testing._internal.common_methods_invocations import op_db

    def send(**kw):
        proto.write(json.dumps(kw) + "\n")
        proto.flush()

    send(ev="ready")
    # This process is a fork server: it never touches the lazyjit device
    # itself; every task runs in a forked child (cheap, and the imports are
    # already done), so a child that crashes or is killed for a timeout costs
    # only a new fork.
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        task = json.loads(line)
        if task.get("cmd") == "exit":
            break
        op = op_db[task["op_index"]]
        dtype = getattr(torch, task["dtype"])
        gate_r, gate_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            rc = 0
            try:
                os.close(gate_w)
                os.read(gate_r, 1)  # wait until the server has announced us
                _run_task(torch, lazyjit, op, dtype, task, send)
                send(ev="done")
            except BaseException as e:  # a harness bug, not a sample result
                try:
                    send(ev="gen_error", reason=f"harness: {_first_line(e)}")
                except BaseException:
                    pass
                rc = 3
            finally:
                try:
                    proto.flush()
                    sys.stderr.flush()
                finally:
                    os._exit(rc)
        os.close(gate_r)
        send(ev="child", pid=pid)
        os.write(gate_w, b"x")
        os.close(gate_w)
        _, status = os.waitpid(pid, 0)
        send(ev="exit", rc=os.waitstatus_to_exitcode(status))


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


def _map(x, fn):
    """Applies fn to every tensor in a nested structure; rebuilds containers."""
    import torch
    if isinstance(x, torch.Tensor):
        return fn(x)
    if isinstance(x, list):
        return [_map(v, fn) for v in x]
    if isinstance(x, tuple) and not hasattr(x, "_fields"):
        return tuple(_map(v, fn) for v in x)
    if isinstance(x, tuple):  # namedtuple / torch.return_types
        return tuple(_map(v, fn) for v in x)
    if isinstance(x, dict):
        return {k: _map(v, fn) for k, v in x.items()}
    return x


def _tensors(x, out=None):
    import torch
    if out is None:
        out = []
    if isinstance(x, torch.Tensor):
        out.append(x)
    elif isinstance(x, (list, tuple)):
        for v in x:
            _tensors(v, out)
    elif isinstance(x, dict):
        for v in x.values():
            _tensors(v, out)
    return out


def _to_lazy_args(x, torch):
    """Tensors -> lazyjit; torch.device('cpu') and device='cpu' -> lazyjit."""
    lz = torch.device("lazyjit")
    if isinstance(x, torch.Tensor):
        return x.to(lz)
    if isinstance(x, torch.device):
        return lz if x.type == "cpu" else x
    if isinstance(x, list):
        return [_to_lazy_args(v, torch) for v in x]
    if isinstance(x, tuple):
        return tuple(_to_lazy_args(v, torch) for v in x)
    if isinstance(x, dict):
        return {k: (("lazyjit" if v == "cpu" else v) if k == "device" and isinstance(v, str)
                    else _to_lazy_args(v, torch)) for k, v in x.items()}
    return x


def _clone_args(x, torch):
    if isinstance(x, torch.Tensor):
        return x.clone() if x.layout == torch.strided else x.clone()
    if isinstance(x, list):
        return [_clone_args(v, torch) for v in x]
    if isinstance(x, tuple):
        return tuple(_clone_args(v, torch) for v in x)
    if isinstance(x, dict):
        return {k: _clone_args(v, torch) for k, v in x.items()}
    return x


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


def _compare(actual, expected, path, loose, torch):
    if isinstance(expected, torch.Tensor):
        if not isinstance(actual, torch.Tensor):
            raise _Mismatch(f"{path}: expected Tensor, got {type(actual).__name__}")
        if actual.layout != expected.layout:
            raise _Mismatch(f"{path}: layout {actual.layout} vs expected {expected.layout}")
        if actual.dtype != expected.dtype:
            raise _Mismatch(f"dtype {_dtype_short(actual.dtype)} vs expected {_dtype_short(expected.dtype)}")
        if actual.shape != expected.shape:
            raise _Mismatch(f"shape {list(actual.shape)} vs expected {list(expected.shape)}")
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
        if actual_lazy.layout != expected.layout:
            raise _Mismatch(f"{path}: layout {actual_lazy.layout} vs expected {expected.layout}")
        if actual_lazy.dtype != expected.dtype:
            raise _Mismatch(f"dtype {_dtype_short(actual_lazy.dtype)} vs expected {_dtype_short(expected.dtype)}")
        if actual_lazy.shape != expected.shape:
            raise _Mismatch(f"shape {list(actual_lazy.shape)} vs expected {list(expected.shape)}")
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


def _sanity(torch):
    try:
        x = torch.arange(4, dtype=torch.float32)
        y = (x.to("lazyjit") * 2 + 1).cpu()
        return bool(torch.equal(y, x * 2 + 1))
    except Exception:
        return False


def _run_task(torch, lazyjit, op, dtype, task, send):
    """Runs samples [start, start+count) of op in dtype. Returns True when the
    worker should exit (its lazyjit state no longer works)."""
    import random
    start, limit, seed = task["start"], task.get("limit"), task.get("seed", 0)
    only = task.get("only")
    skip_all, rule = _op_rule(op, dtype)
    torch.manual_seed(seed)
    random.seed(seed)
    try:
        import numpy as np
        np.random.seed(seed)
    except Exception:
        pass
    try:
        gen = op.reference_inputs if task.get("reference_inputs") else op.sample_inputs
        samples = gen("cpu", dtype, requires_grad=False)
        it = iter(samples)
    except Exception as e:
        send(ev="gen_error", reason=_first_line(e))
        return False
    i = -1
    while True:
        i += 1
        if limit is not None and i >= limit:
            break
        try:
            sample = next(it)
        except StopIteration:
            break
        except Exception as e:
            send(ev="gen_error", i=i, reason=_first_line(e))
            break
        if i < start or (only is not None and i != only):
            continue
        try:
            desc = _describe_sample(sample)
        except Exception:
            desc = "?"
        send(ev="start", i=i, desc=desc)
        t0 = time.time()
        if skip_all:
            send(ev="result", i=i, status="skip", reason=skip_all, desc=desc, secs=0.0)
            continue
        # Harness self-test hook (tests/python/test_opinfo.py): simulate a
        # crash or hang of the sample "OP:I" to exercise the recovery paths.
        fault = os.environ.get("OPINFO_HARNESS_FAULT", "")
        if fault:
            kind, _, where = fault.partition("=")
            if where == f"{op.name}:{i}":
                if kind == "abort":
                    os.abort()
                if kind == "hang":
                    time.sleep(3600)
        rec = _run_sample(torch, lazyjit, op, sample, rule)
        rec.update(ev="result", i=i, desc=desc, secs=round(time.time() - t0, 4))
        send(**rec)
        if rec["status"] == "fail":
            # A failed sample may leave lazyjit's pending state broken; check
            # that the device still works (a crash here is the sample's).
            send(ev="check", i=i)
            ok = _sanity(torch)
            send(ev="checked", i=i, ok=ok)
            if not ok:
                send(ev="tainted", i=i)
                return True  # this child's device state is broken: stop here
        if only is not None and i >= only:
            break
    return False


def _run_lazyjit(torch, lazyjit, op, sample):
    """Runs the sample on lazyjit: (outputs on lazyjit, outputs on the CPU,
    tensor arguments on the CPU). Raises _Phase with the phase that raised."""
    args_cpu = (sample.input, sample.args, sample.kwargs)
    phase = "to_lazyjit"
    try:
        if op.name in KEEP_ARGS_ON_CPU:
            l_in = (_to_lazy_args(args_cpu[0], torch), args_cpu[1], _to_lazy_args(args_cpu[2], torch))
        else:
            l_in = _to_lazy_args(args_cpu, torch)
        phase = "call"
        torch.manual_seed(SAMPLE_SEED)
        out = op(l_in[0], *l_in[1], **l_in[2])
        phase = "sync"
        lazyjit.sync()
        phase = "to_cpu"
        actual = _map(out, lambda t: t.cpu())
        actual_in = _map(l_in, lambda t: t.cpu())
    except Exception as e:
        raise _Phase(phase, e)
    return out, actual, actual_in


class _Phase(Exception):
    def __init__(self, phase, error):
        super().__init__(phase)
        self.phase, self.error = phase, error


def _run_sample(torch, lazyjit, op, sample, rule=None):
    args_cpu = (sample.input, sample.args, sample.kwargs)
    # Eager on a clone (the op may mutate its inputs).
    try:
        e_in = _clone_args(args_cpu, torch)
        torch.manual_seed(SAMPLE_SEED)
        expected = op(e_in[0], *e_in[1], **e_in[2])
    except Exception as e:
        msg = _first_line(e)
        if any(w in msg for w in ("lazyjit", "_DeviceModule", "PrivateUse1", "privateuse1")):
            # Eager CPU only raises because lazyjit is registered: a lazyjit bug.
            return {"status": "fail", "phase": "eager",
                    "reason": f"[eager cpu, lazyjit imported] {msg}"}
        return _run_eager_raises(torch, lazyjit, op, sample, e)
    expected_raw = expected
    try:
        expected = sample.output_process_fn_grad(expected)
    except Exception:
        pass
    # lazyjit
    try:
        out, actual, actual_in = _run_lazyjit(torch, lazyjit, op, sample)
    except _Phase as p:
        return {"status": "fail", "phase": p.phase, "reason": f"[{p.phase}] {_first_line(p.error)}",
                **({"rule": rule} if rule else {})}
    if rule == "uninitialized":
        rec = {"status": "pass", "rule": rule}
        try:
            _compare_metadata(out, expected_raw, "out", torch)
            _compare(_tensors(actual_in), _tensors(e_in), "input", False, torch)
        except _Mismatch as m:
            return {"status": "fail", "phase": "compare", "rule": rule, "reason": f"mismatch: {m}"}
        return rec
    try:
        actual = sample.output_process_fn_grad(actual)
    except Exception:
        pass
    if rule == "order_undefined":
        try:
            how = _compare_order_undefined(op, sample, actual, expected, torch)
            _compare(_tensors(actual_in), _tensors(e_in), "input", False, torch)
        except _Mismatch as m:
            return {"status": "fail", "phase": "compare", "rule": rule, "reason": f"mismatch: {m}"}
        except Exception as e:
            return {"status": "fail", "phase": "compare", "rule": rule, "reason": f"[compare] {_first_line(e)}"}
        rec = {"status": "pass", "rule": rule}
        if how == "canonical":
            rec["canonical"] = True
        return rec
    loose = False
    for attempt_loose in (False, True):
        try:
            _compare(actual, expected, "out", attempt_loose, torch)
            _compare(_tensors(actual_in), _tensors(e_in), "input", attempt_loose, torch)
            loose = attempt_loose
            break
        except _Mismatch as m:
            if attempt_loose:
                reason = f"mismatch: {m}"
                if rule == "overflow_cast":
                    reason = _overflow_cast_reason(actual, expected, sample, torch) or reason
                return {"status": "fail", "phase": "compare", "reason": reason,
                        **({"rule": rule} if rule else {})}
        except Exception as e:
            return {"status": "fail", "phase": "compare", "reason": f"[compare] {_first_line(e)}",
                    **({"rule": rule} if rule else {})}
    rec = {"status": "pass"}
    if rule:
        rec["rule"] = rule
    if loose:
        rec["loose"] = True
    return rec


def _run_eager_raises(torch, lazyjit, op, sample, eager_error):
    """Rule "eager_raises": eager CPU raises on this sample, so lazyjit must
    raise too, an exception of the same type, while the op is called or synced
    (lazyjit may report an error at the next sync); a value is a fail. The
    device must still work afterwards."""
    rule = {"rule": "eager_raises"}
    emsg = _first_line(eager_error)
    try:
        _run_lazyjit(torch, lazyjit, op, sample)
    except _Phase as p:
        lmsg = _first_line(p.error)
        if p.phase not in ("call", "sync"):
            return {"status": "fail", "phase": p.phase, **rule,
                    "reason": f"eager raises {emsg}; lazyjit raised at [{p.phase}]: {lmsg}"}
        if type(p.error) is not type(eager_error):
            return {"status": "fail", "phase": p.phase, **rule,
                    "reason": f"eager raises {emsg}; lazyjit raises another type: {lmsg}"}
        if not _sanity(torch):
            return {"status": "fail", "phase": p.phase, **rule,
                    "reason": f"raised like eager ({type(eager_error).__name__}), but lazyjit no longer "
                              "works afterwards"}
        return {"status": "pass", **rule, "eager_error": emsg, "lazyjit_error": lmsg}
    return {"status": "fail", "phase": "compare", **rule,
            "reason": f"eager raises {emsg}; lazyjit returned a value"}


# --------------------------------------------------------------------------
# Parent side
# --------------------------------------------------------------------------

class Worker:
    """A fork-server worker process speaking JSON lines (tools/opinfo_dynamo.py
    reuses it with its own script and environment)."""
    script = os.path.abspath(__file__)
    extra_env: dict = {}

    def __init__(self, slot, logdir):
        self.slot = slot
        self.logdir = logdir
        self.proc = None
        self.buf = b""
        self.nstarted = 0

    def start(self):
        self.nstarted += 1
        self.log_path = os.path.join(self.logdir, f"worker{self.slot}_{self.nstarted}.log")
        self.log = open(self.log_path, "wb")
        env = dict(os.environ)
        env.setdefault("LAZYJIT_NUM_THREADS", "1")
        env.setdefault("OMP_NUM_THREADS", "1")
        for k, v in self.extra_env.items():
            env.setdefault(k, v)
        pypath = os.path.join(REPO, "python")
        env["PYTHONPATH"] = pypath + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        self.proc = subprocess.Popen([sys.executable, self.script, "--worker"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.log, env=env, cwd=REPO, start_new_session=True)
        self.buf = b""
        msg = self.read(timeout=240)
        if msg is None or msg.get("ev") != "ready":
            self.kill()
            raise RuntimeError(f"worker failed to start: {msg} {self.stderr_tail()}")

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def send(self, obj):
        self.proc.stdin.write((json.dumps(obj) + "\n").encode())
        self.proc.stdin.flush()

    def read(self, timeout):
        """Next protocol message; None on timeout; {'ev': 'died'} if the worker exited."""
        deadline = time.time() + timeout
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.buf:
            left = deadline - time.time()
            if left <= 0:
                return None
            r, _, _ = select.select([fd], [], [], min(left, 1.0))
            if r:
                chunk = os.read(fd, 65536)
                if not chunk:
                    self.proc.wait()
                    return {"ev": "died", "rc": self.proc.returncode}
                self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        try:
            return json.loads(line)
        except ValueError:
            return {"ev": "junk", "line": line[:200].decode(errors="replace")}

    def stderr_tail(self):
        try:
            self.log.flush()
            with open(self.log_path, "rb") as f:
                f.seek(0, 2)
                size = f.tell()
                f.seek(max(0, size - 4000))
                lines = [ln for ln in f.read().decode(errors="replace").splitlines() if ln.strip()]
            return lines[-1].strip()[:200] if lines else ""
        except Exception:
            return ""

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except Exception:
                self.proc.kill()
            self.proc.wait()
        try:
            self.log.close()
        except Exception:
            pass

    def stop(self):
        if self.alive():
            try:
                self.send({"cmd": "exit"})
                self.proc.wait(timeout=10)
            except Exception:
                pass
        self.kill()


def _death_reason(rc):
    if rc is None:
        return "worker died"
    if rc < 0:
        try:
            return f"killed by {signal.Signals(-rc).name}"
        except ValueError:
            return f"killed by signal {-rc}"
    return f"worker exited with code {rc}"


def run_task(worker, task, timeout, retry_crash=True):
    """Runs one (op, dtype) task, resuming after samples that crash or time
    out. Returns (records by sample index, generation error or None)."""
    records = {}
    descs = {}
    confirmed = set()  # crash reasons (grouped) already reproduced in a fresh process
    gen_error = None
    start = 0
    only = task.get("only")
    while True:
        if not worker.alive():
            worker.start()
        worker.send(dict(task, start=start))
        current = None   # sample running
        post = None      # sample whose after-failure device check is running
        child = None
        done = False
        resume = None    # index to resume from after a timeout / crash / taint
        timed_out = False
        rc = None
        while True:
            busy = current is not None or post is not None
            msg = worker.read(timeout=timeout if busy else max(timeout, 300))
            if msg is None:  # timeout
                if child is None:
                    worker.kill()
                    return records, "fork server hung"
                try:
                    os.kill(child, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                timed_out = True
                if current is not None:
                    records[current] = {"status": "timeout", "reason": f"timeout (> {timeout:g} s)",
                                        "desc": descs.get(current, "")}
                    resume = current + 1
                elif post is not None:
                    first = records[post]
                    records[post] = {"status": "timeout", "desc": first.get("desc", ""),
                                     "reason": "timeout in the next lazyjit use after the sample failed"
                                               f" ({first.get('reason')})",
                                     "after": first.get("reason")}
                    resume = post + 1
                else:
                    gen_error = f"timeout (> {max(timeout, 300):g} s) while generating samples"
                current = post = None
                continue  # wait for the server's "exit"
            ev = msg.get("ev")
            if ev == "child":
                child = msg["pid"]
            elif ev == "start":
                current = msg["i"]
                descs[current] = msg.get("desc", "")
                post = None
            elif ev == "result":
                i = msg.pop("i")
                msg.pop("ev")
                records[i] = msg
                current = None
            elif ev == "check":
                post = msg["i"]
            elif ev == "checked":
                post = None
                if not msg.get("ok"):
                    records[msg["i"]]["device_broken_after"] = True
            elif ev == "tainted":
                resume = msg["i"] + 1
            elif ev == "gen_error":
                gen_error = msg.get("reason")
            elif ev == "done":
                done = True
            elif ev == "exit":
                rc = msg["rc"]
                break
            elif ev in ("died", "junk"):  # the fork server itself died
                rc = -signal.SIGKILL if ev == "junk" else msg.get("rc")
                worker.kill()
                break
            elif ev == "fatal":
                raise RuntimeError(msg.get("reason"))
        if rc not in (0, None) and not timed_out:
            reason = f"crash: {_death_reason(rc)}"
            tail = worker.stderr_tail()
            if current is None and post is None:
                return records, f"{reason} while generating samples; {tail}"
            if current is None:
                # The sample failed cleanly, then the next use of the device
                # (a tiny known-good computation) killed the process: in a
                # user's program that sample crashes the process.
                first = records[post]
                current = post
                rec = {"status": "crash", "desc": first.get("desc", ""), "stderr": tail,
                       "reason": f"{reason} in the next lazyjit use after the sample failed"
                                 f" ({first.get('reason')})",
                       "after": first.get("reason")}
            else:
                rec = {"status": "crash", "reason": reason, "stderr": tail,
                       "desc": descs.get(current, "")}
            gk = group_key(rec["reason"])
            if retry_crash and gk not in confirmed:
                # Confirm in a fresh process: a crash that does not reproduce
                # is recorded with the re-run's result and flagged. Once a
                # crash reproduces, later samples of the op crashing the
                # same way are taken as they are.
                sub, _ = run_task(worker, dict(task, only=current, limit=current + 1), timeout,
                                  retry_crash=False)
                again = sub.get(current)
                if again is not None and again["status"] != "crash":
                    again["flaky_crash"] = reason
                    rec = again
                else:
                    confirmed.add(gk)
            records[current] = rec
            resume = current + 1
        if only is not None or done or resume is None:
            if not done and resume is None and gen_error is None and rc == 0:
                gen_error = "worker stopped before the end of the samples (harness)"
            return records, gen_error
        start = resume


def select_ops(op_db, args):
    import torch
    chosen = []
    subs = [s for s in (args.ops or "").split(",") if s]
    exact = set(s for s in (args.exact_ops or "").split(",") if s)
    for idx, op in enumerate(op_db):
        full = op.name + ("." + op.variant_test_name if op.variant_test_name else "")
        if exact and full not in exact and op.name not in exact:
            continue
        if subs and not any(s in full for s in subs):
            continue
        if args.sample_other_dtypes and idx % OTHER_DTYPES_STRIDE != 0:
            continue
        chosen.append((idx, full, op))
    return chosen


def main(argv=None):
    if argv is None:
        argv = sys.argv[1:]
    if argv and argv[0] == "--worker":
        _worker_main()
        return 0
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dtypes", default=None,
                   help="comma-separated dtypes (default float32; with --sample-other-dtypes: "
                        + ",".join(DEFAULT_OTHER_DTYPES) + ")")
    p.add_argument("--ops", default=None, help="comma-separated substrings of op names (name.variant)")
    p.add_argument("--exact-ops", default=None, help="comma-separated exact op names (name or name.variant)")
    p.add_argument("--max-samples-per-op", type=int, default=None)
    p.add_argument("--only-sample", type=int, default=None, help="run only this sample index")
    p.add_argument("--sample-other-dtypes", action="store_true",
                   help=f"every {OTHER_DTYPES_STRIDE}th op of op_db in " + ", ".join(DEFAULT_OTHER_DTYPES))
    p.add_argument("--out", default=None, help="markdown report; the JSON goes next to it")
    p.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    p.add_argument("--timeout", type=float, default=20.0, help="seconds per sample (default 20)")
    p.add_argument("--reference-inputs", action="store_true",
                   help="use op.reference_inputs (sample_inputs plus more cases; what PyTorch's "
                        "TestCommon.test_compare_cpu uses) instead of op.sample_inputs")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args(argv)

    if args.dtypes is None:
        args.dtypes = ",".join(DEFAULT_OTHER_DTYPES) if args.sample_other_dtypes else "float32"
    dtype_names = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    if args.out is None:
        args.out = os.path.join(REPO, "docs", "conformance",
                                "opinfo_other_dtypes.md" if args.sample_other_dtypes
                                else f"opinfo_{'_'.join(dtype_names)}.md")

    import warnings
    warnings.simplefilter("ignore")
    import torch
    from torch.testing._internal.common_methods_invocations import op_db

    ops = select_ops(op_db, args)
    tasks = []
    results = []
    for idx, full, op in ops:
        for dn in dtype_names:
            dt = getattr(torch, dn)
            try:
                supported = dt in op.supported_dtypes("cpu")
            except Exception:
                supported = True
            if not supported:
                results.append({"op": full, "op_index": idx, "dtype": dn, "unsupported": True, "samples": []})
                continue
            rec = {"op": full, "op_index": idx, "dtype": dn, "samples": []}
            results.append(rec)
            tasks.append((rec, {"op_index": idx, "dtype": dn, "seed": args.seed,
                                "reference_inputs": args.reference_inputs,
                                "limit": (args.only_sample + 1) if args.only_sample is not None
                                else args.max_samples_per_op,
                                "only": args.only_sample}))

    so_dir = os.path.join(REPO, "python", "lazyjit")

    def so_mtime():
        so_files = [f for f in os.listdir(so_dir) if f.startswith("_C") and f.endswith(".so")]
        if not so_files:
            return "?"
        return datetime.datetime.fromtimestamp(os.path.getmtime(os.path.join(so_dir, so_files[0]))
                                               ).strftime("%Y-%m-%d %H:%M:%S")
    so_at_start = so_mtime()
    t0 = time.time()
    q = queue.Queue()
    for t in tasks:
        q.put(t)
    logdir = tempfile.mkdtemp(prefix="opinfo_workers_")
    lock = threading.Lock()
    done = [0]
    errors = []

    def loop(slot):
        w = Worker(slot, logdir)
        ntasks = 0
        try:
            while True:
                try:
                    rec, task = q.get_nowait()
                except queue.Empty:
                    break
                ts = time.time()
                recs, gen_error = run_task(w, task, args.timeout)
                ntasks += 1
                n = (max(recs) + 1) if recs else 0
                samples = []
                for i in range(n):
                    s = recs.get(i)
                    if s is None:
                        if task.get("only") is not None:
                            continue
                        s = {"status": "fail", "reason": "no result recorded (harness)"}
                    s["index"] = i
                    samples.append(s)
                rec["samples"] = samples
                if gen_error:
                    rec["gen_error"] = gen_error
                rec["secs"] = round(time.time() - ts, 2)
                with lock:
                    done[0] += 1
                    if not args.quiet:
                        c = collections.Counter(s["status"] for s in samples)
                        print(f"[{done[0]}/{len(tasks)} {time.time() - t0:6.0f}s] {rec['op']} {rec['dtype']}: "
                              + " ".join(f"{k}={c[k]}" for k in STATUSES if c[k])
                              + (f" GEN_ERROR {gen_error}" if gen_error else ""), flush=True)
        except Exception as e:
            errors.append(repr(e))
        finally:
            w.stop()

    threads = [threading.Thread(target=loop, args=(s,), daemon=True) for s in range(max(1, args.jobs))]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    if errors:
        print("harness errors:", errors, file=sys.stderr)

    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                                text=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO,
                               capture_output=True, text=True).stdout.strip()
        if dirty:
            commit += " (+ uncommitted changes)"
    except Exception:
        commit = "?"
    meta = {"date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
            "torch": torch.__version__, "git_commit": commit,
            "lazyjit_so_mtime": so_at_start if so_mtime() == so_at_start
            else f"{so_at_start}, REBUILT during the run ({so_mtime()})",
            "args": " ".join(argv), "wall_s": round(time.time() - t0, 1), "jobs": args.jobs,
            "timeout_s": args.timeout, "harness_errors": errors}
    results.sort(key=lambda r: (r["op_index"], dtype_names.index(r["dtype"])))
    summary = write_reports(results, meta, args.out)
    for dt, s in summary.items():
        print(f"{dt}: {s['total']} samples, pass {s['pass']}, fail {s['fail']}, skip {s['skip']}, "
              f"crash {s['crash']}, timeout {s['timeout']}, pass rate {100 * (s['pass_rate_all'] or 0):.2f}% "
              f"({100 * (s['pass_rate_run'] or 0):.2f}% of run)")
    print(f"report: {args.out}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
