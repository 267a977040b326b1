"""One rank of tests/python/test_distributed.py, started by torchrun (2 processes,
Gloo on loopback). Writes what it saw to OUTDIR/rank<R>.json; the test compares.

    python -m torch.distributed.run --nproc_per_node=2 ... dist_worker.py OUTDIR [PART ...]

Parts: collectives (each collective on lazyjit tensors against Gloo on CPU
tensors, a collective inside one program, errors), wait_order (where a program
waits for two collectives in flight), avg_ops (what ReduceOp.AVG records),
ddp_mlp and ddp_gpt2
(AdamW): DDP on lazyjit for 4 steps against one eager process
training on the whole batch. LAZYJIT_TEST_DIST_BACKEND picks init_process_group's backend
("cpu:gloo,lazyjit:lazyjit" by default).
"""
import copy
import json
import os
import sys
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "python"))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.distributed._functional_collectives as fc  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

import lazyjit  # noqa: E402
from dist_rank import run_rank  # noqa: E402

DEV = "lazyjit"
warnings.filterwarnings("ignore", category=FutureWarning)  # c10d's deprecation notes for *_into_tensor


def counters():
    m = lazyjit.metrics()
    return {k: m[k] for k in ("compiles", "graphs_executed", "syncs", "cache_misses")} | {
        "collectives": sum(v["count"] for v in lazyjit.distributed.collectives().values())}


def delta(a, b):
    return {k: b[k] - a[k] for k in a}


def same(a, b):
    a, b = a.cpu(), b.cpu()
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)


