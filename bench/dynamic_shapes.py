"""Shapes that vary must not recompile (issue 9): eager vs lazyjit vs torch.compile.

    PYTHONPATH=python .venv/bin/python bench/dynamic_shapes.py [--runs 3] [--quick]
        [--dynamic auto|off|all] [--warm-disk]

Workloads:
  varying_batch  MLP block (bench/run.py's MLPBlock, width 256, hidden 4x), forward under
                 no_grad over batch sizes 1..40 in a fixed shuffled order (seed 0), each
                 once, each result read back with .cpu().
  generate       transformers GPT-2 (4 layers, n_embd 256, 4 heads, vocab 1000, random
                 weights), greedy generate: a 12-token prompt + 32 new tokens, then in the
                 same process a 17-token prompt + 20 new tokens.

Every (system, workload) runs in a fresh process (this script with --worker SYSTEM
WORKLOAD, which prints one JSON line): ATen's OpenMP threads and lazyjit's TBB threads
slow each other in one process, and the first call must be cold. The parent alternates
the systems over --runs rounds and reports medians. lazyjit workers run with
LAZYJIT_CACHE=off (no on-disk cache) unless --warm-disk; Inductor workers get a fresh
TORCHINDUCTOR_CACHE_DIR unless --warm-disk. See bench/README.md.

The builders (batch_sizes, build_mlp, run_varying_batch, build_gpt2, run_generate) are
importable without running anything; tests/python/test_bench_dynamic.py uses them.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
RESULTS_DIR = BENCH / "results"
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))
from run import MLPBlock, import_lazyjit  # noqa: E402

SYSTEMS = ("eager", "lazyjit", "inductor", "lazyjit_compile")  # lazyjit_compile: torch.compile(backend="lazyjit")
WORKLOADS = ("varying_batch", "generate")
# varying_batch: number of batch sizes (1..n) and width; generate: (prompt length, new tokens) per call
SCALES = {
    "full": {"batches": 40, "width": 256, "gens": ((12, 32), (17, 20))},
    "quick": {"batches": 8, "width": 256, "gens": ((12, 8), (17, 8))},
}
LAZYJIT_KEYS = ("compiles", "shape_binds", "llvm_compiles", "generic_compiles", "kernel_hits", "dynamic_dims",
                "background_syncs")


# ----------------------------------------------------------------------------- workloads
def batch_sizes(n: int) -> list[int]:
    """1..n in a fixed shuffled order (seed 0)."""
    sizes = list(range(1, n + 1))
    random.Random(0).shuffle(sizes)
    return sizes


def build_mlp(width: int = 256) -> torch.nn.Module:
    torch.manual_seed(0)
    return MLPBlock(width).eval()


def compiled(fn, system: str = "inductor"):
    if system == "lazyjit_compile":
        import_lazyjit()
        return torch.compile(fn, backend="lazyjit", dynamic=None)
    return torch.compile(fn, backend="inductor", dynamic=None)


def device_of(system: str) -> str:
    if system == "lazyjit":
        import_lazyjit()  # registers the device (retries while the extension is being relinked)
        return "lazyjit"
    return "cpu"


def run_varying_batch(system: str, n: int, width: int = 256) -> dict:
    """Calls the MLP once per batch size; returns per-call times and the CPU outputs."""
    dev = device_of(system)
    model = build_mlp(width).to(dev)
    fn = compiled(model, system) if system in ("inductor", "lazyjit_compile") else model
    g = torch.Generator().manual_seed(1)
    xs = [torch.randn(b, width, generator=g).to(dev) for b in batch_sizes(n)]
    times, outs = [], []
    with torch.no_grad():
        for x in xs:
            t0 = time.perf_counter()
            out = fn(x).cpu()
            times.append((time.perf_counter() - t0) * 1e3)
            outs.append(out)
    return {"first_ms": times[0], "total_ms": sum(times), "call_ms": times, "outputs": outs}


def build_gpt2(n_layer: int = 4):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=n_layer, n_embd=256, n_head=4, vocab_size=1000, n_positions=256)
    return GPT2LMHeadModel(cfg).eval()


def prompt(length: int) -> torch.Tensor:
    # tokens 1..999: no pad token (0) in the prompt, so generate's mask is all ones
    return torch.randint(1, 1000, (1, length), generator=torch.Generator().manual_seed(length))


def run_generate(system: str, gens=((12, 32), (17, 20)), n_layer: int = 4, after_each=None) -> dict:
    """Greedy generate once per (prompt length, new tokens) in one process; returns each
    call's time and token ids. after_each(i) is called after generate i (for counters)."""
    dev = device_of(system)
    model = build_gpt2(n_layer).to(dev)
    if system in ("inductor", "lazyjit_compile"):
        model.forward = compiled(model.forward, system)
    times, tokens = [], []
    for i, (plen, new) in enumerate(gens):
        ids = prompt(plen).to(dev)
        t0 = time.perf_counter()
        out = model.generate(ids, max_new_tokens=new, do_sample=False, pad_token_id=0).cpu()
        times.append((time.perf_counter() - t0) * 1e3)
        tokens.append(out[0].tolist())
        if after_each:
            after_each(i)
    return {"gen_ms": times, "tokens": tokens}


