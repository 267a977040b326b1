"""bf16 greedy `generate` of a decoder at 0.5B-class widths (issue 58, items 1-2);
`--dtype float32` runs the same model in f32 (bench/real_size.py runs both).

Systems, each in a process of its own, the order alternating over rounds:
  eager          the model on CPU tensors
  backend        torch.compile(model.forward, backend="lazyjit") on CPU tensors
  device         model.to("lazyjit"), generate on lazyjit tensors
  device_compile model.to("lazyjit") and model.forward = torch.compile(model.forward,
                 backend="lazyjit")
  inductor       torch.compile(model.forward) (Inductor) on CPU tensors

The model is a transformers Qwen2 (random weights, built in code, nothing
downloads) at Qwen2-0.5B's widths: hidden 896, intermediate 4864, 14 heads, 2 KV
heads, untied lm_head; fewer layers than its 24 by default (--layers) so a run fits
on a shared 2-core machine. One call is model.generate of --new tokens after a
--prompt-token prompt, batch 1, greedy. Warm-up calls fill every cache (each
decode step's capture/program); the timed calls compile nothing.

Reported per system: median over rounds of the per-process median of the timed
calls, as ms per new token (and the same of the process's CPU time) (call time / new tokens, the prefill included), the
weight bytes a token reads over that time (GB/s), peak RSS of the process, the
first call (cold: each process has its own empty lazyjit and Inductor caches),
and the first token index where the tokens differ from eager's (bf16 greedy may
legitimately diverge after a few tokens from rounding).

    .venv/bin/python bench/decode_bf16.py                 # all systems, 5 rounds
    .venv/bin/python bench/decode_bf16.py --systems eager,backend --rounds 3
    .venv/bin/python bench/decode_bf16.py --out bench/results/decode_bf16_run.json
    # before/after: the lazyjit systems also run from another build's package
    # (a directory holding a `lazyjit` package: its python/), as "<system>@base"
    .venv/bin/python bench/decode_bf16.py --base /path/to/other/python --head python
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

SYSTEMS = ("eager", "backend", "device", "device_compile", "inductor")


def build(args, system):
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    cfg = Qwen2Config(hidden_size=args.hidden, intermediate_size=args.inter, num_attention_heads=14,
                      num_key_value_heads=2, num_hidden_layers=args.layers, vocab_size=args.vocab,
                      max_position_embeddings=1024, tie_word_embeddings=False, bos_token_id=1,
                      eos_token_id=2, pad_token_id=0)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    # Built in the bench's dtype (bf16: no float32 copy of the weights at any time).
    torch.set_default_dtype(getattr(torch, args.dtype))
    with torch.no_grad():
        model = Qwen2ForCausalLM(cfg).eval()
        # transformers' init draws N(0, 0.02): at these widths the logits are
        # nearly flat, and bf16 rounding changes greedy's choice at once. Wider
        # weights make the argmax margins larger (decoding still random text).
        for p in model.parameters():
            if p.dim() == 2:
                p.mul_(4.0)
    torch.set_default_dtype(torch.float32)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(3, args.vocab, (1, args.prompt), generator=g)
    if system in ("device", "device_compile"):
        import lazyjit  # noqa: F401
        model = model.to("lazyjit")
        ids = ids.to("lazyjit")
    if system in ("backend", "device_compile"):
        import lazyjit  # noqa: F401
        model.forward = torch.compile(model.forward, backend="lazyjit")
    if system == "inductor":
        model.forward = torch.compile(model.forward)
    return model, ids


def weight_bytes(model):
    """Bytes of the weights one decode step reads: every parameter but the
    embedding table (one row of it is read)."""
    emb = model.get_input_embeddings().weight
    return sum(p.numel() * p.element_size() for p in model.parameters() if p is not emb)


def worker(args):
    import torch
    torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    model, ids = build(args, args.worker)
    build_s = time.perf_counter() - t0

    def call():
        with torch.no_grad():
            out = model.generate(ids, max_new_tokens=args.new, min_new_tokens=args.new, do_sample=False,
                                 pad_token_id=0)
        return out.cpu()  # the device's sync

    t0 = time.perf_counter()
    out = call()
    first_ms = (time.perf_counter() - t0) * 1e3
    for _ in range(args.warmup - 1):
        call()
    times, cpu = [], []
    for _ in range(args.calls):
        c0 = time.process_time()
        t0 = time.perf_counter()
        out = call()
        times.append((time.perf_counter() - t0) * 1e3)
        cpu.append((time.process_time() - c0) * 1e3)
    res = {"system": args.worker, "call_ms": times, "cpu_ms": cpu, "first_ms": first_ms, "build_s": build_s,
           "tokens": out[0, args.prompt:].tolist(), "weight_bytes": weight_bytes(model),
           "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    if args.worker not in ("eager", "inductor"):
        import lazyjit
        m = lazyjit.metrics()
        res["timings"] = {k: v for k, v in m.get("timings", {}).items()} if isinstance(m.get("timings"), dict) else None
        res["counters"] = {k: v for k, v in m.items() if isinstance(v, (int, float))}
        if args.worker in ("backend", "device_compile"):
            res["dynamo"] = {k: v for k, v in lazyjit.dynamo.stats().items() if k != "eager_reasons"}
            res["eager_reasons"] = lazyjit.dynamo.stats()["eager_reasons"][:3]
    print("RESULT " + json.dumps(res))


def loadavg():
    return os.getloadavg()[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=896)
    ap.add_argument("--inter", type=int, default=4864)
    ap.add_argument("--vocab", type=int, default=65536)
    ap.add_argument("--prompt", type=int, default=8)
    ap.add_argument("--new", type=int, default=32)
    ap.add_argument("--warmup", type=int, default=2, help="untimed calls (the first is the cold one)")
    ap.add_argument("--calls", type=int, default=3, help="timed calls per process")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32"))
    ap.add_argument("--out", default="")
    ap.add_argument("--base", default="", help="a directory holding another build's lazyjit package: its "
                    "systems run again from there, as <system>@base")
    ap.add_argument("--head", default="", help="the directory the lazyjit package is imported from "
                    "(default: as installed)")
    ap.add_argument("--worker", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args)

    systems = args.systems.split(",")
    if args.base:
        systems += [f"{s}@base" for s in systems if s != "eager"]
    runs = {s: [] for s in systems}
    loads = [loadavg()]
    for r in range(args.rounds):
        order = systems if r % 2 == 0 else systems[::-1]
        for s in order:
            env = dict(os.environ)
            path = args.base if s.endswith("@base") else args.head
            if path:
                env["PYTHONPATH"] = os.path.abspath(path) + os.pathsep + env.get("PYTHONPATH", "")
            cmd = [sys.executable, __file__, "--worker", s.split("@")[0]] + [
                f"--{k}={getattr(args, k)}" for k in ("layers", "hidden", "inter", "vocab", "prompt", "new",
                                                       "warmup", "calls", "threads", "dtype")]
            # Cold caches in every process: lazyjit's on-disk cache and Inductor's
            # (its FX graph and kernel caches would make later rounds' first calls warm).
            with tempfile.TemporaryDirectory() as cache:
                env["LAZYJIT_CACHE_DIR"] = cache
                env["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(cache, "inductor")
                p = subprocess.run(cmd, capture_output=True, text=True, env=env)
            line = [l for l in p.stdout.splitlines() if l.startswith("RESULT ")]
            if p.returncode or not line:
                print(f"{s}: failed (rc {p.returncode})\n{p.stderr[-3000:]}", file=sys.stderr)
                continue
            res = json.loads(line[0][7:])
            res["system"] = s
            res["load"] = loadavg()
            runs[s].append(res)
            print(f"round {r} {s:15s} {statistics.median(res['call_ms']) / args.new:7.2f} ms/token  "
                  f"first {res['first_ms']:8.0f} ms  rss {res['peak_rss_mib']:6.0f} MiB  load {res['load']:.2f}",
                  file=sys.stderr, flush=True)
        loads.append(loadavg())

    eager_tokens = runs["eager"][0]["tokens"] if runs.get("eager") else None
    rows = []
    for s in systems:
        if not runs[s]:
            rows.append({"system": s, "failed": True})
            continue
        per_tok = [statistics.median(r["call_ms"]) / args.new for r in runs[s]]
        med = statistics.median(per_tok)
        wb = runs[s][0]["weight_bytes"]
        toks = runs[s][0]["tokens"]
        div = None
        if eager_tokens is not None:
            div = next((i for i, (a, b) in enumerate(zip(toks, eager_tokens)) if a != b), None)
        cpu_tok = statistics.median(statistics.median(r["cpu_ms"]) / args.new for r in runs[s])
        rows.append({"system": s, "ms_per_token": med, "min_ms_per_token": min(per_tok), "per_round": per_tok,
                     "cpu_ms_per_token": cpu_tok,
                     "gb_s": wb / (med * 1e-3) / 1e9, "first_call_ms": statistics.median(r["first_ms"] for r in runs[s]),
                     "peak_rss_mib": statistics.median(r["peak_rss_mib"] for r in runs[s]),
                     "first_divergence": div, "timings": runs[s][-1].get("timings"),
                     "dynamo": runs[s][-1].get("dynamo"), "eager_reasons": runs[s][-1].get("eager_reasons")})
    eager_med = next((r["ms_per_token"] for r in rows if r["system"] == "eager" and not r.get("failed")), None)
    print(f"\nQwen2 {args.dtype}, {args.layers} layers, hidden {args.hidden}, intermediate {args.inter}, vocab {args.vocab}, "
          f"prompt {args.prompt}, {args.new} new tokens, {args.threads} threads, {args.rounds} rounds"
          f"{', base ' + args.base if args.base else ''}; "
          f"load (1 min) {' '.join(f'{l:.2f}' for l in loads)}")
    print("| system | generate ms / new token (median) | min | CPU ms / new token | eager / system | weight GB/s "
          "| first call ms | peak RSS MiB | first token differing from eager |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in rows:
        if r.get("failed"):
            print(f"| {r['system']} | failed | | | | | | | |")
            continue
        ratio = f"{eager_med / r['ms_per_token']:.2f}x" if eager_med else ""
        div = "none" if r["first_divergence"] is None else f"token {r['first_divergence']}"
        print(f"| {r['system']} | {r['ms_per_token']:.2f} | {r['min_ms_per_token']:.2f} | {r['cpu_ms_per_token']:.2f} "
              f"| {ratio} | {r['gb_s']:.1f} "
              f"| {r['first_call_ms']:.0f} | {r['peak_rss_mib']:.0f} | {div} |")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"args": vars(args), "loads": loads, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
