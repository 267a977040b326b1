"""One rank of an FSDP2 training run of a small transformers Llama, on the CPU or on
the lazyjit device (tests/python/test_fsdp2.py, bench/fsdp2.py).

    python -m torch.distributed.run --nproc_per_node=2 ... fsdp2_worker.py OUT_DIR \
        [--devices cpu,lazyjit] [--steps 5] [--compile] [--model llama|mlp] [--layers 2 --hidden 64 ...]

Every rank runs each device of ``--devices`` in turn, in this process, from the same
seed: ``fully_shard`` per decoder layer and at the root over a mesh of that device
(Gloo carries the CPU run's collectives and the lazyjit run's), AdamW, each rank its
own batch. It writes OUT_DIR/rank{r}_{device}.pt: the losses, the final parameters
(full tensors, on the CPU), AdamW's first moments, each step's wall time (the loss read
back included: lazyjit's sync), and for lazyjit the counters of ``lazyjit.metrics()``
after each step. Nothing is compared here: the test compares each rank's lazyjit run
with its own CPU run; the bench runs each device in processes of its own.
"""
import argparse
import os
import sys
import time

import torch
import torch.distributed as dist

import lazyjit  # noqa: F401  (registers the device and the "lazyjit" c10d backend)
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

VOCAB, SEQ, BATCH = 128, 16, 2  # BATCH sequences per rank
LR = 1e-3

COUNTERS = ("compiles", "cache_misses", "cache_hits", "syncs", "graphs_executed", "background_syncs",
            "op_by_op_syncs", "shape_binds", "llvm_compiles", "background_compiles", "background_finished",
            "background_taken")


def llama(seed, layers=2, hidden=64, seq=SEQ):
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers.utils import logging as hf_logging
    hf_logging.set_verbosity_error()
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=hidden, intermediate_size=2 * hidden,
                      num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=seq, tie_word_embeddings=False, attn_implementation="eager")
    return LlamaForCausalLM(cfg)


def mlp(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))


def build(kind, device, mesh, layers=2, hidden=64, seq=SEQ):
    """The model on ``device``, sharded: each block (decoder layer, or linear) and the root."""
    if kind == "llama":
        model = llama(0, layers, hidden, seq).to(device)
        blocks = list(model.model.layers)
    else:
        model = mlp(0).to(device)
        blocks = [model[0], model[2]]
    for block in blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def batches(kind, rank, steps, seq=SEQ, batch=BATCH):
    """Each rank's own inputs, step by step (the same on every device)."""
    g = torch.Generator().manual_seed(100 + rank)
    if kind == "llama":
        return [torch.randint(0, VOCAB, (batch, seq), generator=g) for _ in range(steps)]
    return [torch.randn(4, 8, generator=g) for _ in range(steps)]


def loss_of(kind, model, x):
    if kind == "llama":
        return model(input_ids=x, labels=x).loss
    return model(x).square().mean()


def train(kind, device, steps, compile_=False, layers=2, hidden=64, seq=SEQ, batch=BATCH):
    rank = dist.get_rank()
    mesh = init_device_mesh(device, (dist.get_world_size(),))
    model = build(kind, device, mesh, layers, hidden, seq)
    opt = torch.optim.AdamW(model.parameters(), lr=LR)
    fwd = torch.compile(model, backend="lazyjit") if compile_ and device == "lazyjit" else model
    losses, counters, times = [], [], []
    for x in batches(kind, rank, steps, seq, batch):
        t0 = time.perf_counter()
        loss = loss_of(kind, fwd, x.to(device))
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.detach().cpu())  # lazyjit: the step's sync
        times.append((time.perf_counter() - t0) * 1e3)
        if device == "lazyjit":
            m = lazyjit.metrics()
            t = m["timings"]
            counters.append({k: m[k] for k in COUNTERS} | {
                # Time spent starting collectives, and waiting for them (Gloo, the other rank).
                "collective_start_ms": sum(v["total_ms"] for k, v in t.items()
                                           if k.startswith("collective ") and k != "collective wait"),
                "collective_wait_ms": t.get("collective wait", {}).get("total_ms", 0.0),
                "execute_ms": t.get("execute", {}).get("total_ms", 0.0)})  # programs run (waits included)
    params = {n: p.detach().full_tensor().cpu() for n, p in model.named_parameters()}
    # AdamW's first moments: the gradients' scale, which the parameters do not show (Adam's
    # update is nearly invariant to it, so a sum reduced in place of an average hides there).
    moments = {n: opt.state[p]["exp_avg"].full_tensor().cpu() for n, p in model.named_parameters()}
    return {"losses": torch.stack(losses), "params": params, "exp_avg": moments, "counters": counters,
            "times_ms": times}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--devices", default="cpu,lazyjit")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--model", default="llama", choices=("llama", "mlp"))
    ap.add_argument("--compile", action="store_true",
                    help='the lazyjit run under torch.compile(backend="lazyjit"); the CPU run stays eager')
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--seq", type=int, default=SEQ)
    ap.add_argument("--batch", type=int, default=BATCH, help="sequences per rank")
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: as it is)")
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    dist.init_process_group("cpu:gloo,lazyjit:lazyjit")
    rank = dist.get_rank()
    for device in a.devices.split(","):
        res = train(a.model, device, a.steps, a.compile, a.layers, a.hidden, a.seq, a.batch)
        if device == "lazyjit":
            m = lazyjit.metrics()
            res["timings"] = m["timings"]
            res["sync_reasons"] = m["sync_reasons"]
        torch.save(res, os.path.join(a.out, f"rank{rank}_{device}.pt"))
    dist.barrier()
    dist.destroy_process_group()
    sys.stdout.flush()
    os._exit(0)  # no interpreter shutdown: see tests/python/dist_worker.py (a Gloo thread may still free a work)


if __name__ == "__main__":
    main()
