"""Real sizes against the machine's limit (issue 58, item 6): decode of a 0.5B-class
decoder in bf16 and f32, each row with its limit (the measured read bandwidth) and
the fraction of it reached; then the training and diffusion steps' sections from
their own benches' results (bench/real_size_memory.py, bench/unet_step.py), each
with its GEMM floor (bench/gemm_floor.py).

For each thread count and dtype: the read bandwidth (torch.sum over 1 GiB of
float32, in a process of its own at that thread count, before and after the
decode runs), then bench/decode_bf16.py's systems (eager, the backend on CPU
tensors, the device + torch.compile, Inductor), each in its own processes. A
decode token reads every weight once (all parameters but the embedding table),
so **weight GB/s** = those bytes / (ms per token) and **of limit** = that over the
read bandwidth. ms per token is a 32-token generate's time / 32, the prefill
included (the bandwidth figure is a lower bound for the decode steps alone).

    .venv/bin/python bench/real_size.py                        # 1 and 2 threads, bf16 and f32
    .venv/bin/python bench/real_size.py --threads 1 --dtypes bfloat16 --rounds 3
    # -> bench/results/real_size.md (--md) and real_size.json (--json)
    .venv/bin/python bench/real_size.py --from-json   # the md again, e.g. after the step benches ran

The same figures by CPU time (the process's, over all its threads) are in the
JSON and the table, what a machine shared with other work disturbs least.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def read_worker(threads, reps=7):
    import torch
    torch.set_num_threads(threads)
    x = torch.ones(1 << 28)  # 1 GiB
    x.sum().item()
    wall, cpu = [], []
    for _ in range(reps):
        c0, t0 = time.process_time(), time.perf_counter()
        x.sum().item()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    n = x.numel() * x.element_size()
    print("RESULT " + json.dumps({"median_gbs": n / statistics.median(wall) / 1e9, "best_gbs": n / min(wall) / 1e9,
                                  "cpu_gbs": n * threads / statistics.median(cpu) / 1e9}))


def run_json(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    line = [l for l in p.stdout.splitlines() if l.startswith("RESULT ")]
    if p.returncode or not line:
        raise RuntimeError(f"{' '.join(cmd)} failed (rc {p.returncode}):\n{p.stderr[-3000:]}")
    return json.loads(line[0][7:])


def read_bandwidth(threads):
    return run_json([sys.executable, __file__, "--read-worker", str(threads)])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--dtypes", default="bfloat16,float32")
    ap.add_argument("--systems", default="eager,backend,device_compile,inductor")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--md", default=os.path.join(HERE, "results", "real_size.md"))
    ap.add_argument("--json", default=os.path.join(HERE, "results", "real_size.json"))
    ap.add_argument("--from-json", action="store_true", help="write --md from --json's results, running nothing")
    ap.add_argument("--read-worker", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.read_worker:
        return read_worker(args.read_worker)
    if args.from_json:
        with open(args.json) as f:
            return write_md(args, json.load(f))

    sections = []
    for threads in [int(t) for t in args.threads.split(",")]:
        for dtype in args.dtypes.split(","):
            before = read_bandwidth(threads)
            out = os.path.join(HERE, "results", f"real_size_decode_{dtype}_t{threads}.json")
            cmd = [sys.executable, os.path.join(HERE, "decode_bf16.py"), "--systems", args.systems, "--rounds",
                   str(args.rounds), "--layers", str(args.layers), "--threads", str(threads), "--dtype", dtype,
                   "--out", out]
            print(" ".join(cmd), file=sys.stderr, flush=True)
            p = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
            if p.returncode:
                print(f"decode run failed (rc {p.returncode})", file=sys.stderr)
                continue
            after = read_bandwidth(threads)
            with open(out) as f:
                decode = json.load(f)
            sections.append({"threads": threads, "dtype": dtype, "read_before": before, "read_after": after,
                             "decode": decode})
            print(f"threads {threads} {dtype}: read {before['median_gbs']:.1f} / {after['median_gbs']:.1f} GB/s",
                  file=sys.stderr, flush=True)

    with open(args.json, "w") as f:
        json.dump(sections, f, indent=1)
    write_md(args, sections)


def step_sections():
    """The training and diffusion steps' sections, from the raw results their
    benches wrote (bench/real_size_memory.py --out results/real_size_train.json,
    bench/unet_step.py --out results/unet_step.json), each with its limit, the
    step's GEMM floor (bench/gemm_floor.py); none for a file not there."""
    import real_size_memory
    import unet_step
    lines = []
    for name, title, mod, cmd in (
            ("real_size_train.json", "f32 training step at GPT-2-small widths", real_size_memory,
             "bench/real_size_memory.py --systems eager,device,backend,inductor --rounds 3 "
             "--out bench/results/real_size_train.json"),
            ("unet_step.json", "SD-class UNet denoising step", unet_step,
             "bench/unet_step.py --rounds 3 --out bench/results/unet_step.json")):
        path = os.path.join(HERE, "results", name)
        if not os.path.exists(path):
            continue
        with open(path) as f:
            d = json.load(f)
        lines += [f"## {title}", "", f"`.venv/bin/python {cmd}` (raw: [{name}]({name})).", "",
                  "**of floor** = the step's GEMM floor / the steady step: its matrix products and convolutions "
                  "(forward and backward) in floating-point operations, at the best rate ATen's libraries reach on "
                  "one large product at the same thread count (`bench/gemm_floor.py`). **ATen GEMMs alone / step** = "
                  "the time ATen's kernels take for the same products run alone / the step.", ""]
        lines += mod.table(d["args"], d["loads"], d["rows"]) + [""]
    return lines


