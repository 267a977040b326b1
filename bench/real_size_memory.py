"""Peak memory (RSS) and time of an f32 training step at GPT-2-small widths (issue 58, item 5).

Systems, each in a process of its own, the order alternating over rounds:
  eager          the model on CPU tensors
  device         model.to("lazyjit"); the step recorded and run at loss.item()
  device_bg_off  the same with LAZYJIT_BACKGROUND_COMPILE=off (the first step
                 waits for its compile instead of running op by op beside it)
  backend        torch.compile(model, backend="lazyjit") on CPU tensors, AdamW eager
  inductor       torch.compile(model) (Inductor) on CPU tensors, AdamW eager

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
import statistics
import sys
import time

from gemm_floor import floor_line
from rounds import add_common_args, report, run_rounds, summarize

SYSTEMS = ("eager", "device", "device_bg_off", "backend", "inductor")


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
    elif system == "inductor":
        fwd = torch.compile(model)
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
    if args.worker == "eager":
        from gemm_floor import measure
        res.update(measure(step))
    if args.worker not in ("eager", "inductor"):
        import lazyjit
        m = lazyjit.metrics()
        res["syncs_by_how"] = m.get("syncs_by_how")
        res["counters"] = {k: v for k, v in m.items() if isinstance(v, (int, float))}
    print("RESULT " + json.dumps(res))


def table(a, loads, rows):
    """The results as markdown lines: a heading line, the floor, the table
    (also what bench/real_size.py puts in results/real_size.md)."""
    base = next((r for r in rows if r["system"] == "eager" and not r.get("failed")), None)
    out = [f"GPT-2 f32 training step: {a['layers']} layers, hidden {a['hidden']}, vocab {a['vocab']}, batch "
           f"{a['batch']} x seq {a['seq']}, AdamW, {a['steps']} steps a process, {a['threads']} threads, "
           f"{a['rounds']} rounds; load (1 min) {' '.join(f'{x:.2f}' for x in loads)}", ""]
    floor = base and base.get("floor_ms")
    if floor:
        out += [floor_line(base), ""]
    out += ["| system | RSS built MiB | peak after step 1 MiB | peak MiB | peak / eager | first step ms | steady step ms "
            "| eager / system | of floor | ATen GEMMs alone / step | loss max abs diff vs eager |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        if r.get("failed"):
            out.append(f"| {r['system']} | failed | | | | | | | | | |")
            continue
        ratio = f"{r['peak_rss_mib'] / base['peak_rss_mib']:.2f}x" if base else ""
        speed = f"{base['step_ms'] / r['step_ms']:.2f}x" if base else ""
        diff = "" if r["loss_diff"] is None else f"{r['loss_diff']:.1e}"
        of = f"{floor / r['step_ms']:.0%}" if floor else ""
        alone = f"{base['aten_gemm_ms'] / r['step_ms']:.0%}" if floor else ""
        out.append(f"| {r['system']} | {r['rss_built_mib']:.0f} | {r['rss_first_mib']:.0f} | {r['peak_rss_mib']:.0f} "
                   f"| {ratio} | {r['first_ms']:.0f} | {r['step_ms']:.0f} | {speed} | {of} | {alone} | {diff} |")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(ap, SYSTEMS, steps=5)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=128)
    args = ap.parse_args()
    if args.worker:
        return worker(args)

    systems = args.systems.split(",")

    def progress(r, s, res):
        print(f"round {r} {s:14s} built {res['rss_built_mib']:6.0f}  first step {res['rss_first_mib']:6.0f}  "
              f"peak {res['peak_rss_mib']:6.0f} MiB  first {res['first_ms']:7.0f} ms  "
              f"steady {statistics.median(res['step_ms']):6.0f} ms  load {res['load']:.2f}", file=sys.stderr, flush=True)

    flags = [f"--{k}={getattr(args, k)}" for k in ("layers", "hidden", "heads", "vocab", "batch", "seq", "steps", "threads")]
    runs, loads = run_rounds(__file__, systems, args.rounds, flags, progress=progress,
                             env_for=lambda s: {"LAZYJIT_BACKGROUND_COMPILE": "off"} if s == "device_bg_off" else {})

    rows = summarize(systems, runs, ("rss_built_mib", "rss_first_mib", "peak_rss_mib", "first_ms"),
                     ("loss_diff", "losses"),
                     extra=lambda s, rs: {"per_round_peak": [r["peak_rss_mib"] for r in rs],
                                          "syncs_by_how": rs[-1].get("syncs_by_how")})
    report(args, loads, rows, runs, table)


if __name__ == "__main__":
    main()