def part_collectives(rank, world, out):
    res = {}
    g = dist.group.WORLD
    base = torch.arange(12, dtype=torch.float32).reshape(4, 3) * (rank + 1) - 5

    def both(fn):
        """fn(tensor_factory) on lazyjit and on CPU; both results as CPU tensors."""
        lz = fn(lambda t: t.clone().to(DEV))
        cp = fn(lambda t: t.clone())
        return lz, cp

    def all_reduce(op):
        def f(mk):
            t = mk(base)
            dist.all_reduce(t, op=op)
            return t.cpu()
        return f

    for name, op in [("sum", dist.ReduceOp.SUM), ("max", dist.ReduceOp.MAX), ("min", dist.ReduceOp.MIN),
                     ("product", dist.ReduceOp.PRODUCT)]:
        lz, cp = both(all_reduce(op))
        res[f"all_reduce_{name}"] = same(lz, cp)
    # lazyjit records AVG as a sum and a division; compared with the CPU sum / world.
    t = base.clone().to(DEV)
    dist.all_reduce(t, op=dist.ReduceOp.AVG)
    c = base.clone()
    dist.all_reduce(c)
    res["all_reduce_avg"] = bool(torch.allclose(t.cpu(), c / world))
    # Integer all_reduce.
    lz, cp = both(lambda mk: (lambda t: (dist.all_reduce(t), t.cpu())[1])(mk(torch.arange(5) + rank)))
    res["all_reduce_int64"] = same(lz, cp)

    def all_gather(mk):
        t = mk(base)
        outs = [mk(torch.zeros(4, 3)) for _ in range(world)]
        dist.all_gather(outs, t)
        return torch.stack([o.cpu() for o in outs])
    res["all_gather"] = same(*both(all_gather))

    def all_gather_into_tensor(mk):
        t = mk(base)
        o = mk(torch.zeros(4 * world, 3))
        dist.all_gather_into_tensor(o, t)
        return o.cpu()
    res["all_gather_into_tensor"] = same(*both(all_gather_into_tensor))

    def reduce_scatter_tensor(mk):
        t = mk(torch.arange(8 * world, dtype=torch.float32).reshape(2 * world, 4) + rank)
        o = mk(torch.zeros(2, 4))
        dist.reduce_scatter_tensor(o, t)
        return o.cpu()
    # Gloo on CPU has reduce_scatter_tensor only through its own implementation;
    # compare with the sum of what every rank holds, sliced.
    lz = reduce_scatter_tensor(lambda t: t.clone().to(DEV))
    full = sum(torch.arange(8 * world, dtype=torch.float32).reshape(2 * world, 4) + r for r in range(world))
    res["reduce_scatter_tensor"] = same(lz, full[2 * rank:2 * rank + 2])

    def reduce_scatter(mk):
        ins = [mk(torch.full((3,), float(rank * 10 + i))) for i in range(world)]
        o = mk(torch.zeros(3))
        dist.reduce_scatter(o, ins)
        return o.cpu()
    lz = reduce_scatter(lambda t: t.clone().to(DEV))
    res["reduce_scatter"] = same(lz, torch.full((3,), float(sum(r * 10 + rank for r in range(world)))))

    def broadcast(mk):
        t = mk(base)
        dist.broadcast(t, src=1)
        return t.cpu()
    res["broadcast"] = same(*both(broadcast))

    # Functional collectives on lazyjit tensors (what traced code calls).
    f = fc.all_reduce(base.clone().to(DEV), "sum", g)
    c = base.clone()
    dist.all_reduce(c)
    res["functional_all_reduce"] = same(fc.wait_tensor(f), c)
    f = fc.all_gather_tensor(base.clone().to(DEV), 0, g)
    c = torch.zeros(4 * world, 3)
    dist.all_gather_into_tensor(c, base.clone())
    res["functional_all_gather"] = same(f, c)

    # barrier(): without device_ids c10d sends it to the CPU backend (Gloo) at
    # once; on the lazyjit device it first runs what this rank recorded.
    lazyjit.sync()
    pending = (base.clone().to(DEV) * 3).relu()
    before = counters()
    dist.barrier()
    res["barrier_cpu_syncs"] = delta(before, counters())["syncs"]
    before = counters()
    dist.barrier(device_ids=[0])
    res["barrier_lazyjit_syncs"] = delta(before, counters())["syncs"]
    res["barrier_value"] = same(pending, (base.clone() * 3).relu())
    # A collective inside one program: work before and after it, one sync.
    lazyjit.sync()
    before = counters()
    x = base.clone().to(DEV)
    y = (x * 2).relu()
    dist.all_reduce(y)
    z = (y + 1).sum(0)
    z_cpu = z.cpu()
    res["inside_one_program"] = delta(before, counters())
    xc = (base.clone() * 2).relu()
    dist.all_reduce(xc)
    res["inside_one_program_value"] = same(z_cpu, (xc + 1).sum(0))
    # The same again: the program is cached.
    before = counters()
    y = (base.clone().to(DEV) * 2).relu()
    dist.all_reduce(y)
    (y + 1).sum(0).cpu()
    res["inside_one_program_again"] = delta(before, counters())
    res["report"] = lazyjit.metrics_report()

    # Step mode runs the collective at once.
    lazyjit.set_mode("step")
    try:
        t = base.clone().to(DEV)
        dist.all_reduce(t)
        c = base.clone()
        dist.all_reduce(c)
        res["step_mode"] = same(t, c)
    finally:
        lazyjit.set_mode("lazy")

    # Bad input: clear errors, nothing sent (every rank raises the same).
    errors = {}
    for name, fn in [
        ("premul_sum", lambda: torch.ops._c10d_functional.all_reduce(base.to(DEV), "premul_sum", g.group_name)),
        ("recv_any_source", lambda: dist.recv(torch.zeros(4, device=DEV))),
        ("isend_functional", lambda: torch.ops._c10d_functional.isend(torch.ones(4, device=DEV), 1 - rank, 0,
                                                                       g.group_name)),
        ("no_group", lambda: torch.ops._c10d_functional.all_reduce(base.to(DEV), "sum", "no-such-group")),
        ("avg_int", lambda: dist.all_reduce(torch.ones(3, dtype=torch.int64, device=DEV), op=dist.ReduceOp.AVG)),
    ]:
        try:
            fn()
            errors[name] = None
        except Exception as e:  # noqa: BLE001
            errors[name] = f"{type(e).__name__}: {e}".splitlines()[0]
    res["errors"] = errors
    lazyjit.sync()
    dist.barrier()
    out["collectives"] = res



def part_wait_order(rank, world, out):
    """Two all_reduces in flight in one program, each read by its own step: where
    the program waits for each (the trace's "collective wait" spans: the value
    and the step that waited, -1 the run's end) and when the steps ran."""
    import tempfile
    base = torch.arange(64, dtype=torch.float32) * (rank + 1) - 7
    lazyjit.sync()
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "trace.json")
        with lazyjit.trace(path):
            a = base.clone().to(DEV) * 2
            b = base[:35].clone().to(DEV).reshape(5, 7) + 1
            dist.all_reduce(a)
            dist.all_reduce(b)
            c = (a * 3).sum()          # reads the first all_reduce only
            e = (b.relu() * 5).sum(1)  # reads the second only
            c_cpu, e_cpu = c.cpu(), e.cpu()
        with open(path) as f:
            events = json.load(f)["traceEvents"]
    ac, bc = base.clone() * 2, base[:35].clone().reshape(5, 7) + 1
    dist.all_reduce(ac)
    dist.all_reduce(bc)
    res = {"values": same(c_cpu, (ac * 3).sum()) and same(e_cpu, (bc.relu() * 5).sum(1))}
    spans = [e for e in events if e.get("ph") == "X" and e.get("cat") == "execute"]
    res["waits"] = [{"value": e["args"]["value"], "step": e["args"]["step"], "ts": e["ts"]}
                    for e in spans if e["name"] == "collective wait"]
    res["steps"] = [{"step": e["args"]["step"], "name": e["name"], "kind": e["args"].get("kind"), "ts": e["ts"],
                     "end": e["ts"] + e["dur"]} for e in spans if "step" in e.get("args", {}) and
                    e["name"] != "collective wait"]
    out["wait_order"] = res