def write_md(args, sections):
    lines = ["# Real sizes against the machine's limit (issue 58, item 6)", "",
             "Written by `bench/real_size.py` (raw: [real_size.json](real_size.json) and the "
             "`real_size_decode_*.json` beside it). A transformers Qwen2 at Qwen2-0.5B's widths (hidden 896, "
             "intermediate 4864, 14 heads, 2 KV heads, vocab 65,536, untied `lm_head`), "
             f"{args.layers} of its 24 layers, random weights; a greedy `generate` of 32 tokens after an 8-token "
             "prompt, batch 1; each system in its own processes, medians over rounds of per-process medians "
             "(`bench/decode_bf16.py`).", "",
             "**limit** = the read bandwidth at the same thread count: `torch.sum` over 1 GiB of float32 in a "
             "process of its own, the median of 7 sums, measured before and after the section's decode runs "
             "(their mean). **weight GB/s** = the bytes of all weights but the embedding table (read once per "
             "token) / ms per token (the prefill included). **of limit** = weight GB/s / limit. **by CPU** = the "
             "same with the process's CPU time (all its threads) for the time and for the sum's, what other work "
             "on the machine disturbs least.", ""]
    for sec in sections:
        d = sec["decode"]
        rb, ra = sec["read_before"], sec["read_after"]
        limit = (rb["median_gbs"] + ra["median_gbs"]) / 2
        limit_cpu = (rb["cpu_gbs"] + ra["cpu_gbs"]) / 2
        loads = " ".join(f"{l:.1f}" for l in d["loads"])
        lines += [f"## {sec['dtype']}, {sec['threads']} thread{'s' if sec['threads'] > 1 else ''}", "",
                  f"limit {limit:.1f} GB/s (before {rb['median_gbs']:.1f}, after {ra['median_gbs']:.1f}; by CPU "
                  f"{limit_cpu:.1f}); load average (1 min) over the rounds: {loads}.", "",
                  "| system | ms / token | CPU ms / token | eager / system | by CPU | weight GB/s | of limit | by CPU: "
                  "GB/s, of limit | first call ms | peak RSS MiB |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        rows = [r for r in d["rows"] if not r.get("failed")]
        eager = next((r for r in rows if r["system"] == "eager"), None)
        for r in d["rows"]:
            if r.get("failed"):
                lines.append(f"| {r['system']} | failed | | | | | | | | |")
                continue
            wb = r["gb_s"] * r["ms_per_token"] * 1e-3 * 1e9  # bytes a token
            cpu_gbs = wb / (r["cpu_ms_per_token"] * 1e-3) / 1e9 * sec["threads"]
            ratio = f"{eager['ms_per_token'] / r['ms_per_token']:.2f}x" if eager else ""
            cpu_ratio = f"{eager['cpu_ms_per_token'] / r['cpu_ms_per_token']:.2f}x" if eager else ""
            lines.append(f"| {r['system']} | {r['ms_per_token']:.2f} | {r['cpu_ms_per_token']:.2f} | {ratio} | "
                         f"{cpu_ratio} | "
                         f"{r['gb_s']:.1f} | {100 * r['gb_s'] / limit:.0f}% | {cpu_gbs:.1f}, "
                         f"{100 * cpu_gbs / limit_cpu:.0f}% | {r['first_call_ms']:.0f} | {r['peak_rss_mib']:.0f} |")
        lines.append("")
    lines += step_sections()
    with open(args.md, "w") as f:
        f.write("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
