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
  .venv/bin/python tools/opinfo_conformance.py --op-stride 12 --op-offset 5 --max-samples-per-op 4 --out /tmp/s.md
                                                # a sampled subset (tests/python/test_opinfo.py)
"""
from __future__ import annotations

import argparse
import collections
import datetime
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

DEFAULT_OTHER_DTYPES = ("float64", "int64", "bool", "bfloat16")
OTHER_DTYPES_STRIDE = 7

# The harness's parts (tools/, each light to import: torch is imported when used):
#   opinfo_compare.py  describing samples, tolerances, comparing results with eager's
#   opinfo_rules.py    skips, the rule each op is compared under, the rules' comparisons
#   opinfo_runner.py   running an op's samples on eager CPU and lazyjit (worker's children)
#   opinfo_worker.py   the worker processes: fork server, Worker, run_task
#   opinfo_report.py   the Markdown and JSON reports
# This file is the command line. The names below are importable from here as
# before the split (tests/python/test_opinfo.py, tools/opinfo_dynamo.py use some).
from opinfo_report import STATUSES, group_key, write_reports  # noqa: E402,F401
from opinfo_compare import (  # noqa: E402,F401
    LOOSE_TOL, _DEFAULT_TOL, _Mismatch, _compare, _describe, _describe_sample, _dtype_short, _first_line,
    _tol)
from opinfo_rules import (  # noqa: E402,F401
    _CANONICALISERS, OPINFO_SKIP_WORDS, ORDER_UNDEFINED_WORDS, OVERFLOW_CAST_WORDS, RANDOM_WORDS, RULES,
    UNINITIALIZED_WORDS, _canonical_unique, _check_unique_contract, _compare_metadata,
    _compare_order_undefined, _decorator_skip_messages, _exact, _op_rule, _overflow_cast_reason,
    _skip_reason)
from opinfo_runner import (  # noqa: E402,F401
    KEEP_ARGS_ON_CPU, SAMPLE_SEED, _Phase, _clone_args, _map, _run_eager_raises, _run_lazyjit, _run_sample,
    _run_task, _sanity, _tensors, _to_lazy_args)
from opinfo_worker import Worker, _death_reason, _worker_main, run_task  # noqa: E402,F401


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
        if args.op_stride and idx % args.op_stride != args.op_offset % args.op_stride:
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
    p.add_argument("--op-stride", type=int, default=None,
                   help="a sampled subset: only the ops of op_db whose index is --op-offset modulo N")
    p.add_argument("--op-offset", type=int, default=0, help="with --op-stride: which residue (default 0)")
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