def part_avg_ops(rank, world, out):
    """ReduceOp.AVG (FSDP2's reduce-scatters ask for it): what a program records for
    reduce_scatter_tensor and all_reduce (the lazy op hook: the graph's ops in
    recording order) and the values, against Gloo's AVG on CPU tensors."""
    x = torch.arange(48, dtype=torch.float32).reshape(8, 6) * (rank + 1) / 7 - 3
    lazyjit.sync()
    seen = []
    h = lazyjit.add_op_hook(lambda op, ins, outs: seen.append(op), lazy=True)
    try:
        rs = torch.empty(4, 6, device=DEV)
        dist.reduce_scatter_tensor(rs, x.clone().to(DEV), op=dist.ReduceOp.AVG)
        ar = x.clone().to(DEV)
        dist.all_reduce(ar, op=dist.ReduceOp.AVG)
        rs_cpu, ar_cpu = rs.cpu(), ar.cpu()
    finally:
        h.remove()
    rs_ref, ar_ref = torch.empty(4, 6), x.clone()
    dist.reduce_scatter_tensor(rs_ref, x.clone(), op=dist.ReduceOp.AVG)
    dist.all_reduce(ar_ref, op=dist.ReduceOp.AVG)
    out["avg_ops"] = {"ops": seen, "values": same(rs_cpu, rs_ref) and same(ar_cpu, ar_ref)}

def _train(model, opt, batches, loss_fn, per_step=None, shard=None):
    """Trains on `batches`; returns each step's loss. With shard=(rank, world) (the
    eager oracle), it returns with them each step's loss on that rank's part of the
    batch, under the same weights (what the rank's DDP replica computes locally)."""
    losses, shard_losses = [], []
    for x, y in batches:
        before = counters() if per_step is not None else None
        opt.zero_grad()
        loss = loss_fn(model, x, y)
        if shard is not None:
            with torch.no_grad():
                rank, world = shard
                n = x.shape[0] // world
                part = slice(rank * n, (rank + 1) * n)
                shard_losses.append(loss_fn(model, x[part], None if y is None else y[part]).item())
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if per_step is not None:
            per_step.append(delta(before, counters()))
    return (losses, shard_losses) if shard is not None else losses


def _ddp_compare(rank, world, make_model, make_batches, loss_fn, steps, lr, adamw=False, **ddp_args):
    torch.manual_seed(0)
    ref = make_model()
    model = copy.deepcopy(ref)
    # Rank 1 starts from other weights: DDP's broadcast from rank 0 must fix them.
    if rank != 0:
        with torch.no_grad():
            for p in model.parameters():
                p.add_(1.0)
    batches = make_batches(steps)
    # The oracle: one eager process, the whole batch.
    def make_opt(params):
        if adamw:
            return torch.optim.AdamW(params, lr=lr)
        return torch.optim.SGD(params, lr=lr, momentum=0.9)
    opt_ref = make_opt(ref.parameters())
    ref_losses, ref_local_losses = _train(ref, opt_ref, batches, loss_fn, shard=(rank, world))
    # DDP on lazyjit: this rank's half of each batch.
    lazyjit.sync()
    start = counters()
    model = model.to(DEV)
    ddp = DDP(model, **ddp_args)
    opt = make_opt(ddp.parameters())

    def shard(t):
        if t is None:
            return None
        n = t.shape[0] // world
        return t[rank * n:(rank + 1) * n].to(DEV)
    per_step = []
    init = delta(start, counters())
    rebuilt_at_construction = ddp._has_rebuilt_buckets
    losses = _train(ddp, opt, [(shard(x), shard(y)) for x, y in batches], loss_fn, per_step)
    # Each rank's own losses, before any all_reduce: its half of the batch, compared
    # with the eager oracle's loss on the same half (ref_local_losses). The mean of
    # the ranks' losses is the whole batch's loss (compared with ref_losses).
    local_losses = list(losses)
    lt = torch.tensor(losses)
    dist.all_reduce(lt)
    lt /= world
    err = max((p.detach().cpu() - q.detach()).abs().max().item()
              for p, q in zip(model.parameters(), ref.parameters()))
    scale = max(q.detach().abs().max().item() for q in ref.parameters())
    return {"losses": lt.tolist(), "ref_losses": ref_losses, "local_losses": local_losses,
            "ref_local_losses": ref_local_losses, "max_param_err": err, "param_scale": scale,
            "per_step": per_step, "init": init, "rebuilt_at_construction": rebuilt_at_construction,
            "buckets": len(ddp.reducer._get_zeros_like_grad_buckets()),
            "sync_reasons": lazyjit.metrics()["sync_reasons"],
            "fallbacks": lazyjit.metrics()["fallbacks"]}


