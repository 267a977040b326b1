#!/usr/bin/env python3
"""OpInfo samples under torch.compile(backend="lazyjit"), against eager.

For each op (op_db names, "name.variant") and its first --samples sample inputs
(float32, on the CPU), `torch.compile(lambda *a, **k: op(*a, **k),
backend="lazyjit", fullgraph=False)` runs the sample (torch._dynamo.reset()
before each op; within an op Dynamo recompiles per sample as it would for
any caller, static first, then with dynamic sizes and scalars)

  - forward: the arguments as plain tensors (a graph no gradient flows through,
    which the backend captures from Dynamo's graph directly); outputs and
    mutated arguments compared with eager;
  - backward (ops with supports_autograd, samples with a differentiable float
    output): the float arguments requiring grad (AOTAutograd's forward and
    backward graphs); the outputs and the gradients of the sum of the float
    outputs w.r.t. those arguments compared with eager's.

Comparisons use tools/opinfo_conformance.py's: assert_close at its default
tolerances for the dtype, or else rtol = atol = 1e-3 (PyTorch's
test_compare_cpu), integers exactly.

Per sample it records the backend's counters (lazyjit.dynamo.stats()): how many
ATen graphs it was given, how many captured programs ran, and any graph that
ran through ATen because lazyjit could not capture it ("eager" reasons).

Samples run in worker subprocesses (ops spread over --jobs workers); a sample
that kills its worker is recorded as "crash", one that runs longer than
--timeout as "timeout", and the op resumes after it in a new worker
(OPINFO_DYNAMO_FAULT=abort=OP:I aborts sample I of OP, to test that path).

  .venv/bin/python tools/opinfo_dynamo.py --ops add,mul --samples 3 --out /tmp/r.json
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLE_SEED = 20261129


# --------------------------------------------------------------------------
# Worker side
# --------------------------------------------------------------------------

def _worker_main():
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = os.fdopen(1, "w", buffering=1)

    def send(**kw):
        proto.write(json.dumps(kw) + "\n")
        proto.flush()

    import warnings
    warnings.simplefilter("ignore")
    import torch
    import torch._dynamo
    import lazyjit  # noqa: F401
    import lazyjit.dynamo
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import opinfo_conformance as oc
    from torch.testing._internal.common_methods_invocations import op_db

    torch.set_num_threads(1)
    # Every sample compiles (a forward and a backward guard set per sample):
    # past Dynamo's default limit of 8 the frame would silently run eagerly.
    torch._dynamo.config.recompile_limit = 64
    by_name = {}
    for op in op_db:
        by_name.setdefault(op.name + ("." + op.variant_test_name if op.variant_test_name else ""), op)
    send(ev="ready")
    for line in sys.stdin:
        task = json.loads(line)
        if task.get("cmd") == "exit":
            break
        op = by_name.get(task["op"])
        if op is None:
            send(ev="missing")
            continue
        _run_op(torch, lazyjit, oc, op, task["start"], task["samples"], send)
        send(ev="done")


def _counters(lazyjit):
    s = lazyjit.dynamo.stats()
    return s["graphs"], s["calls"], s["eager_graphs"], len(s["eager_reasons"])


def _differentiable(torch, x):
    return isinstance(x, torch.Tensor) and x.dtype.is_floating_point and x.requires_grad


def _detached(torch, x, requires_grad):
    """The sample's arguments, cloned; float tensors that required grad require
    it again when `requires_grad`, as new leaves."""
    def one(t):
        c = t.detach().clone()
        if requires_grad and t.requires_grad and t.dtype.is_floating_point:
            c.requires_grad_(True)
        return c
    return _map_tensors(torch, x, one)


def _map_tensors(torch, x, fn):
    if isinstance(x, torch.Tensor):
        return fn(x)
    if isinstance(x, list):
        return [_map_tensors(torch, v, fn) for v in x]
    if isinstance(x, tuple):
        return tuple(_map_tensors(torch, v, fn) for v in x)
    if isinstance(x, dict):
        return {k: _map_tensors(torch, v, fn) for k, v in x.items()}
    return x


def _compare(oc, torch, actual, expected):
    """None when they match (strict, else loose), else the mismatch."""
    for loose in (False, True):
        try:
            oc._compare(actual, expected, "out", loose, torch)
            return None
        except oc._Mismatch as m:
            if loose:
                return f"mismatch: {m}"
        except Exception as e:  # noqa: BLE001
            return f"[compare] {oc._first_line(e)}"


def _run(torch, fn, sample, args, backward):
    """Outputs (and gradients when `backward`) of fn on args."""
    torch.manual_seed(SAMPLE_SEED)
    out = fn(args[0], *args[1], **args[2])
    try:
        out = sample.output_process_fn_grad(out)
    except Exception:  # noqa: BLE001
        pass
    if not backward:
        return out, None
    leaves = [t for t in _tensors(torch, args) if t.requires_grad]
    diff = [o for o in _tensors(torch, out) if _differentiable(torch, o)]
    loss = sum(o.sum() for o in diff)
    grads = torch.autograd.grad(loss, leaves, allow_unused=True)
    return out, [torch.zeros_like(t) if g is None else g for g, t in zip(grads, leaves)]


def _tensors(torch, x, acc=None):
    acc = [] if acc is None else acc
    if isinstance(x, torch.Tensor):
        acc.append(x)
    elif isinstance(x, (list, tuple)):
        for v in x:
            _tensors(torch, v, acc)
    elif isinstance(x, dict):
        for v in x.values():
            _tensors(torch, v, acc)
    return acc


def _one_mode(torch, lazyjit, oc, op, sample, compiled, backward):
    """{"status": pass/fail/skip, "reason", "graphs", "calls", "eager"} for one
    run of the sample (forward only, or forward and backward)."""
    try:
        e_args = _detached(torch, (sample.input, sample.args, sample.kwargs), backward)
        expected, e_grads = _run(torch, op, sample, e_args, backward)
    except Exception as e:  # noqa: BLE001
        return {"status": "skip", "reason": f"eager raises: {oc._first_line(e)}"}
    if backward and not e_grads:
        return {"status": "skip", "reason": "no float argument requires grad"}
    if backward and not any(_differentiable(torch, o) for o in _tensors(torch, expected)):
        return {"status": "skip", "reason": "no differentiable output"}
    g0, c0, eg0, nr0 = _counters(lazyjit)
    rec = {}
    try:
        l_args = _detached(torch, (sample.input, sample.args, sample.kwargs), backward)
        actual, l_grads = _run(torch, compiled, sample, l_args, backward)
        reason = _compare(oc, torch, actual, expected)
        if reason is None:
            reason = _compare(oc, torch, _tensors(torch, l_args), _tensors(torch, e_args))
            reason = reason and "argument " + reason
        if reason is None and backward:
            reason = _compare(oc, torch, l_grads, e_grads)
            reason = reason and "grad " + reason
        rec.update(status="pass" if reason is None else "fail", reason=reason or "")
    except Exception as e:  # noqa: BLE001
        rec.update(status="fail", reason=f"[compiled] {oc._first_line(e)}")
    g1, c1, eg1, _ = _counters(lazyjit)
    rec.update(graphs=g1 - g0, calls=c1 - c0, eager=lazyjit.dynamo.stats()["eager_reasons"][nr0:])
    return rec


def _run_op(torch, lazyjit, oc, op, start, limit, send):
    import torch._dynamo
    torch._dynamo.reset()
    torch.manual_seed(0)
    try:
        samples = list(op.sample_inputs("cpu", torch.float32, requires_grad=op.supports_autograd))[:limit]
    except Exception as e:  # noqa: BLE001
        send(ev="gen_error", reason=oc._first_line(e))
        return
    send(ev="count", n=len(samples))
    compiled = torch.compile(lambda *a, **k: op(*a, **k), backend="lazyjit", fullgraph=False)
    fault = os.environ.get("OPINFO_DYNAMO_FAULT", "")  # "abort=OP:I": self-test of the crash path
    for i, sample in enumerate(samples):
        if i < start:
            continue
        send(ev="start", i=i)
        if fault == f"abort={op.name}:{i}":
            os.abort()
        t0 = time.time()
        rec = {"index": i, "desc": oc._describe_sample(sample)}
        rec["forward"] = _one_mode(torch, lazyjit, oc, op, sample, compiled, False)
        if op.supports_autograd:
            rec["backward"] = _one_mode(torch, lazyjit, oc, op, sample, compiled, True)
        else:
            rec["backward"] = {"status": "skip", "reason": "op does not support autograd"}
        rec["secs"] = round(time.time() - t0, 3)
        send(ev="result", i=i, rec=rec)


# --------------------------------------------------------------------------
# Parent side
# --------------------------------------------------------------------------

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import opinfo_conformance  # noqa: E402  (light: no torch at import)


class Worker(opinfo_conformance.Worker):
    """The conformance harness's worker protocol, running this script's worker."""
    script = os.path.abspath(__file__)
    extra_env = {"LAZYJIT_CACHE": "off"}

    def __init__(self):
        import tempfile
        super().__init__(0, tempfile.mkdtemp(prefix="opinfo_dynamo_"))

    def kill(self):  # run_op starts a fresh worker when proc is None
        super().kill()
        self.proc = None

    def stop(self):
        super().stop()
        self.proc = None


def run_op(worker, name, samples, timeout):
    """The op's record: {"op", "samples": [...]}, resuming after a crash or timeout."""
    recs, start, n = [], 0, None
    while True:
        if worker.proc is None:
            worker.start()
        worker.send({"op": name, "start": start, "samples": samples})
        current = None
        while True:
            msg = worker.read(timeout if current is not None else 240)
            if msg is None or msg["ev"] == "died":
                status = "timeout" if msg is None else "crash"
                worker.kill()
                if current is None:
                    return {"op": name, "error": f"worker {status} outside a sample", "samples": recs}
                bad = {"status": status, "reason": status if msg is None else f"worker exited {msg['rc']}"}
                recs.append({"index": current, "forward": bad, "backward": bad})
                start = current + 1
                break
            ev = msg["ev"]
            if ev == "missing":
                return {"op": name, "error": "not in op_db", "samples": []}
            if ev == "gen_error":
                return {"op": name, "error": msg["reason"], "samples": recs}
            if ev == "count":
                n = msg["n"]
            elif ev == "start":
                current = msg["i"]
            elif ev == "result":
                recs.append(msg["rec"])
                current = None
            elif ev == "done":
                return {"op": name, "samples": recs}
        if n is not None and start >= n:
            return {"op": name, "samples": recs}


