"""Peak memory (RSS) and time of an f32 training step at GPT-2-small widths (issue 58, item 5).

Systems, each in a process of its own, the order alternating over rounds:
  eager          the model on CPU tensors
  device         model.to("lazyjit"); the step recorded and run at loss.item()
  device_bg_off  the same with LAZYJIT_BACKGROUND_COMPILE=off (the first step
                 waits for its compile instead of running op by op beside it)
  backend        torch.compile(model, backend="lazyjit") on CPU tensors, AdamW eager

The model is a transformers GPT2LMHeadModel (random weights built in code, nothing
downloads) at GPT-2 small's widths: n_embd 768, 12 heads, vocab 50257, tied
lm_head; --layers of its 12 layers (default 4), dropout off. One step: zero_grad,
the loss of the batch against itself shifted (the model's labels=), backward,
AdamW (lr 1e-4), loss.item(). Every process starts from the same weights and
batch, so the losses are compared with eager's.

Reported per system, medians over rounds: peak RSS (VmHWM) after the model and
optimizer are built (before any step), after the first step, and at the end; the
first step's time and the steady steps' median; the losses' largest difference
from eager's. Peak RSS does not depend on the machine's load the way the times
do. Each process uses its own empty on-disk cache (LAZYJIT_CACHE_DIR), so the
first step is a cold one.

    .venv/bin/python bench/real_size_memory.py                       # 3 rounds
    .venv/bin/python bench/real_size_memory.py --systems eager,device --rounds 1
    .venv/bin/python bench/real_size_memory.py --out bench/results/real_size_memory.json
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

SYSTEMS = ("eager", "device", "device_bg_off", "backend")


def vm_kib(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def mib(kib):
    return kib / 1024


def build(args, system):
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    cfg = GPT2Config(n_embd=args.hidden, n_head=args.heads, n_layer=args.layers, vocab_size=args.vocab,
                     n_positions=max(1024, args.seq), resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    model = GPT2LMHeadModel(cfg).train()
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, args.vocab, (args.batch, args.seq), generator=g)
    fwd = model
    if system in ("device", "device_bg_off"):
        import lazyjit  # noqa: F401
        model = model.to("lazyjit")
        ids = ids.to("lazyjit")
        fwd = model
    elif system == "backend":
        import lazyjit  # noqa: F401
        fwd = torch.compile(model, backend="lazyjit")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = fwd(ids, labels=ids).loss
        loss.backward()
        opt.step()
        return loss.item()

    return model, step


def worker(args):
    import torch
    torch.set_num_threads(args.threads)
    model, step = build(args, args.worker)
    rss_built = vm_kib("VmHWM")
    t0 = time.perf_counter()
    losses = [step()]
    first_ms = (time.perf_counter() - t0) * 1e3
    rss_first = vm_kib("VmHWM")
    times = []
    for _ in range(args.steps - 1):
        t0 = time.perf_counter()
        losses.append(step())
        times.append((time.perf_counter() - t0) * 1e3)
    res = {"system": args.worker, "first_ms": first_ms, "step_ms": times, "losses": losses,
           "rss_built_mib": mib(rss_built), "rss_first_mib": mib(rss_first), "peak_rss_mib": mib(vm_kib("VmHWM")),
           "rss_end_mib": mib(vm_kib("VmRSS")),
           "params": sum(p.numel() for p in model.parameters())}
    if args.worker != "eager":
        import lazyjit
        m = lazyjit.metrics()
        res["syncs_by_how"] = m.get("syncs_by_how")
        res["counters"] = {k: v for k, v in m.items() if isinstance(v, (int, float))}
    print("RESULT " + json.dumps(res))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--steps", type=int, default=5, help="steps per process, the first (cold) included")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default="")
    ap.add_argument("--worker", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args)

    systems = args.systems.split(",")
    runs = {s: [] for s in systems}
    loads = [os.getloadavg()[0]]
    for r in range(args.rounds):
        for s in (systems if r % 2 == 0 else systems[::-1]):
            env = dict(os.environ)
            if s == "device_bg_off":
                env["LAZYJIT_BACKGROUND_COMPILE"] = "off"
            with tempfile.TemporaryDirectory() as cache:
                env["LAZYJIT_CACHE_DIR"] = cache
                cmd = [sys.executable, __file__, "--worker", s] + [
                    f"--{k}={getattr(args, k)}" for k in ("layers", "hidden", "heads", "vocab", "batch", "seq",
                                                           "steps", "threads")]
                p = subprocess.run(cmd, capture_output=True, text=True, env=env)
            line = [x for x in p.stdout.splitlines() if x.startswith("RESULT ")]
            if p.returncode or not line:
                print(f"{s}: failed (rc {p.returncode})\n{p.stderr[-3000:]}", file=sys.stderr)
                continue
            res = json.loads(line[0][7:])
            res["load"] = os.getloadavg()[0]
            runs[s].append(res)
            print(f"round {r} {s:14s} built {res['rss_built_mib']:6.0f}  first step {res['rss_first_mib']:6.0f}  "
                  f"peak {res['peak_rss_mib']:6.0f} MiB  first {res['first_ms']:7.0f} ms  "
                  f"steady {statistics.median(res['step_ms']):6.0f} ms  load {res['load']:.2f}",
                  file=sys.stderr, flush=True)
        loads.append(os.getloadavg()[0])

    eager = runs.get("eager") and runs["eager"][0]["losses"]
    rows = []
    for s in systems:
        if not runs[s]:
            rows.append({"system": s, "failed": True})
            continue
        med = lambda k: statistics.median(r[k] for r in runs[s])  # noqa: E731
        losses = runs[s][0]["losses"]
        rows.append({"system": s, "rss_built_mib": med("rss_built_mib"), "rss_first_mib": med("rss_first_mib"),
                     "peak_rss_mib": med("peak_rss_mib"), "first_ms": med("first_ms"),
                     "step_ms": statistics.median(statistics.median(r["step_ms"]) for r in runs[s]),
                     "loss_diff": max(abs(a - b) for a, b in zip(losses, eager)) if eager else None,
                     "per_round_peak": [r["peak_rss_mib"] for r in runs[s]],
                     "syncs_by_how": runs[s][-1].get("syncs_by_how")})
    base = next((r for r in rows if r["system"] == "eager" and not r.get("failed")), None)
    print(f"\nGPT-2 f32 training step: {args.layers} layers, hidden {args.hidden}, vocab {args.vocab}, batch "
          f"{args.batch} x seq {args.seq}, AdamW, {args.steps} steps a process, {args.threads} threads, "
          f"{args.rounds} rounds; load (1 min) {' '.join(f'{x:.2f}' for x in loads)}")
    print("| system | RSS built MiB | peak after step 1 MiB | peak MiB | peak / eager | first step ms | steady step ms "
          "| eager / system | loss max abs diff vs eager |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        if r.get("failed"):
            print(f"| {r['system']} | failed | | | | | | | |")
            continue
        ratio = f"{r['peak_rss_mib'] / base['peak_rss_mib']:.2f}x" if base else ""
        speed = f"{base['step_ms'] / r['step_ms']:.2f}x" if base else ""
        diff = "" if r["loss_diff"] is None else f"{r['loss_diff']:.1e}"
        print(f"| {r['system']} | {r['rss_built_mib']:.0f} | {r['rss_first_mib']:.0f} | {r['peak_rss_mib']:.0f} "
              f"| {ratio} | {r['first_ms']:.0f} | {r['step_ms']:.0f} | {speed} | {diff} |")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"args": vars(args), "loads": loads, "rows": rows, "runs": runs}, f, indent=1)


if __name__ == "__main__":
    main()