# ----------------------------------------------------------------------------- counters
def lazyjit_counters(wait: bool = True) -> dict:
    lz = import_lazyjit()
    if wait and hasattr(lz, "wait_for_compiles"):
        # Outside any timing: the counters include what compiled in the background
        # (LAZYJIT_BACKGROUND_COMPILE). Not between two generate calls: the second
        # must not start with the first one's compiles finished for it.
        lz.wait_for_compiles()
    m = lz.metrics()
    # metrics()["counters"] where the build has it; older builds keep the counters at top level
    c = m["counters"] if isinstance(m.get("counters"), dict) else m
    out = {k: c.get(k) for k in LAZYJIT_KEYS}
    out["compile_ms"] = m.get("timings", {}).get("compile", {}).get("total_ms")
    return out


def inductor_counters() -> dict:
    from torch._dynamo.utils import counters

    return {"compiles": counters["stats"].get("unique_graphs"),  # Dynamo graphs compiled (incl. recompiles)
            "graph_breaks": sum(counters["graph_break"].values())}


def lazyjit_compile_counters(wait: bool = True) -> dict:
    """lazyjit's counters under torch.compile: `compiles` are lazyjit programs built
    (one per graph capture: Dynamo's graphs, and each new size of a dynamic one),
    `dynamo_graphs` Dynamo's."""
    out = lazyjit_counters(wait)
    out["dynamo_graphs"] = inductor_counters()["compiles"]
    return out


def delta(after: dict, before: dict) -> dict:
    num = (int, float)
    return {k: (v - before[k] if isinstance(v, num) and isinstance(before.get(k), num) else v)
            for k, v in after.items()}


def worker(system: str, workload: str, scale: str, width: int | None = None) -> dict:
    sc = dict(SCALES[scale])
    if width:
        sc["width"] = width
    counters = None
    if system == "lazyjit":
        import_lazyjit().reset_metrics()
        counters = lazyjit_counters
    elif system == "inductor":
        counters = inductor_counters
    elif system == "lazyjit_compile":
        import_lazyjit().reset_metrics()
        counters = lazyjit_compile_counters
    if workload == "varying_batch":
        r = run_varying_batch(system, sc["batches"], sc["width"])
        r.pop("outputs")
        r["counters"] = counters() if counters else None
        return r
    snaps = []
    last = len(sc["gens"]) - 1

    def snap(i):
        if counters is inductor_counters:
            snaps.append(counters())
        elif counters:
            snaps.append(counters(wait=i == last))
        else:
            snaps.append(None)

    r = run_generate(system, sc["gens"], after_each=snap)
    r["counters"] = snaps[0] if counters else None
    r["counters_2"] = delta(snaps[1], snaps[0]) if counters else None
    return r


