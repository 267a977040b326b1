"""Cold against warm start: the first step of a fresh process with an empty
on-disk compile cache, with the cache an earlier process filled, and with an
empty disk cache but a Redis remote tier an earlier process filled.

    .venv/bin/python bench/warm_start.py [--rounds 5] [--out bench/results/warm_start.md] [--host "..."]

Scenarios: the demo's MLP block (forward, batch 256, width 256) and a
transformers Llama training step (hidden 256, 4 layers, random weights: forward,
loss, backward, AdamW step). Each measurement is its own process: eager's first
step, lazyjit cold (a new cache directory), lazyjit warm (the directory the cold
run filled), lazyjit cold + Redis (a new directory, an empty Redis: it compiles
and writes back), lazyjit Redis-warm (a new directory, the Redis the previous
run filled: "another machine"), in this order in every round. Every lazyjit row
is measured twice, each with its own cache directory (and Redis contents):

  first step ms              LAZYJIT_BACKGROUND_COMPILE on (the default): what a
                             user sees. A graph that misses every cache runs op by
                             op while its program compiles on the worker thread,
                             so a cold row's compile is NOT in this time.
  step + compile ms (bg off) LAZYJIT_BACKGROUND_COMPILE=off: the step waits for
                             its compiles; in the cold rows this is the cold compile.

The two modes alternate which goes first from round to round. The Redis rows
sign entries (LAZYJIT_CACHE_SECRET, which the remote tier needs); the server is
a redis-server this script starts on a free loopback port (without one on PATH
those rows are left out). Times are the wall time of the first step, results
read back to the CPU. The counts come from lazyjit.metrics() read after
lazyjit.wait_for_compiles() (with the background compile on, a program may
still be compiling when the step returns: counting then would race the worker
thread). Medians over rounds. The markdown keeps what follows a `<!-- notes -->`
line of the file it replaces.
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
if str(REPO / "bench") not in sys.path:
    sys.path.insert(0, str(REPO / "bench"))
from host import build_stamp, loadavg, run_built  # noqa: E402

COUNTERS = ("llvm_compiles", "compiles", "background_syncs", "disk_hits", "disk_writes", "disk_errors",
            "remote_hits", "remote_writes", "remote_errors", "remote_ms", "compile_ms")

STEP = f"COUNTERS = {COUNTERS!r}\n" + r"""
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
    # after the compile thread: counting before it would race a compile still running
    r["waited_for"] = lazyjit.wait_for_compiles()
    m = lazyjit.metrics()
    r.update({k: m[k] for k in COUNTERS})
print(json.dumps(r))
"""


NOTES_MARK = "<!-- notes -->"


def measure(system, scenario, cache_dir=None, remote=None, background="on"):
    """One fresh process; `background`: LAZYJIT_BACKGROUND_COMPILE for it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAZYJIT_")}
    env["PYTHONPATH"] = str(REPO / "python")
    env["LAZYJIT_BACKGROUND_COMPILE"] = background
    if cache_dir:
        env["LAZYJIT_CACHE_DIR"] = str(cache_dir)
    if remote:
        env["LAZYJIT_REMOTE_CACHE"] = remote
        env["LAZYJIT_CACHE_SECRET"] = "warm-start-bench"
    p, stamp = run_built([sys.executable, "-c", STEP, system, scenario], env=env, cwd=REPO)
    if p.returncode != 0:
        raise RuntimeError(f"{system} {scenario}: {p.stderr[-2000:]}")
    return dict(json.loads(p.stdout.strip().splitlines()[-1]), build=stamp)


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


def lazyjit_runs(scenario, d, redis, background):
    """(row name, thunk) for the lazyjit rows in one mode, with cache directories of their own."""
    d = d.with_name(f"{d.name}-bg{background}")
    runs = [("lazyjit cold", lambda: measure("lazyjit", scenario, d, background=background)),
            ("lazyjit warm", lambda: measure("lazyjit", scenario, d, background=background))]
    if redis:
        runs += [("lazyjit cold + Redis",
                  lambda: (redis.flush(), measure("lazyjit", scenario, d.with_name(d.name + "-r1"), redis.url,
                                                  background))[1]),
                 ("lazyjit Redis-warm",
                  lambda: measure("lazyjit", scenario, d.with_name(d.name + "-r2"), redis.url, background))]
    return runs


