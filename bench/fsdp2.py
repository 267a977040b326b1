"""A 2-process FSDP2 training step of a transformers Llama: eager FSDP2 on CPU tensors
against FSDP2 on lazyjit tensors, the same setup (fully_shard per decoder layer and at
the root, AdamW, Gloo on loopback).

    .venv/bin/python bench/fsdp2.py [--rounds 3] [--steps 20] [--warm 5] [--out bench/results/fsdp2.md]

Each system runs in its own 2 processes (torchrun; tests/python/fsdp2_worker.py with
--devices cpu or --devices lazyjit), one thread per process (the machine has 2 cores:
one per rank). A step is forward, loss, backward (FSDP2's all-gathers and
reduce-scatters), AdamW step, zero_grad and the loss read back (lazyjit's sync). Per
run, the median step time over the steps after the warm-up, the slower of the two
ranks; per system, the median over rounds, rounds alternating the systems. lazyjit
runs with LAZYJIT_BACKGROUND_COMPILE=off: its first two steps compile (step 2: AdamW's
state is new), every later step runs the compiled program.
"""
import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
WORKER = REPO / "tests/python/fsdp2_worker.py"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return "CPU model unknown"


def run(system, a):
    device = "cpu" if system == "eager" else "lazyjit"
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, PYTHONPATH=str(REPO / "python"), OMP_NUM_THREADS="1", LAZYJIT_NUM_THREADS="1",
                   LAZYJIT_CACHE="off", LAZYJIT_BACKGROUND_COMPILE="off", GLOO_SOCKET_IFNAME="lo",
                   TORCH_CPP_LOG_LEVEL="ERROR")
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--nnodes=1",
               "--master_addr=127.0.0.1", f"--master_port={free_port()}", str(WORKER), d, "--devices", device,
               "--steps", str(a.steps), "--threads", "1", "--layers", str(a.layers), "--hidden", str(a.hidden),
               "--seq", str(a.seq), "--batch", str(a.batch)]
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=REPO, timeout=1800)
        if p.returncode != 0:
            raise SystemExit(f"{system} failed:\n{p.stderr[-4000:]}")
        ranks = [torch.load(Path(d) / f"rank{r}_{device}.pt") for r in range(2)]
    out = []
    for res in ranks:
        times = res["times_ms"]
        row = {"median_ms": statistics.median(times[a.warm:]), "first_ms": times[0]}
        if res["counters"]:
            c = res["counters"]
            n = len(c) - a.warm
            per = lambda k: (c[-1][k] - c[a.warm - 1][k]) / n  # noqa: E731  per timed step
            row.update(compiles=c[-1]["compiles"], warm_compiles=c[-1]["compiles"] - c[a.warm - 1]["compiles"],
                       syncs=per("syncs"), programs=per("graphs_executed"), start_ms=per("collective_start_ms"),
                       wait_ms=per("collective_wait_ms"), program_ms=per("execute_ms"))
        out.append(row)
    return max(out, key=lambda r: r["median_ms"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warm", type=int, default=5)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--batch", type=int, default=4, help="sequences per rank")
    ap.add_argument("--out", default=str(REPO / "bench/results/fsdp2.md"))
    a = ap.parse_args()
    load_before = os.getloadavg()
    runs = {"eager": [], "lazyjit": []}
    for r in range(a.rounds):
        for system in ("eager", "lazyjit"):
            res = run(system, a)
            runs[system].append(res)
            print(f"round {r + 1} {system}: {res['median_ms']:.1f} ms/step", flush=True)
    load_after = os.getloadavg()
    e = statistics.median(x["median_ms"] for x in runs["eager"])
    lz = statistics.median(x["median_ms"] for x in runs["lazyjit"])
    med = lambda k: statistics.median(x[k] for x in runs["lazyjit"])  # noqa: E731
    last = runs["lazyjit"][-1]
    rounds = ", ".join(f"{x['median_ms']:.0f}/{y['median_ms']:.0f}" for x, y in zip(runs["eager"], runs["lazyjit"]))
    # A round's two runs follow each other, under about the same load from other work.
    ratio = statistics.median(x["median_ms"] / y["median_ms"] for x, y in zip(runs["eager"], runs["lazyjit"]))
    scenario = (f"Llama {a.layers} layers, hidden {a.hidden}, seq {a.seq}, batch {a.batch}/rank, "
                f"vocab 128, random weights")
    lines = [f"2-process FSDP2 training step (fully_shard per decoder layer and at the root, AdamW), eager FSDP2 "
             f"on CPU tensors against FSDP2 on lazyjit; medians of {a.rounds} rounds ({a.steps} steps each, the "
             f"first {a.warm} not timed)", "",
             "| scenario | eager FSDP2 ms/step | lazyjit FSDP2 ms/step | speedup | speedup per round (median) "
             "| rounds (eager/lazyjit ms) "
             "| lazyjit compiles (run) | compiles in timed steps | syncs/step | programs/step "
             "| program ms/step | collective start ms/step | collective wait ms/step | eager first step ms "
             "| lazyjit first step ms |",
             "|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
             f"| {scenario} | {e:.1f} | {lz:.1f} | {e / lz:.2f}x | {ratio:.2f}x | {rounds} | {last['compiles']} "
             f"| {last['warm_compiles']} | {last['syncs']:.0f} | {last['programs']:.0f} | {med('program_ms'):.1f} "
             f"| {med('start_ms'):.2f} | {med('wait_ms'):.2f} "
             f"| {statistics.median(x['first_ms'] for x in runs['eager']):.0f} "
             f"| {statistics.median(x['first_ms'] for x in runs['lazyjit']):.0f} |",
             "",
             f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on this {os.cpu_count()}-core machine "
             f"({cpu_model()}; torch {torch.__version__}), one thread per rank, 2 ranks; load average (1 min) "
             f"{load_before[0]:.1f} before, {load_after[0]:.1f} after (other work shared the machine: read the two "
             "systems against each other, not as absolute times). The step time is the slower rank's; \"speedup per "
             "round\" is the median of the rounds' eager/lazyjit ratios, each from two runs back to back. The "
             "columns after \"rounds\" are "
             "lazyjit's: compiles over its last run, per process; per timed step, the syncs and programs run, the "
             "time in programs (collectives included; the rest of a step is Python, FSDP2's and the model's, and "
             "recording), the time its programs spent starting collectives and waiting for them (for Gloo and the "
             "other rank), medians over rounds. The first step compiles on lazyjit (LAZYJIT_BACKGROUND_COMPILE=off)."]
    Path(a.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
