"""A 2-process DistributedDataParallel training step: eager DDP (Gloo, CPU tensors)
against DDP on lazyjit tensors (init_process_group("cpu:gloo,lazyjit:lazyjit")).

    .venv/bin/python bench/ddp.py [--rounds 3] [--steps 20] [--out bench/results/ddp.md]

Each system runs in its own 2 processes (torchrun, Gloo on loopback), one
thread per process (the machine has 2 cores: one per rank). A step is
zero_grad, forward, loss, backward (DDP's gradient buckets all-reduced), SGD
step, and the loss read back (loss.item(): lazyjit's sync). Per run, the median
step time over the steps after the first few (warm-up: the first compiles),
the slower of the two ranks; per system, the median over rounds, rounds
alternating eager and lazyjit. Scenarios: an MLP (512-2048-2048-512, batch 64
per rank) and a transformers GPT-2 (4 layers, hidden 256, seq 64, batch 4 per
rank, random weights).
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

WORKER = r"""
import json, os, sys, time, statistics, torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
system, scenario, steps, warm, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
torch.set_num_threads(1)
dev = "cpu"
if system == "lazyjit":
    import lazyjit
    dev = "lazyjit"
dist.init_process_group("gloo" if system == "eager" else "cpu:gloo,lazyjit:lazyjit")
rank = dist.get_rank()
torch.manual_seed(0)
if scenario == "mlp":
    model = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.GELU(), torch.nn.Linear(2048, 2048),
                                torch.nn.GELU(), torch.nn.Linear(2048, 512))
    x = torch.randn(64, 512).to(dev); y = torch.randn(64, 512).to(dev)
    loss_fn = lambda m: torch.nn.functional.mse_loss(m(x), y)
else:
    from transformers import GPT2Config, GPT2LMHeadModel
    from transformers.utils import logging as hf_logging
    hf_logging.set_verbosity_error()
    model = GPT2LMHeadModel(GPT2Config(n_embd=256, n_layer=4, n_head=4, vocab_size=1000, n_positions=64,
                                       resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0))
    ids = torch.randint(0, 1000, (4, 64)).to(dev)
    loss_fn = lambda m: m(input_ids=ids, labels=ids).loss
ddp = DDP(model.to(dev))
opt = torch.optim.SGD(ddp.parameters(), lr=1e-3, momentum=0.9)
times = []
for i in range(steps):
    t0 = time.perf_counter()
    opt.zero_grad()
    loss = loss_fn(ddp)
    loss.backward()
    opt.step()
    loss.item()
    times.append((time.perf_counter() - t0) * 1e3)
res = {"median_ms": statistics.median(times[warm:]), "first_ms": times[0],
       "buckets": len(ddp.reducer._get_zeros_like_grad_buckets())}
if system == "lazyjit":
    m = lazyjit.metrics()
    res.update(compiles=m["compiles"], graphs=m["graphs_executed"],
               collectives=sum(v["count"] for v in lazyjit.distributed.collectives().values()),
               gloo_ms=sum(v["total_ms"] for v in lazyjit.distributed.collectives().values())
               + lazyjit.distributed.collective_wait_ms())
with open(f"{out}/rank{rank}.json", "w") as f:
    json.dump(res, f)
dist.destroy_process_group()
os._exit(0)  # no interpreter shutdown: see tests/python/dist_worker.py (a Gloo thread may still free a work)
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(system, scenario, steps, warm):
    with tempfile.TemporaryDirectory() as d:
        script = Path(d) / "worker.py"
        script.write_text(WORKER)
        env = dict(os.environ, PYTHONPATH=str(REPO / "python"), OMP_NUM_THREADS="1", LAZYJIT_NUM_THREADS="1",
                   LAZYJIT_CACHE="off", GLOO_SOCKET_IFNAME="lo", TORCH_CPP_LOG_LEVEL="ERROR")
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--nnodes=1",
               "--master_addr=127.0.0.1", f"--master_port={free_port()}", str(script), system, scenario,
               str(steps), str(warm), d]
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=REPO, timeout=1200)
        if p.returncode != 0:
            raise SystemExit(f"{system} {scenario} failed:\n{p.stderr[-4000:]}")
        ranks = [json.loads((Path(d) / f"rank{r}.json").read_text()) for r in range(2)]
    slow = max(ranks, key=lambda r: r["median_ms"])
    return slow


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warm", type=int, default=5)
    ap.add_argument("--scenarios", default="mlp,gpt2")
    ap.add_argument("--out", default=str(REPO / "bench/results/ddp.md"))
    a = ap.parse_args()
    load_before = os.getloadavg()
    rows = []
    for scenario in a.scenarios.split(","):
        runs = {"eager": [], "lazyjit": []}
        for r in range(a.rounds):
            for system in ("eager", "lazyjit"):
                res = run(system, scenario, a.steps, a.warm)
                runs[system].append(res)
                print(f"round {r + 1} {scenario} {system}: {res['median_ms']:.1f} ms/step", flush=True)
        e = statistics.median(x["median_ms"] for x in runs["eager"])
        lz = statistics.median(x["median_ms"] for x in runs["lazyjit"])
        last = runs["lazyjit"][-1]
        rounds = ", ".join(f"{x['median_ms']:.0f}/{y['median_ms']:.0f}" for x, y in zip(runs["eager"], runs["lazyjit"]))
        rows.append((scenario, e, lz, e / lz, rounds, last["buckets"], last["compiles"], last["graphs"],
                     last["collectives"], statistics.median(x["gloo_ms"] for x in runs["lazyjit"]) / a.steps,
                     statistics.median(x["first_ms"] for x in runs["eager"]),
                     statistics.median(x["first_ms"] for x in runs["lazyjit"])))
    load_after = os.getloadavg()
    lines = [f"2-process DDP training step, eager DDP against DDP on lazyjit; medians of {a.rounds} rounds "
             f"({a.steps} steps each, the first {a.warm} not timed)", "",
             "| scenario | eager DDP ms/step | lazyjit DDP ms/step | speedup | rounds (eager/lazyjit ms) | buckets "
             "| lazyjit compiles (run) | programs run | collectives run | collective ms/step | eager first step ms "
             "| lazyjit first step ms |",
             "|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for s, e, lz, ratio, rounds, b, c, g, n, gms, fe, fl in rows:
        lines.append(f"| {s} | {e:.1f} | {lz:.1f} | {ratio:.2f}x | {rounds} | {b} | {c} | {g} | {n} | {gms:.2f} "
                     f"| {fe:.0f} | {fl:.0f} |")
    lines += ["", f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on this {os.cpu_count()}-core "
              f"machine, one thread per rank, 2 ranks; load average (1 min) {load_before[0]:.1f} before, "
              f"{load_after[0]:.1f} after (other work shared the machine: read the two systems against each "
              "other, not as absolute times). \"buckets\" and the columns after it are lazyjit's, from its last "
              "run, per process, over all steps (DDP's construction included); \"collective "
              "ms/step\" is the time its programs spent starting collectives and waiting for them (for Gloo and "
              "for the other rank), per step."]
    Path(a.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