def summarize(ops):
    s = {}
    for mode in ("forward", "backward"):
        counts = {k: 0 for k in ("pass", "fail", "skip", "crash", "timeout")}
        for o in ops:
            for x in o["samples"]:
                counts[x[mode]["status"]] += 1
        ran = sum(counts.values()) - counts["skip"]
        counts["ran"] = ran
        counts["pass_rate_of_ran"] = round(counts["pass"] / ran, 4) if ran else None
        s[mode] = counts
    return s


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--worker":
        _worker_main()
        return 0
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ops", required=True, help="comma-separated exact op names (name or name.variant)")
    p.add_argument("--samples", type=int, default=3, help="samples per op (default 3)")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--timeout", type=float, default=60.0, help="seconds per sample (default 60)")
    p.add_argument("--out", required=True, help="JSON report")
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args(argv)
    names = [n for n in args.ops.split(",") if n]
    t0 = time.time()
    results = {}
    pending = list(names)
    lock = threading.Lock()

    def loop():
        w = Worker()
        try:
            while True:
                with lock:
                    if not pending:
                        return
                    name = pending.pop(0)
                rec = run_op(w, name, args.samples, args.timeout)
                with lock:
                    results[name] = rec
                if not args.quiet:
                    sts = " ".join(f"{x['forward']['status'][0]}{x['backward']['status'][0]}"
                                   for x in rec["samples"])
                    print(f"{name:32s} {sts} {rec.get('error', '')}", flush=True)
        finally:
            w.stop()

    threads = [threading.Thread(target=loop) for _ in range(max(1, args.jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ops = [results[n] for n in names]
    doc = {"samples_per_op": args.samples, "secs": round(time.time() - t0, 1), "ops": ops,
           "summary": summarize(ops)}
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1)
    if not args.quiet:
        print(json.dumps(doc["summary"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
