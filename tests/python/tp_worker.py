"""One rank of tests/python/test_tp.py, started by torchrun (2 processes, Gloo on the
loopback). Saves what it saw to OUTDIR/rank<R>_<MODE>.pt; the test compares each rank's
lazyjit run with the same rank's CPU run.

    python -m torch.distributed.run --nproc_per_node=2 ... tp_worker.py OUTDIR MODE [PART ...]

MODE lazyjit: lazyjit is loaded (the accelerator transformers and DeviceMesh see),
init_process_group("cpu:gloo,lazyjit:lazyjit"). MODE cpu: started with
TORCH_DEVICE_BACKEND_AUTOLOAD=0 and lazyjit never imported, so the accelerator is the CPU
and the same code runs on CPU tensors over Gloo: the reference.

Parts:
- hf: transformers' from_pretrained(OUTDIR/model, tp_plan="auto") of a small Llama (the
  test saved it), then greedy generate; transformers chooses the device and the mesh.
- compile: a tensor-parallel MLP (ColwiseParallel then RowwiseParallel) trained STEPS
  SGD steps; on lazyjit under torch.compile(backend="lazyjit"), on the CPU eager.

A part that fails records its traceback and the rank exits at once with status 1 (the
other rank would wait forever in a collective this one never makes; torchrun stops it).
"""
import os
import sys
import time
import traceback
import warnings

# The mode is argv[2] when run; test_tp.py imports this module for its constants.
MODE = sys.argv[2] if __name__ == "__main__" else None
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "python"))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

if MODE == "lazyjit":
    import lazyjit  # noqa: E402,F401

warnings.filterwarnings("ignore")
PROMPT = [[1, 5, 9, 3, 17, 2]]
NEW_TOKENS = 5
STEPS = 4
LR = 0.05


def counters():
    if MODE != "lazyjit":
        return {}
    m = lazyjit.metrics()
    dynamo_stats = sys.modules["lazyjit.dynamo"].stats() if "lazyjit.dynamo" in sys.modules else {}
    return {k: m[k] for k in ("compiles", "graphs_executed", "syncs", "cache_misses")} | {
        "collectives": sum(v["count"] for v in lazyjit.distributed.collectives().values()),
        "device_calls": dynamo_stats.get("device_calls", 0)}


def part_hf(out, outdir):
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM.from_pretrained(os.path.join(outdir, "model"), tp_plan="auto")
    params = dict(model.named_parameters())
    w = params["model.layers.0.mlp.up_proj.weight"]
    out["hf_placement"] = {"device": str(w.device), "type": type(w).__name__,
                           "placements": str(getattr(w, "placements", None)),
                           "local_shape": list(w.to_local().shape) if hasattr(w, "to_local") else None}
    ids = torch.tensor(PROMPT, device=w.device)
    before = counters()
    gen = model.generate(ids, max_new_tokens=NEW_TOKENS, do_sample=False, output_logits=True,
                         return_dict_in_generate=True, pad_token_id=0)
    after = counters()
    out["hf_counters"] = {k: after[k] - before[k] for k in before}
    out["hf_tokens"] = gen.sequences.cpu()
    out["hf_logits"] = torch.stack([t.float().cpu() for t in gen.logits])


def mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8))


def part_compile(out, outdir):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    dev = MODE
    mesh = init_device_mesh(dev, (dist.get_world_size(),))
    m = parallelize_module(mlp().to(dev), mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    fwd = torch.compile(m, backend="lazyjit") if MODE == "lazyjit" else m
    opt = torch.optim.SGD(m.parameters(), lr=LR)
    g = torch.Generator().manual_seed(1)  # tensor parallel: every rank gets the same batch
    losses, steps = [], []
    for _ in range(STEPS):
        x = torch.randn(4, 8, generator=g).to(dev)
        before = counters()
        loss = fwd(x).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
        if MODE == "lazyjit":
            lazyjit.wait_for_compiles()
        after = counters()
        steps.append({k: after[k] - before[k] for k in before})
    out["compile_losses"] = torch.tensor(losses)
    out["compile_params"] = {n: p.to_local().detach().cpu() for n, p in m.named_parameters()}
    out["compile_counters"] = steps
    if MODE == "lazyjit":
        from torch._dynamo.utils import counters as dynamo
        out["compile_dynamo"] = {"graphs": dynamo["stats"]["unique_graphs"],
                                 "graph_breaks": sum(dynamo["graph_break"].values())}


def main():
    outdir, parts = sys.argv[1], sys.argv[3:]
    dist.init_process_group("cpu:gloo,lazyjit:lazyjit" if MODE == "lazyjit" else "gloo")
    rank = dist.get_rank()
    out = {"rank": rank, "accelerator": str(torch._C._get_accelerator())}
    status = 0
    t0 = time.time()
    try:
        for p in parts:
            globals()[f"part_{p}"](out, outdir)
        dist.barrier()
    except Exception:  # noqa: BLE001
        out["error"] = traceback.format_exc()[-4000:]
        status = 1
    out["seconds"] = time.time() - t0
    torch.save(out, os.path.join(outdir, f"rank{rank}_{MODE}.pt"))
    # No interpreter shutdown (tests/python/dist_worker.py says why: a Gloo thread
    # dropping a finished work while Python finalizes aborts the process).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


if __name__ == "__main__":
    main()
