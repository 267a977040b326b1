"""Cold against warm start: the first step of a fresh process with an empty
on-disk compile cache, with the cache an earlier process filled, and with an
empty disk cache but a Redis remote tier an earlier process filled.

    .venv/bin/python bench/warm_start.py [--rounds 5] [--out bench/results/warm_start.md]

Scenarios: the demo's MLP block (forward, batch 256, width 256) and a
transformers Llama training step (hidden 256, 4 layers, random weights: forward,
loss, backward, AdamW step). Each measurement is its own process: eager's first
step, lazyjit cold (a new cache directory), lazyjit warm (the directory the cold
run filled), lazyjit cold + Redis (a new directory, an empty Redis: it compiles
and writes back), lazyjit Redis-warm (a new directory, the Redis the previous
run filled: "another machine"), in this order in every round. The Redis rows
sign entries (LAZYJIT_CACHE_SECRET, which the remote tier needs); the server is
a redis-server this script starts on a free loopback port (without one on PATH
those rows are left out). "first step ms" is the wall time of the first step,
results read back to the CPU; the counts come from lazyjit.metrics() after it.
Medians over rounds.
"""
import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

STEP = r"""
import json, sys, time, torch
system, scenario = sys.argv[1], sys.argv[2]
dev = "cpu" if system == "eager" else "lazyjit"
if dev == "lazyjit":
    import lazyjit
torch.manual_seed(0)
if scenario == "mlp":
    sys.path.insert(0, "examples")
    from demo import MLPBlock
    model = MLPBlock(256).to(dev)
    x = torch.randn(256, 256).to(dev)
    def step():
        with torch.no_grad():
            return model(x).cpu()
else:
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(hidden_size=256, intermediate_size=688, num_hidden_layers=4, num_attention_heads=4,
                      num_key_value_heads=4, vocab_size=1000, max_position_embeddings=128)
    model = LlamaForCausalLM(cfg).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.randint(0, 1000, (2, 32)).to(dev)
    def step():
        opt.zero_grad()
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        return loss.detach().cpu()
t0 = time.perf_counter()
out = step()
ms = (time.perf_counter() - t0) * 1e3
r = {"first_step_ms": ms}
if dev == "lazyjit":
    m = lazyjit.metrics()
    r.update(llvm_compiles=m["llvm_compiles"], disk_hits=m["disk_hits"], disk_errors=m["disk_errors"],
             remote_hits=m["remote_hits"], remote_errors=m["remote_errors"], remote_ms=m["remote_ms"])
print(json.dumps(r))
"""


def measure(system, scenario, cache_dir=None, remote=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAZYJIT_")}
    env["PYTHONPATH"] = str(REPO / "python")
    if cache_dir:
        env["LAZYJIT_CACHE_DIR"] = str(cache_dir)
    if remote:
        env["LAZYJIT_REMOTE_CACHE"] = remote
        env["LAZYJIT_CACHE_SECRET"] = "warm-start-bench"
    out = subprocess.run([sys.executable, "-c", STEP, system, scenario], env=env, cwd=REPO, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


class Redis:
    """redis-server on a free loopback port, no persistence; flush() empties it."""

    def __init__(self, tmp):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.proc = subprocess.Popen([shutil.which("redis-server"), "--port", str(self.port), "--bind", "127.0.0.1",
                                      "--save", "", "--appendonly", "no", "--dir", tmp],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.url = f"redis://127.0.0.1:{self.port}/0"
        for _ in range(200):
            try:
                if self.command(b"PING") == b"+PONG":
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("redis-server did not start")

    def command(self, *args):
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as s:
            s.sendall(b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args))
            return s.makefile("rb").readline().rstrip()

    def flush(self):
        assert self.command(b"FLUSHALL") == b"+OK"

    def stop(self):
        self.proc.kill()
        self.proc.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "warm_start.md"))
    a = ap.parse_args()
    rows = {}
    with tempfile.TemporaryDirectory(prefix="lazyjit-warm-") as tmp:
        redis = Redis(tmp) if shutil.which("redis-server") else None
        try:
            for r in range(a.rounds):
                for scenario in ("mlp", "llama_train"):
                    d = Path(tmp) / f"{scenario}-{r}"
                    print(f"[warm_start] round {r + 1}/{a.rounds} {scenario}", file=sys.stderr, flush=True)
                    runs = [("eager", lambda: measure("eager", scenario)),
                            ("lazyjit cold", lambda: measure("lazyjit", scenario, d)),
                            ("lazyjit warm", lambda: measure("lazyjit", scenario, d))]
                    if redis:
                        runs += [("lazyjit cold + Redis", lambda: (redis.flush(),
                                                                   measure("lazyjit", scenario, d.with_name(d.name + "-r1"),
                                                                           redis.url))[1]),
                                 ("lazyjit Redis-warm", lambda: measure("lazyjit", scenario, d.with_name(d.name + "-r2"),
                                                                        redis.url))]
                    for name, fn in runs:
                        rows.setdefault((scenario, name), []).append(fn())
        finally:
            if redis:
                redis.stop()
    lines = [f"Cold vs warm start, medians of {a.rounds} rounds (each a fresh process)", "",
             "| scenario | system | first step ms | llvm compiles | disk hits | remote hits | disk errors | "
             "remote errors | remote ms |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for (scenario, name), rs in rows.items():
        med = lambda k: statistics.median(x[k] for x in rs) if k in rs[0] else None
        f = lambda x, fmt="{:.0f}": "–" if x is None else fmt.format(x)
        remote = "Redis" in name
        lines.append(f"| {scenario} | {name} | {f(med('first_step_ms'), '{:.1f}')} | {f(med('llvm_compiles'))} | "
                     f"{f(med('disk_hits'))} | {f(med('remote_hits') if remote else None)} | "
                     f"{f(med('disk_errors'))} | {f(med('remote_errors') if remote else None)} | "
                     f"{f(med('remote_ms') if remote else None, '{:.1f}')} |")
    text = "\n".join(lines)
    Path(a.out).write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
