"""OpInfo float32 common-ops subset on the CUDA target, against CUDA eager
(issue 42: "The OpInfo float32 common-ops subset matches CUDA eager, with 0
crashes").

The subset is the CPU suite's: COMMON_OPS and SAMPLES_PER_OP of
tests/python/test_opinfo.py (read from that file, which imports nothing of
lazyjit and no conftest), each op's first SAMPLES_PER_OP float32 samples of
op.sample_inputs(device="cuda"). Each sample runs once in CUDA eager (on clones:
the op may mutate its inputs) and once on lazyjit by the device route: every
CUDA tensor argument .to("lazyjit"), the op, lazyjit.sync(), the results (and
the tensor arguments, for mutations) .to("cuda"). Judged like the CPU harness
(tools/opinfo_conformance.py, whose comparison and rules this imports):
  pass   equal at assert_close's float32 tolerances (rtol 1.3e-6, atol 1e-5), or
         at rtol = atol = 1e-3 (PyTorch's own cross-device tolerance; such
         samples are counted as "loose" in the JSON: transcendentals, other
         reduction orders); bfloat16 and float16 (OPINFO_CUDA_DTYPE): at
         assert_close's tolerances for that dtype (bfloat16 rtol 1.6e-2, about
         2 ulps; float16 rtol 1e-3, 1 ulp), or loose, against eager at that
         dtype or else against eager in float32 rounded to it ("oracle":
         "float32_rounded" in the JSON), or else against eager with each ATen
         op in float32 rounded to it ("float32_per_op"; against_float32)
  pass   eager raises, and lazyjit raises the same exception type at the call or
         the sync, and still works afterwards (rule "eager_raises")
  fail   lazyjit raised, returned something else, or differs
  crash  the process running the sample died (segfault, abort, a CUDA error that
         killed it): recorded with the op and sample, the sweep goes on in a new
         process from the next sample
  timeout  the sample stalled for STALL_S seconds, or was cut by the sweep's
         time budget (BUDGET_S): likewise; samples the budget left unrun are
         listed as not run
The whole sweep runs in worker subprocesses (JOBS of them), so a crash is one
sample's result, not a killed pytest, and one device run reports every bad op:
the test fails once, at the end, listing them all. XFAIL (empty until a device
run says otherwise) names ops expected to mismatch; such an op that passes is
listed too.

With LAZYJIT_DEVICE_MORE set (scripts/gpu_check.sh sets it) the results go to
$LAZYJIT_DEVICE_MORE/opinfo_cuda.json: per sample its status, reason, the
sample's description, seconds, whether it needed the loose tolerance, and the
kernels it launched on the target's device (metrics' device_kernel_launches).

Run by hand (any machine; no GPU: DEV=cpu with LAZYJIT_TARGET unset checks the
harness itself against CPU eager):
    PYTHONPATH=python python tests/gpu/test_opinfo_cuda.py            # the sweep, a summary
    OPINFO_CUDA_DEV=cpu PYTHONPATH=python python tests/gpu/test_opinfo_cuda.py
Knobs (environment): OPINFO_CUDA_DEV (cuda), OPINFO_CUDA_DTYPE (float32),
OPINFO_CUDA_SAMPLES (SAMPLES_PER_OP), OPINFO_CUDA_OPS (comma-separated, instead of COMMON_OPS),
OPINFO_CUDA_JOBS, OPINFO_CUDA_BUDGET_S, OPINFO_CUDA_STALL_S; to check the
sweep's recovery, OPINFO_CUDA_FAULT=abort=mul:1,hang=add:0,taint=sub:1.
"""
import collections
import contextlib
import importlib.util
import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
THIS = os.path.abspath(__file__)
TOOLS = os.path.join(ROOT, "tools")

# The device the samples are made on and eager runs on. "cpu" only to check
# the harness without a GPU (with LAZYJIT_TARGET unset).
DEV = os.environ.get("OPINFO_CUDA_DEV", "cuda")
# The dtype of the samples: float32 (the GPU check); tests/cuda_sim also runs
# bfloat16 and float16 for the elementwise and reduction ops.
DTYPE = os.environ.get("OPINFO_CUDA_DTYPE", "float32")