def render(rows, rounds, meta, notes=""):
    """rows: (scenario, name) -> {"on": [results], "off": [results]} ("off" absent for eager)."""
    def med(rs, k):
        return statistics.median(x[k] for x in rs) if rs and k in rs[0] else None

    def f(x, fmt="{:.0f}"):
        return "–" if x is None else fmt.format(x)

    def both(on, off, k, fmt="{:.0f}"):  # one figure when both modes agree
        a, b = f(med(on, k), fmt), f(med(off, k), fmt)
        return a if a == b or not off else f"{a} / {b}"

    lines = [f"# Cold vs warm start: medians of {rounds} rounds (each measurement a fresh process)", "",
             f"- Date: {meta['date']}; host: {meta['host']}. Load average (/proc/loadavg, 1/5/15 min) at "
             f"start {meta['load_start']}, at end {meta['load_end']}. lazyjit library (build) mtimes "
             f"seen: {', '.join(meta['builds'])}.",
             "- **first step ms**: LAZYJIT_BACKGROUND_COMPILE on (the default): what a user sees; a graph "
             "that misses every cache runs op by op while its program compiles on the worker thread, so "
             "the cold rows' compile is *not* in it.",
             "- **step + compile ms (bg off)**: LAZYJIT_BACKGROUND_COMPILE=off in that process: the step "
             "waits for its compiles (in the cold rows: the cold compile). Each mode has cache "
             "directories (and Redis contents) of its own; the modes alternate which runs first.",
             "- Counts from `lazyjit.metrics()` after `lazyjit.wait_for_compiles()` (a compile still "
             "running on the worker is counted, not raced); `a / b` = background on / off where they "
             "differ. *op by op* = `background_syncs` (graphs run op by op while their program "
             "compiled); *remote ms* = time spent talking to Redis.",
             "",
             "| scenario | system | first step ms | step + compile ms (bg off) | llvm compiles | op by op | "
             "disk hits | remote hits | disk errors | remote errors | remote ms |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for (scenario, name), by in rows.items():
        on, off = by.get("on", []), by.get("off", [])
        remote = "Redis" in name
        lz = name != "eager"
        lines.append(
            f"| {scenario} | {name} | {f(med(on, 'first_step_ms'), '{:.1f}')} | "
            f"{f(med(off, 'first_step_ms'), '{:.1f}')} | "
            + " | ".join(both(on, off, k) if lz else "–" for k in ("llvm_compiles", "background_syncs", "disk_hits"))
            + f" | {both(on, off, 'remote_hits') if remote else '–'} | {both(on, off, 'disk_errors') if lz else '–'} | "
            f"{both(on, off, 'remote_errors') if remote else '–'} | "
            f"{both(on, off, 'remote_ms', '{:.1f}') if remote else '–'} |")
    text = "\n".join(lines) + "\n"
    return text + ("\n" + NOTES_MARK + "\n" + notes if notes else "")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "warm_start.md"))
    ap.add_argument("--host", default="not described (--host)",
                    help="how the host was used during the run, e.g. shared with builds (written to the header)")
    a = ap.parse_args()
    meta = {"date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "host": a.host, "load_start": loadavg()}
    rows = {}
    with tempfile.TemporaryDirectory(prefix="lazyjit-warm-") as tmp:
        redis = Redis(tmp) if shutil.which("redis-server") else None
        try:
            for r in range(a.rounds):
                for scenario in ("mlp", "llama_train"):
                    d = Path(tmp) / f"{scenario}-{r}"
                    print(f"[warm_start] round {r + 1}/{a.rounds} {scenario}", file=sys.stderr, flush=True)
                    rows.setdefault((scenario, "eager"), {}).setdefault("on", []).append(measure("eager", scenario))
                    for background in (("off", "on") if r % 2 == 0 else ("on", "off")):
                        for name, fn in lazyjit_runs(scenario, d, redis, background):
                            rows.setdefault((scenario, name), {}).setdefault(background, []).append(fn())
        finally:
            if redis:
                redis.stop()
    meta["load_end"] = loadavg()
    meta["builds"] = sorted({x["build"] for by in rows.values() for rs in by.values() for x in rs} - {"?"}) \
        or [build_stamp()]
    out = Path(a.out)
    old = out.read_text() if out.exists() else ""
    notes = old.split(NOTES_MARK + "\n", 1)[1] if NOTES_MARK + "\n" in old else ""
    text = render(rows, a.rounds, meta, notes)
    out.write_text(text)
    out.with_suffix(".json").write_text(json.dumps(
        {"meta": meta, "rounds": a.rounds,
         "rows": [{"scenario": sc, "system": name, **by} for (sc, name), by in rows.items()]}, indent=1))
    print(text)


if __name__ == "__main__":
    main()
