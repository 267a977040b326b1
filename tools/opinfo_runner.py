"""Sample runner of the OpInfo conformance harness (tools/opinfo_conformance.py).
Runs in a forked child of the worker process (tools/opinfo_worker.py): generates
the samples of one op in one dtype, runs each eagerly on the CPU and on lazyjit,
judges it (tools/opinfo_compare.py, tools/opinfo_rules.py) and sends the
protocol's events (start, result, check/checked, tainted, gen_error).
"""
from __future__ import annotations

import os
import time

from opinfo_compare import _Mismatch, _compare, _describe_sample, _first_line
from opinfo_rules import _compare_metadata, _compare_order_undefined, _op_rule, _overflow_cast_reason

# Ops whose sample generators create some tensor arguments on the CPU whatever
# the device (indices that the op requires on the CPU): only sample.input and
# kwargs move to lazyjit for these.
KEEP_ARGS_ON_CPU = ("tensor_split",)

SAMPLE_SEED = 20261129  # both runs of a sample draw random numbers from here


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
    return _compare_sample(torch, op, sample, rule, out, actual, actual_in, expected, expected_raw, e_in)


def _compare_sample(torch, op, sample, rule, out, actual, actual_in, expected, expected_raw, e_in):
    """The lazyjit run of a sample against eager's, by the op's rule (None: the
    outputs and the mutated arguments, float32 tolerances first, then loose
    ones): the sample's record. `out` is lazyjit's raw output, `actual` and
    `actual_in` its outputs and arguments moved to eager's device, `expected`
    eager's output after output_process_fn_grad (`expected_raw` before), `e_in`
    eager's arguments after the call."""
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
