"""Cold against warm start: the first step of a fresh process with an empty
on-disk compile cache, and with the cache an earlier process filled.

    .venv/bin/python bench/warm_start.py [--rounds 5] [--out bench/results/warm_start.md]

Scenarios: the demo's MLP block (forward, batch 256, width 256) and a
transformers Llama training step (hidden 256, 4 layers, random weights: forward,
loss, backward, AdamW step). Each measurement is its own process: eager's first
step, lazyjit cold (a new cache directory), lazyjit warm (the directory the cold
run filled), alternating in every round. "first step ms" is the wall time of
the first step, results read back to the CPU; "llvm compiles" and "disk hits"
come from lazyjit.metrics() after it. Medians over rounds.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
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
    r.update(llvm_compiles=m["llvm_compiles"], disk_hits=m["disk_hits"], disk_errors=m["disk_errors"])
print(json.dumps(r))
"""


def measure(system, scenario, cache_dir=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAZYJIT_")}
    env["PYTHONPATH"] = str(REPO / "python")
    if cache_dir:
        env["LAZYJIT_CACHE_DIR"] = str(cache_dir)
    out = subprocess.run([sys.executable, "-c", STEP, system, scenario], env=env, cwd=REPO, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "warm_start.md"))
    a = ap.parse_args()
    rows = {}
    with tempfile.TemporaryDirectory(prefix="lazyjit-warm-") as tmp:
        for r in range(a.rounds):
            for scenario in ("mlp", "llama_train"):
                d = Path(tmp) / f"{scenario}-{r}"
                print(f"[warm_start] round {r + 1}/{a.rounds} {scenario}", file=sys.stderr, flush=True)
                for name, res in (("eager", measure("eager", scenario)),
                                  ("lazyjit cold", measure("lazyjit", scenario, d)),
                                  ("lazyjit warm", measure("lazyjit", scenario, d))):
                    rows.setdefault((scenario, name), []).append(res)
    lines = [f"Cold vs warm start, medians of {a.rounds} rounds (each a fresh process)", "",
             "| scenario | system | first step ms | llvm compiles | disk hits | disk errors |",
             "|---|---|---:|---:|---:|---:|"]
    for (scenario, name), rs in rows.items():
        med = lambda k: statistics.median(x[k] for x in rs) if k in rs[0] else None
        f = lambda x, fmt="{:.0f}": "–" if x is None else fmt.format(x)
        lines.append(f"| {scenario} | {name} | {f(med('first_step_ms'), '{:.1f}')} | {f(med('llvm_compiles'))} | "
                     f"{f(med('disk_hits'))} | {f(med('disk_errors'))} |")
    text = "\n".join(lines)
    Path(a.out).write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