# ----------------------------------------------------------------------------- parent
def launch(system, workload, args, tmp) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "python"), env.get("PYTHONPATH")]))
    if system in ("lazyjit", "lazyjit_compile"):
        if not args.warm_disk:
            env["LAZYJIT_CACHE"] = "off"
        if args.dynamic:
            env["LAZYJIT_DYNAMIC"] = args.dynamic
    if system in ("inductor", "lazyjit_compile") and not args.warm_disk:
        env["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="inductor-", dir=tmp)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", system, workload, "--scale", args.scale]
    if args.width:
        cmd += ["--width", str(args.width)]
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {args.timeout:.0f} s"}
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if p.returncode != 0 or not lines:
        return {"error": f"rc={p.returncode}: {p.stderr.strip()[-2000:]}"}
    r = json.loads(lines[-1])
    r["process_s"] = time.perf_counter() - t0
    return r


def median_of(rs: list[dict], path: tuple):
    vals = []
    for r in rs:
        for k in path:
            r = r.get(k) if isinstance(r, dict) else (r[k] if isinstance(r, list) and k < len(r) else None)
        if isinstance(r, (int, float)):
            vals.append(r)
    return statistics.median(vals) if vals else None


def fmt(v, spec="{:.1f}"):
    return "–" if v is None else (spec.format(v) if isinstance(v, float) else str(v))