def _regression_batches(seed, batch):
    """make_batches for _ddp_compare: (x [batch, 16], y [batch, 4]) per step."""
    def make_batches(steps):
        g = torch.Generator().manual_seed(seed)
        return [(torch.randn(batch, 16, generator=g), torch.randn(batch, 4, generator=g)) for _ in range(steps)]
    return make_batches


def _mse(m, x, y):
    return torch.nn.functional.mse_loss(m(x), y)


def part_ddp_mlp(rank, world, out):
    def make_model():
        # 512 wide: each step's loss.item() syncs the whole step whatever
        # tracer/read_apart.cpp decides (its forward alone is over 2**17 elements).
        return torch.nn.Sequential(torch.nn.Linear(16, 512), torch.nn.GELU(), torch.nn.Linear(512, 512),
                                   torch.nn.Tanh(), torch.nn.Linear(512, 4))

    lazyjit.reset_metrics()
    out["ddp_mlp"] = _ddp_compare(rank, world, make_model, _regression_batches(seed=1, batch=32), _mse, steps=4,
                                  lr=1e-3, adamw=True, bucket_cap_mb=0.01)  # small buckets: several per step
    out["ddp_mlp"]["report"] = lazyjit.metrics_report()


def part_ddp_gpt2(rank, world, out):
    from transformers import GPT2Config, GPT2LMHeadModel
    from transformers.utils import logging as hf_logging
    hf_logging.set_verbosity_error()

    def make_model():
        cfg = GPT2Config(n_embd=64, n_layer=2, n_head=4, vocab_size=100, n_positions=32, bos_token_id=0,
                         eos_token_id=0, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
        return GPT2LMHeadModel(cfg)

    def make_batches(steps):
        g = torch.Generator().manual_seed(2)
        return [(torch.randint(0, 100, (4, 16), generator=g), None) for _ in range(steps)]

    def loss_fn(m, x, _):
        return m(input_ids=x, labels=x).loss
    lazyjit.reset_metrics()
    # AdamW, as transformers trains: SGD with momentum would make step 2 a second program
    # (its momentum buffers are created at step 1, then updated: different code), with or
    # without DDP.
    out["ddp_gpt2"] = _ddp_compare(rank, world, make_model, make_batches, loss_fn, steps=4, lr=1e-3, adamw=True,
                                   bucket_cap_mb=0.05)


class _Branchy(torch.nn.Module):
    """An MLP with a head the loss never uses: DDP needs find_unused_parameters."""

    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.Tanh(), torch.nn.Linear(64, 4))
        self.unused_head = torch.nn.Linear(64, 3)

    def forward(self, x):
        return self.body(x)


def part_ddp_unused(rank, world, out):
    # find_unused_parameters=True: the reducer marks the unused head's gradients ready
    # itself and all-reduces which parameters each rank used, through a pinned host
    # buffer (tracer/pinned_memory.cpp).
    lazyjit.reset_metrics()
    out["ddp_unused"] = _ddp_compare(rank, world, _Branchy, _regression_batches(seed=3, batch=8), _mse, steps=4,
                                     lr=1e-3, adamw=True, find_unused_parameters=True)


def main():
    parts = sys.argv[2:] or ["collectives", "ddp_mlp", "ddp_gpt2"]
    run_rank(globals(), sys.argv[1], parts, os.environ.get("LAZYJIT_TEST_DIST_BACKEND", "cpu:gloo,lazyjit:lazyjit"))


if __name__ == "__main__":
    main()
