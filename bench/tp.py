"""A 2-process tensor-parallel MLP training step: eager TP on CPU tensors (Gloo) against
the same TP on lazyjit tensors (init_process_group("cpu:gloo,lazyjit:lazyjit")), and on
lazyjit under torch.compile(backend="lazyjit").

    .venv/bin/python bench/tp.py [--rounds 3] [--steps 20] [--warm 5] [--out bench/results/tp.md]

The model: Linear(1024, 4096) -> GELU -> Linear(4096, 1024), parallelize_module'd with
ColwiseParallel then RowwiseParallel over a 2-rank mesh of the system's device; batch 64
(the same on both ranks, as tensor parallel wants). A step is zero_grad, forward, MSE
loss, backward, AdamW step, and the loss read back (loss.item(): lazyjit's sync). Each
system runs in its own 2 processes (torchrun, Gloo on loopback), one thread per process.
Per run, the median step time over the steps after the first `warm`, the slower of the
two ranks; per system, the median over rounds, rounds alternating the systems.
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
SYSTEMS = ("eager", "lazyjit", "lazyjit_compile")

WORKER = r"""
import json, os, sys, time, statistics, torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
system, steps, warm, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
torch.set_num_threads(1)
dev = "cpu"
if system != "eager":
    import lazyjit
    dev = "lazyjit"
dist.init_process_group("gloo" if system == "eager" else "cpu:gloo,lazyjit:lazyjit")
rank = dist.get_rank()
mesh = init_device_mesh(dev, (dist.get_world_size(),))
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 1024))
model = parallelize_module(model.to(dev), mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
fwd = torch.compile(model, backend="lazyjit") if system == "lazyjit_compile" else model
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
x = torch.randn(64, 1024).to(dev); y = torch.randn(64, 1024).to(dev)

def counters():
    if dev == "cpu":
        return {}
    m = lazyjit.metrics()
    c = lazyjit.distributed.collectives()
    return {"syncs": m["syncs"], "programs": m["graphs_executed"], "compiles": m["compiles"],
            "collectives": sum(v["count"] for v in c.values()),
            "collective_ms": sum(v["total_ms"] for v in c.values()) + lazyjit.distributed.collective_wait_ms()}

times, losses = [], []
for i in range(steps):
    if i == warm:
        if dev != "cpu":
            lazyjit.wait_for_compiles()
        before = counters()
    t0 = time.perf_counter()
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(fwd(x), y)
    loss.backward()
    opt.step()
    losses.append(loss.item())
    times.append((time.perf_counter() - t0) * 1e3)
after = counters()
res = {"median_ms": statistics.median(times[warm:]), "first_ms": times[0], "last_loss": losses[-1]}
res.update({k: (after[k] - before[k]) / (steps - warm) for k in after})
with open(f"{out}/rank{rank}.json", "w") as f:
    json.dump(res, f)
dist.destroy_process_group()
os._exit(0)  # no interpreter shutdown: see tests/python/dist_worker.py (a Gloo thread may still free a work)
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(system, steps, warm):
    with tempfile.TemporaryDirectory() as d:
        script = Path(d) / "worker.py"
        script.write_text(WORKER)
        env = dict(os.environ, PYTHONPATH=str(REPO / "python"), OMP_NUM_THREADS="1", LAZYJIT_NUM_THREADS="1",
                   LAZYJIT_CACHE="off", GLOO_SOCKET_IFNAME="lo", TORCH_CPP_LOG_LEVEL="ERROR")
        if system == "eager":
            env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"  # eager's processes never load lazyjit
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--nnodes=1",
               "--master_addr=127.0.0.1", f"--master_port={free_port()}", str(script), system,
               str(steps), str(warm), d]
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=REPO, timeout=1200)
        if p.returncode != 0:
            raise SystemExit(f"{system} failed:\n{p.stderr[-4000:]}")
        ranks = [json.loads((Path(d) / f"rank{r}.json").read_text()) for r in range(2)]
    return max(ranks, key=lambda r: r["median_ms"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warm", type=int, default=5)
    ap.add_argument("--out", default=str(REPO / "bench/results/tp.md"))
    a = ap.parse_args()
    load_before = os.getloadavg()
    runs = {s: [] for s in SYSTEMS}
    for r in range(a.rounds):
        for system in SYSTEMS:
            res = run(system, a.steps, a.warm)
            runs[system].append(res)
            print(f"round {r + 1} {system}: {res['median_ms']:.1f} ms/step, loss {res['last_loss']:.6f}", flush=True)
    load_after = os.getloadavg()
    eager = statistics.median(x["median_ms"] for x in runs["eager"])
    lines = [f"2-process tensor-parallel MLP training step (1024-4096-1024, ColwiseParallel then RowwiseParallel, "
             f"AdamW, batch 64), eager TP on CPU tensors against the same TP on lazyjit; medians of {a.rounds} "
             f"rounds ({a.steps} steps each, the first {a.warm} not timed)", "",
             "| system | ms/step | eager / system | rounds ms | first step ms | syncs/step | programs/step "
             "| collectives/step | compiles/step | collective ms/step (mean) | last loss |",
             "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for system in SYSTEMS:
        rs = runs[system]
        ms = statistics.median(x["median_ms"] for x in rs)
        first = statistics.median(x["first_ms"] for x in rs)
        last = rs[-1]
        per = " | ".join(f"{last[k]:.2f}" if k == "collective_ms" else f"{last[k]:g}"
                         for k in ("syncs", "programs", "collectives", "compiles", "collective_ms")) \
            if "syncs" in last else "- | - | - | - | -"
        rounds = ", ".join(f"{x['median_ms']:.0f}" for x in rs)
        lines.append(f"| {system} | {ms:.1f} | {eager / ms:.2f}x | {rounds} "
                     f"| {first:.0f} | {per} | {last['last_loss']:.6f} |")
    lines += ["", f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on a {os.cpu_count()}-core "
              f"x86-64 machine (the CPU, no GPU), one thread per rank, 2 ranks; load average (1 min) "
              f"{load_before[0]:.1f} before, {load_after[0]:.1f} after (other work shared the machine: read the "
              "systems against each other, not as absolute times). The per-step columns are lazyjit's, from its "
              "last run, over the timed steps, per rank (the slower rank's); \"collective ms/step\" is the time its "
              "programs spent starting collectives and waiting for them (for Gloo and for the other rank), the mean over "
              "the timed steps: a step where one rank waits long for the other weighs in it."]
    Path(a.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