def report(res: dict, args) -> str:
    sc = dict(SCALES[args.scale])
    if args.width:
        sc["width"] = args.width
    date = _dt.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    lines = [f"# Dynamic shapes (issue 9): eager vs lazyjit vs torch.compile{' (--quick)' if args.quick else ''}", "",
             f"{date}, nproc {len(os.sched_getaffinity(0))}, torch {torch.__version__}, medians of {args.runs} "
             f"round(s), each system × workload a fresh process; lazyjit: LAZYJIT_CACHE="
             f"{'(default)' if args.warm_disk else 'off'}, LAZYJIT_DYNAMIC={args.dynamic or '(default)'}; "
             f"inductor and lazyjit_compile (torch.compile(backend=\"lazyjit\")): dynamic=None, "
             f"{'default' if args.warm_disk else 'fresh'} inductor cache dir; load average "
             f"{args.load[0]:.2f} at start, {args.load[1]:.2f} at end.", "",
             f"varying_batch: MLP width {sc['width']}, batch sizes {batch_sizes(sc['batches'])}; generate: GPT-2 "
             f"4 layers/256/4 heads/vocab 1000, (prompt, new tokens) = {list(sc['gens'])}; "
             "generate 2's counters are deltas over generate 1. ratio = total / eager's total (> 1: slower "
             "than eager). – = not reported (counter missing in this build, or not applicable).", "",
             "| workload | system | first call ms | total ms | ratio to eager | compiles | shape_binds | "
             "llvm_compiles | generic_compiles | kernel_hits | dynamic_dims | background_syncs | compile ms |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    rows = [("varying_batch", "varying_batch", ("first_ms",), ("total_ms",), "counters"),
            ("generate", "generate 1", None, ("gen_ms", 0), "counters"),
            ("generate", "generate 2", None, ("gen_ms", 1), "counters_2")]
    for wl, label, first, total, ckey in rows:
        if wl not in res:
            continue
        eager_total = median_of(res[wl].get("eager", []), total)
        for system in res[wl]:
            rs = [r for r in res[wl][system] if "error" not in r]
            if not rs:
                lines.append(f"| {label} | {system} | ERROR | | | | | | | | | | |")
                continue
            t = median_of(rs, total)
            ratio = f"{t / eager_total:.2f}×" if t is not None and eager_total else "–"
            c = [median_of(rs, (ckey, k)) for k in LAZYJIT_KEYS + ("compile_ms",)]
            lines.append(f"| {label} | {system} | {fmt(median_of(rs, first) if first else None)} | {fmt(t)} | "
                         f"{ratio} | " + " | ".join(fmt(v, "{:.0f}") for v in c[:-1]) + f" | {fmt(c[-1])} |")
    lines.append("")
    for system in ("lazyjit", "inductor", "lazyjit_compile"):
        if "generate" not in res or system not in res["generate"] or "eager" not in res["generate"]:
            continue
        got = [r.get("tokens") for r in res["generate"][system] if "tokens" in r]
        want = [r.get("tokens") for r in res["generate"]["eager"] if "tokens" in r]
        verdict = ("n/a (no tokens)" if not (got and want) else
                   "MATCH" if all(g == want[0] for g in got + want) else "MISMATCH")
        lines.append(f"generate tokens, {system} vs eager: **{verdict}**")
    errors = [f"- {wl}/{s}: {r['error']}" for wl in res for s in res[wl] for r in res[wl][s] if "error" in r]
    if errors:
        lines += ["", "Errors:", *errors]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3, help="rounds (each system once per workload per round)")
    ap.add_argument("--quick", action="store_true", help="smoke test: 8 batch sizes, 8 new tokens")
    ap.add_argument("--dynamic", choices=("auto", "off", "all"), help="LAZYJIT_DYNAMIC for lazyjit workers")
    ap.add_argument("--warm-disk", action="store_true", help="keep on-disk caches (lazyjit's and Inductor's)")
    ap.add_argument("--timeout", type=float, default=1200, help="seconds per worker process")
    ap.add_argument("--width", type=int, help="varying_batch's MLP width (default 256; the bench's c_mlp is 1024)")
    ap.add_argument("--systems", default=",".join(SYSTEMS), help="comma-separated subset of " + ",".join(SYSTEMS))
    ap.add_argument("--only", help="comma-separated subset of " + ",".join(WORKLOADS))
    ap.add_argument("--worker", nargs=2, metavar=("SYSTEM", "WORKLOAD"), help=argparse.SUPPRESS)
    ap.add_argument("--scale", choices=tuple(SCALES), default="full", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(*args.worker, args.scale, args.width)), flush=True)
        return 0
    args.scale = "quick" if args.quick else "full"
    systems = tuple(s for s in SYSTEMS if s in args.systems.split(","))
    workloads = tuple(w for w in WORKLOADS if not args.only or w in args.only.split(","))
    res = {wl: {s: [] for s in systems} for wl in workloads}
    load_start = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="lazyjit-dyn-") as tmp:
        for rnd in range(args.runs):
            for wl in workloads:
                k = rnd % len(systems)
                for system in systems[k:] + systems[:k]:  # rotate the order every round
                    print(f"[dynamic_shapes] round {rnd + 1}/{args.runs} {wl} {system}", file=sys.stderr, flush=True)
                    r = launch(system, wl, args, tmp)
                    if "error" in r:
                        print(f"[dynamic_shapes]   ERROR {r['error'][-500:]}", file=sys.stderr, flush=True)
                    res[wl][system].append(r)
    args.load = (load_start, os.getloadavg()[0])
    text = report(res, args)
    print(text)
    stem = ("dynamic_shapes_quick" if args.quick else "dynamic_shapes") + (f"_w{args.width}" if args.width else "")
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    (RESULTS_DIR / f"{stem}.md").write_text(text + "\n")
    meta = {"date": _dt.datetime.now().astimezone().isoformat(), "nproc": len(os.sched_getaffinity(0)),
            "torch": torch.__version__, "args": vars(args), "scale": SCALES[args.scale]}
    (RESULTS_DIR / f"{stem}.json").write_text(json.dumps({"meta": meta, "results": res}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