# Ops expected to mismatch on the CUDA target: {"op name": "why (issue)"}.
# Empty until a device run has said what fails.
XFAIL = {}

SAMPLE_SEED = 20261129        # both runs of a sample draw random numbers from here (as the CPU harness)
# The whole sweep: it ends (what ran reported, the rest listed as not run) inside
# run.sh's pytest-timeout of 180 s per test.
BUDGET_S = float(os.environ.get("OPINFO_CUDA_BUDGET_S", "120"))
STALL_S = float(os.environ.get("OPINFO_CUDA_STALL_S", "30"))      # one sample without news
STARTUP_S = 120.0             # a worker's start: import torch, op_db, lazyjit; CUDA's context


def _cpu_subset():
    """COMMON_OPS and SAMPLES_PER_OP of the CPU test, read from its file under a
    name of its own (no conftest is imported; that module imports only the
    standard library and pytest)."""
    path = os.path.join(ROOT, "tests", "python", "test_opinfo.py")
    spec = importlib.util.spec_from_file_location("_lazyjit_cpu_opinfo_subset", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return list(mod.COMMON_OPS), int(mod.SAMPLES_PER_OP)


def _full_name(op):
    return op.name + ("." + op.variant_test_name if op.variant_test_name else "")


def _op_db():
    """torch's op_db. Its module imports expecttest, which the GPU machine's
    Python may lack (its image's package list has none): a stand-in then, with
    the two names torch.testing._internal.common_utils takes from it."""
    try:
        import expecttest  # noqa: F401
    except ImportError:
        import types
        import unittest
        stub = types.ModuleType("expecttest")
        stub.TestCase, stub.ACCEPT = unittest.TestCase, False
        sys.modules["expecttest"] = stub
    from torch.testing._internal.common_methods_invocations import op_db
    return op_db


def expand(entries):
    """The OpInfos of op_db the entries name, as the CPU harness selects them
    (tools/opinfo_conformance.py, --exact-ops): an entry "name" is every variant
    of op name ("softmax", "softmax.with_dtype"), "name.variant" that one.
    Returns [(entry, full name, op_db index)] in op_db's order per entry, and
    the entries op_db lacks."""
    op_db = _op_db()
    out, missing = [], []
    for entry in entries:
        hits = [(entry, _full_name(op), idx) for idx, op in enumerate(op_db)
                if _full_name(op) == entry or op.name == entry]
        out += hits
        if not hits:
            missing.append(entry)
    return out, missing


def _jobs():
    n = os.environ.get("OPINFO_CUDA_JOBS")
    if n:
        return max(1, int(n))
    # Compiles (LLVM, ptxas) are the work: a worker per 4 cores, at most 4.
    return max(1, min(4, (os.cpu_count() or 1) // 4))


# ---- the worker (a subprocess: `python test_opinfo_cuda.py --worker EVENTS`) -------------


def _worker_main(events_path):
    """Reads tasks {"op": name, "start": i, "limit": n} from stdin, one a line;
    appends events to events_path, one JSON object a line, flushed at once:
    ready, start {op, i, desc}, result {op, i, status, ...}, tainted, op_done,
    op_missing, unsupported, gen_error. Exits 3 when lazyjit (or the device)
    stopped working after a failed sample."""
    import faulthandler
    import random
    import warnings
    faulthandler.enable()   # a segfault's Python stack goes to the worker's log
    warnings.simplefilter("ignore")
    sys.path.insert(0, TOOLS)
    import torch
    op_db = _op_db()
    import lazyjit
    from opinfo_compare import _describe_sample, _first_line
    from opinfo_rules import _op_rule
    from opinfo_runner import _clone_args, _compare_sample, _map, _tensors

    ev_file = open(events_path, "a", buffering=1)

    def send(**kw):
        ev_file.write(json.dumps(kw) + "\n")
        ev_file.flush()

    dtype = getattr(torch, DTYPE)
    dev = torch.device(DEV)
    # "abort=mul:1,hang=add:0": simulate a crash, hang or broken device at op
    # name:sample (checks the sweep's recovery; never set by the test).
    fault = {w: k for k, _, w in (f.partition("=") for f in os.environ.get("OPINFO_CUDA_FAULT", "").split(",")
                                  if f)}
    lz = torch.device("lazyjit")

    def dev_sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    def on_dev(t):
        return t.device.type == dev.type

    def to_lazy(x):
        # Tensors on DEV -> lazyjit (others, e.g. CPU scalars of a CUDA sample,
        # stay where eager has them); DEV as a device argument -> lazyjit.
        if isinstance(x, torch.Tensor):
            return x.to(lz) if on_dev(x) else x
        if isinstance(x, torch.device):
            return lz if x.type == dev.type else x
        if isinstance(x, list):
            return [to_lazy(v) for v in x]
        if isinstance(x, tuple) and hasattr(x, "_fields"):
            return type(x)(*[to_lazy(v) for v in x])
        if isinstance(x, tuple):
            return tuple(to_lazy(v) for v in x)
        if isinstance(x, dict):
            return {k: (("lazyjit" if v.split(":")[0] == dev.type else v)
                        if k == "device" and isinstance(v, str) else to_lazy(v)) for k, v in x.items()}
        return x

    def back(t):
        return t.to(dev) if t.device.type == "lazyjit" else t

    def not_lazy_outputs(out):
        return [str(t.device) for t in _tensors(out) if t.device.type != "lazyjit"]

    def sanity():
        try:
            x = torch.arange(4, dtype=torch.float32, device=dev)
            y = (x.to(lz) * 2 + 1).to(dev)
            dev_sync()
            return bool(torch.equal(y, x * 2 + 1))
        except Exception:
            return False

    def run_lazy(op, sample):
        args = (sample.input, sample.args, sample.kwargs)
        phase = "to_lazyjit"
        try:
            l_in = to_lazy(args)
            phase = "call"
            torch.manual_seed(SAMPLE_SEED)
            out = op(l_in[0], *l_in[1], **l_in[2])
            phase = "sync"
            lazyjit.sync()
            phase = "to_" + dev.type
            actual = _map(out, back)
            actual_in = _map(l_in, back)
            dev_sync()
        except Exception as e:
            return phase, e, None, None, None
        return None, None, out, actual, actual_in

    def run_sample(op, sample, rule):
        args = (sample.input, sample.args, sample.kwargs)
        try:
            e_in = _clone_args(args, torch)
            torch.manual_seed(SAMPLE_SEED)
            expected = op(e_in[0], *e_in[1], **e_in[2])
            dev_sync()
        except Exception as ee:
            emsg = _first_line(ee)
            if any(w in emsg for w in ("lazyjit", "_DeviceModule", "PrivateUse1", "privateuse1")):
                return {"status": "fail", "phase": "eager", "reason": f"[eager {DEV}, lazyjit imported] {emsg}"}
            # Rule eager_raises: lazyjit raises the same type at the call or the sync.
            phase, le, *_ = run_lazy(op, sample)
            r = {"rule": "eager_raises"}
            if le is None:
                return {"status": "fail", "phase": "compare", **r,
                        "reason": f"eager raises {emsg}; lazyjit returned a value"}
            lmsg = _first_line(le)
            if phase not in ("call", "sync"):
                return {"status": "fail", "phase": phase, **r,
                        "reason": f"eager raises {emsg}; lazyjit raised at [{phase}]: {lmsg}"}
            if type(le) is not type(ee):
                return {"status": "fail", "phase": phase, **r,
                        "reason": f"eager raises {emsg}; lazyjit raises another type: {lmsg}"}
            if not sanity():
                return {"status": "fail", "phase": phase, **r,
                        "reason": f"raised like eager ({type(ee).__name__}), but lazyjit no longer works"}
            return {"status": "pass", **r, "eager_error": emsg, "lazyjit_error": lmsg}
        expected_raw = expected
        try:
            expected = sample.output_process_fn_grad(expected)
        except Exception:
            pass
        phase, le, out, actual, actual_in = run_lazy(op, sample)
        if le is not None:
            return {"status": "fail", "phase": phase, "reason": f"[{phase}] {_first_line(le)}"}
        elsewhere = not_lazy_outputs(out)
        if elsewhere:
            return {"status": "fail", "phase": "call",
                    "reason": f"lazyjit's outputs on {sorted(set(elsewhere))}, not the lazyjit device"}
        rec = _compare_sample(torch, op, sample, rule, out, actual, actual_in, expected, expected_raw, e_in)
        if rec["status"] == "fail" and rec.get("phase") == "compare" and dtype != torch.float32:
            for oracle, per_op in (("float32_rounded", False), ("float32_per_op", True)):
                again = against_float32(op, sample, rule, out, actual, actual_in, per_op)
                if again["status"] == "pass":
                    rec = dict(again, oracle=oracle, eager_mismatch=rec["reason"])
                    break
        return rec

    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves, tree_map

    class Float32PerOp(TorchDispatchMode):
        """Each ATen op that reads DTYPE tensors run on them upcast to float32,
        its float32 results rounded to DTYPE where the op at DTYPE returns
        DTYPE: what a GPU's kernels do (each computes in float32 and rounds its
        result). Ops that write or return views of their arguments run as they are."""

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            schema = func._schema
            if (schema.is_mutable or any(r.alias_info is not None for r in schema.returns)
                    or not any(isinstance(t, torch.Tensor) and t.dtype == dtype for t in tree_leaves((args, kwargs)))):
                return func(*args, **kwargs)
            to_meta = lambda t: t.to("meta") if isinstance(t, torch.Tensor) else t  # noqa: E731
            try:  # the dtypes the op returns at DTYPE
                meta = func(*tree_map(to_meta, args), **tree_map(to_meta, kwargs))
            except Exception:
                return func(*args, **kwargs)
            up = lambda t: t.float() if isinstance(t, torch.Tensor) and t.dtype == dtype else t  # noqa: E731
            result = func(*tree_map(up, args), **tree_map(up, kwargs))
            flat_meta = meta if isinstance(meta, (tuple, list)) else [meta]
            flat_res = list(result) if isinstance(result, (tuple, list)) else [result]
            if len(flat_meta) != len(flat_res):
                return func(*args, **kwargs)
            down = [r.to(m.dtype) if isinstance(r, torch.Tensor) and isinstance(m, torch.Tensor)
                    and r.dtype != m.dtype else r for r, m in zip(flat_res, flat_meta)]
            return type(result)(down) if isinstance(result, (tuple, list)) else down[0]

    def against_float32(op, sample, rule, out, actual, actual_in, per_op):
        """The second and third oracles for bfloat16 and float16. per_op False:
        eager run in float32 on the sample's DTYPE tensors upcast, its float32
        results rounded to DTYPE (what a kernel that computes in float32 and
        rounds once returns). Eager at DTYPE may round in between (log_softmax
        rounds max + log(sum) before subtracting it) and be the one further from
        the exact result. per_op True: eager at DTYPE with each ATen op computed
        in float32 and rounded (Float32PerOp): CUDA eager's model, for ops that
        are several ops in eager (cross_entropy: log_softmax, mul, sum), where
        CPU eager's log_softmax at DTYPE is a rounding off its float32 value
        along the last dim (not along others) and the result's cancellation
        shows it."""
        up = (lambda t: t) if per_op else (lambda t: t.float() if t.dtype == dtype else t)  # noqa: E731
        down = (lambda t: t) if per_op else (lambda t: t.to(dtype) if t.dtype == torch.float32 else t)  # noqa: E731
        e_in = _map(_clone_args((sample.input, sample.args, sample.kwargs), torch), up)
        try:
            torch.manual_seed(SAMPLE_SEED)
            with (Float32PerOp() if per_op else contextlib.nullcontext()):
                raw = _map(op(e_in[0], *e_in[1], **e_in[2]), down)
            dev_sync()
        except Exception as e:
            return {"status": "fail", "phase": "eager", "reason": f"[eager float32] {_first_line(e)}"}
        try:
            expected = sample.output_process_fn_grad(raw)
        except Exception:
            expected = raw
        return _compare_sample(torch, op, sample, rule, out, actual, actual_in, expected, raw, _map(e_in, down))

    send(ev="ready", pid=os.getpid(), torch=torch.__version__, target=lazyjit.target(),
         device=(torch.cuda.get_device_name(0) if dev.type == "cuda" else "cpu"))
    while True:
        line = sys.stdin.readline()
        if not line:
            break
        if not line.strip():
            continue
        task = json.loads(line)
        name, start, limit = task["op"], task.get("start", 0), task.get("limit")
        op = op_db[task["op_index"]]
        assert _full_name(op) == name, (name, _full_name(op))
        try:
            supported = dtype in op.supported_dtypes(DEV)
        except Exception:
            supported = True
        if not supported:
            send(ev="unsupported", op=name)
            send(ev="op_done", op=name)
            continue
        skip_all, rule = _op_rule(op, dtype)
        torch.manual_seed(0)
        random.seed(0)
        try:
            import numpy as np
            np.random.seed(0)
        except Exception:
            pass
        # The samples first, then the runs: what a sample holds does not depend
        # on the runs before it (a worker that resumes after a crash makes the same).
        samples, gen_error = [], None
        try:
            it = iter(op.sample_inputs(DEV, dtype, requires_grad=False))
            while limit is None or len(samples) < limit:
                samples.append(next(it))
        except StopIteration:
            pass
        except Exception as e:
            gen_error = (f"sample {len(samples)}: " if samples else "") + _first_line(e)
        if gen_error:
            send(ev="gen_error", op=name, reason=gen_error)
        tainted = False
        for i, sample in enumerate(samples):
            if i < start:
                continue
            try:
                desc = _describe_sample(sample)
            except Exception:
                desc = "?"
            send(ev="start", op=name, i=i, desc=desc)
            t0 = time.time()
            if fault.get(f"{op.name}:{i}") == "abort":   # the harness's self-check (OPINFO_CUDA_FAULT)
                os.abort()
            if fault.get(f"{op.name}:{i}") == "hang":
                time.sleep(3600)
            if fault.get(f"{op.name}:{i}") == "taint":
                send(ev="result", op=name, i=i, desc=desc, secs=0.0, status="fail", reason="simulated")
                send(ev="tainted", op=name, i=i)
                ev_file.close()
                os._exit(3)
            launched = lazyjit.metrics()["device_kernel_launches"]
            if skip_all:
                rec = {"status": "skip", "reason": skip_all}
            else:
                rec = run_sample(op, sample, rule)
            # Kernels the sample launched on the target's device (0 where it ran in ATen only).
            rec["launches"] = lazyjit.metrics()["device_kernel_launches"] - launched
            send(ev="result", op=name, i=i, desc=desc, secs=round(time.time() - t0, 4), **rec)
            if rec["status"] == "fail" and not sanity():
                send(ev="tainted", op=name, i=i)
                tainted = True
                break
        if tainted:
            ev_file.close()
            os._exit(3)
        send(ev="op_done", op=name)
    ev_file.close()
    return 0


# ---- the sweep (the parent: reads op_db's names, never imports lazyjit) ------------------


class _Worker:
    """One worker subprocess, its events file read from where it was left."""

    def __init__(self, slot, logdir, env):
        self.slot, self.logdir, self.env = slot, logdir, env
        self.proc = None
        self.log = None
        self.gen = 0
        self.info = {}

    def start(self):
        self.gen += 1
        base = os.path.join(self.logdir, f"w{self.slot}.{self.gen}")
        self.events_path, self.log_path = base + ".events", base + ".log"
        open(self.events_path, "w").close()
        self.offset, self.partial = 0, ""
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen([sys.executable, THIS, "--worker", self.events_path], cwd=ROOT,
                                     env=self.env, stdin=subprocess.PIPE, stdout=self.log,
                                     stderr=subprocess.STDOUT, text=True, start_new_session=True)
        self.started = time.time()
        self.ready = False

    def send(self, task):
        self.proc.stdin.write(json.dumps(task) + "\n")
        self.proc.stdin.flush()

    def events(self):
        with open(self.events_path) as f:
            f.seek(self.offset)
            data = f.read()
            self.offset = f.tell()
        data = self.partial + data
        lines = data.split("\n")
        self.partial = lines.pop()
        return [json.loads(ln) for ln in lines if ln.strip()]

    def log_tail(self, n=6):
        """The worker's last lines, after faulthandler's "Fatal Python error"
        line where there is one (its traceback names the op's call)."""
        try:
            with open(self.log_path, errors="replace") as f:
                lines = [ln.strip() for ln in f.read().splitlines() if ln.strip()]
        except OSError:
            return ""
        fatal = [k for k, ln in enumerate(lines) if ln.startswith("Fatal Python error")]
        if fatal:   # the error and the innermost frames
            lines = [ln for ln in lines[fatal[0]:fatal[0] + 6] if not ln.startswith("Extension modules")]
        else:
            lines = lines[-n:]
        return " | ".join(lines)[:800]

    def kill(self):
        if self.proc and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except OSError:
                pass
            self.proc.wait()

    def stop(self):
        if self.proc and self.proc.poll() is None:
            try:
                self.proc.stdin.close()
                self.proc.wait(timeout=30)
            except Exception:
                self.kill()
        if self.log:
            self.log.close()


def _death(rc):
    if rc is None:
        return "killed"
    if rc < 0:
        try:
            return f"killed by {signal.Signals(-rc).name}"
        except ValueError:
            return f"killed by signal {-rc}"
    return f"exit {rc}"


def run_sweep(entries, samples_per_op, jobs=None, budget_s=BUDGET_S, stall_s=STALL_S):
    """Runs the first samples_per_op samples of each OpInfo the entries name
    (expand) in worker subprocesses. Returns the report: {"meta", "summary",
    "ops": [{op, entry, op_index, samples, notes, ...}], "missing"}."""
    jobs = jobs or _jobs()
    t0 = time.time()
    selected, missing = expand(entries)
    ops = [full for _, full, _ in selected]
    deadline = t0 + budget_s
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(ROOT, "python"), TOOLS] +
                                        ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env.setdefault("LAZYJIT_CACHE", "off")
    env.setdefault("LAZYJIT_BACKGROUND_COMPILE", "off")
    env["PYTHONUNBUFFERED"] = "1"
    if DEV == "cuda":
        env.setdefault("LAZYJIT_TARGET", "cuda")
    recs = {full: {"op": full, "entry": entry, "op_index": idx, "dtype": DTYPE, "samples": {}, "notes": []}
            for entry, full, idx in selected}
    q = queue.Queue()
    for name in ops:
        q.put(name)
    lock = threading.Lock()
    logdir = tempfile.mkdtemp(prefix="opinfo_cuda_")
    meta = {"restarts": 0, "workers": []}
    errors = []

    def add_sample(name, i, rec):
        with lock:
            recs[name]["samples"][i] = rec

    def record(name, ev):
        add_sample(name, ev["i"], {k: v for k, v in ev.items() if k not in ("ev", "op", "i")})

    def watch(w, name):
        """Follows the worker through one task. Returns ("done",), ("resume", i)
        (the worker is gone; go on from sample i) or ("lost", why)."""
        cur, tainted, last, killed = None, None, time.time(), None
        while True:
            rc = w.proc.poll()
            evs = w.events()
            if evs:
                last = time.time()
            for ev in evs:
                k = ev["ev"]
                if k == "ready":
                    w.ready = True
                    with lock:
                        meta["workers"].append({k2: v for k2, v in ev.items() if k2 != "ev"})
                elif k == "start":
                    cur = ev
                elif k == "result":
                    record(name, ev)
                    cur = None
                elif k == "tainted":
                    tainted = ev["i"]
                elif k == "unsupported":
                    recs[name][k] = True
                elif k == "gen_error":
                    recs[name]["gen_error"] = ev["reason"]
                elif k == "op_done":
                    return ("done",)
            if rc is None:
                now = time.time()
                limit = stall_s if w.ready else STARTUP_S
                if now - last <= limit and now <= deadline:
                    time.sleep(0.05)
                    continue
                killed = (f"stalled (no news for {limit:.0f} s)" if now - last > limit
                          else f"stopped: the sweep's time budget ({budget_s:.0f} s) ran out")
                w.kill()
                continue      # read what it wrote before it was killed
            if tainted is not None:
                recs[name]["notes"].append(f"worker restarted after sample {tainted}: lazyjit or "
                                           "the device no longer worked after its failure")
                return ("resume", tainted + 1)
            why = killed or _death(rc)
            if cur is not None:
                status = "timeout" if killed else "crash"
                add_sample(name, cur["i"], {"status": status, "desc": cur.get("desc", "?"),
                                            "reason": f"worker {why}; log: {w.log_tail()}"})
                return ("resume", cur["i"] + 1)
            return ("lost", f"worker {why} outside a sample; log: {w.log_tail()}")

    def run_op(w, name):
        start = 0
        while True:
            if time.time() > deadline:
                recs[name]["notes"].append(f"not run from sample {start}: the sweep's time budget "
                                           f"({budget_s:.0f} s) ran out")
                return
            if w.proc is None or w.proc.poll() is not None:
                if w.proc is not None:
                    w.stop()
                    with lock:
                        meta["restarts"] += 1
                w.start()
            try:
                w.send({"op": name, "op_index": recs[name]["op_index"], "start": start, "limit": samples_per_op})
            except (BrokenPipeError, OSError):
                pass   # it died; watch() says how
            got = watch(w, name)
            if got[0] == "done":
                return
            if got[0] == "lost":
                recs[name]["notes"].append(got[1] + f" (from sample {start})")
                if not w.ready:   # it never started: no worker will
                    raise RuntimeError(f"a worker did not start: {got[1]}")
                return
            start = got[1]
            if samples_per_op is not None and start >= samples_per_op:
                return

    def loop(slot):
        w = _Worker(slot, logdir, env)
        try:
            while True:
                try:
                    name = q.get_nowait()
                except queue.Empty:
                    break
                run_op(w, name)
        except Exception as e:
            import traceback
            errors.append(f"worker slot {slot}: " + (str(e) if isinstance(e, RuntimeError)
                                                     else traceback.format_exc()))
        finally:
            w.stop()

    threads = [threading.Thread(target=loop, args=(s,), daemon=True) for s in range(jobs)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    while not q.empty():   # ops no thread got to
        name = q.get_nowait()
        recs[name]["notes"].append("not run: " + ("no worker started (harness errors)" if errors else
                                                  f"the sweep's time budget ({budget_s:.0f} s) ran out"))

    out_ops = []
    summary = collections.Counter()
    for name in ops:
        r = recs[name]
        samples = [dict(index=i, **r["samples"][i]) for i in sorted(r["samples"])]
        r["samples"] = samples
        for s in samples:
            summary[s["status"]] += 1
            summary["loose"] += bool(s.get("loose"))
            summary["eager_raises"] += s.get("rule") == "eager_raises"
            summary["float32_rounded"] += s.get("oracle") == "float32_rounded"
            summary["float32_per_op"] += s.get("oracle") == "float32_per_op"
        summary["total"] += len(samples)
        out_ops.append(r)
    if not errors and not any(summary[k] for k in ("fail", "crash", "timeout")) \
            and not any(r["notes"] for r in out_ops):
        import shutil
        shutil.rmtree(logdir, ignore_errors=True)   # the workers' logs: kept where something went wrong
        logdir = None
    meta.update(dev=DEV, dtype=DTYPE, samples_per_op=samples_per_op, entries=len(entries), ops=len(ops), jobs=jobs,
                budget_s=budget_s, stall_s=stall_s, wall_s=round(time.time() - t0, 1),
                harness_errors=errors, xfail=XFAIL, logdir=logdir)
    return {"meta": meta, "summary": {k: summary[k] for k in
                                      ("total", "pass", "fail", "skip", "crash", "timeout", "loose",
                                       "eager_raises", "float32_rounded", "float32_per_op")},
            "missing": missing, "ops": out_ops}


def problems(report):
    """Every op that does not match eager (or did not run), one line each; the
    xfail ops that now pass too."""
    lines = [f"{e}: not in this torch's op_db" for e in report["missing"]]
    ran = collections.Counter()
    for o in report["ops"]:
        ran[o["entry"]] += len(o["samples"])
    # An entry none of whose variants has a float32 sample on DEV (a variant alone
    # may have none: nn.functional.silu.complex).
    lines += [f"{e}: no {DTYPE} samples ran on {DEV}" for e in ran if not ran[e]
              and not any(o["entry"] == e and (o.get("gen_error") or o["notes"]) for o in report["ops"])]
    for o in report["ops"]:
        bad = [s for s in o["samples"] if s["status"] in ("fail", "crash", "timeout")]
        trouble = []
        if o.get("gen_error"):
            trouble.append(f"sample generation raised: {o['gen_error']}")
        trouble += [n for n in o["notes"] if not n.startswith("worker restarted")]
        if bad:
            c = collections.Counter(s["status"] for s in bad)
            first = "; ".join(f"#{s['index']} {s['status']}: {s.get('reason', '')[:300]} "
                              f"[{s.get('desc', '')[:80]}]" for s in bad[:3])
            trouble.append(f"{len(bad)}/{len(o['samples'])} samples "
                           + ", ".join(f"{v} {k}" for k, v in c.items()) + f": {first}")
        why = XFAIL.get(o["op"], XFAIL.get(o["entry"]))
        if why is not None:
            if not trouble:
                lines.append(f"{o['op']}: passes now, remove it from XFAIL ({why})")
            continue
        if trouble:
            lines.append(f"{o['op']}: " + " | ".join(trouble))
    lines += [f"harness: {e}" for e in report["meta"]["harness_errors"]]
    return lines


def _write_json(report):
    more = os.environ.get("LAZYJIT_DEVICE_MORE")
    if not more:
        return None
    os.makedirs(more, exist_ok=True)
    path = os.path.join(more, "opinfo_cuda.json")
    with open(path, "w") as f:
        json.dump(report, f, indent=1)
    return path


def _selection():
    ops, per_op = _cpu_subset()
    if os.environ.get("OPINFO_CUDA_OPS"):
        ops = [s for s in os.environ["OPINFO_CUDA_OPS"].split(",") if s]
    per_op = int(os.environ.get("OPINFO_CUDA_SAMPLES", per_op))
    return ops, per_op


def _summary_line(report):
    s, m = report["summary"], report["meta"]
    return (f"opinfo {DTYPE} common ops on {DEV}: {m['entries']} entries, {m['ops']} OpInfos, "
            f"{s['total']} samples: pass {s['pass']} (loose {s['loose']}, eager_raises {s['eager_raises']}"
            + (f", float32_rounded {s['float32_rounded']}, float32_per_op {s['float32_per_op']}"
               if DTYPE != "float32" else "") + "), "
            f"fail {s['fail']}, skip {s['skip']}, "
            f"crash {s['crash']}, timeout {s['timeout']}; {m['jobs']} workers, {m['restarts']} restarts, "
            f"{m['wall_s']} s")


def test_opinfo_common_ops_match_cuda_eager():
    import torch
    if DEV == "cuda" and not torch.cuda.is_available():
        pytest.skip("no CUDA GPU here")
    ops, per_op = _selection()
    report = run_sweep(ops, per_op)
    path = _write_json(report)
    print(_summary_line(report) + (f"; JSON: {path}" if path else ""))
    bad = problems(report)
    assert not bad, (f"{len(bad)} ops do not match {DEV} eager "
                     f"({_summary_line(report)}):\n" + "\n".join(bad))
    # Every op ran samples, and none of them crashed.
    assert report["summary"]["crash"] == 0 and report["summary"]["timeout"] == 0
    assert report["summary"]["total"] >= len(ops) * 2, report["summary"]


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--worker":
        sys.exit(_worker_main(sys.argv[2]))
    ops, per_op = _selection()
    rep = run_sweep(ops, per_op)
    path = _write_json(rep)
    for line in problems(rep):
        print("BAD", line)
    print(_summary_line(rep) + (f"; JSON: {path}" if path else ""))
    if os.environ.get("OPINFO_CUDA_JSON"):
        with open(os.environ["OPINFO_CUDA_JSON"], "w") as f:
            json.dump(rep, f, indent=1)
    sys.exit(1 if problems(rep) else 0)
