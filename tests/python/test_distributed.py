"""torch.distributed on lazyjit tensors (issue 15, item 1): the "lazyjit" c10d backend.

torchrun starts 2 processes on loopback with init_process_group("cpu:gloo,lazyjit:lazyjit");
each runs tests/python/dist_worker.py and writes what it saw. Eager PyTorch is the oracle:
collectives on lazyjit tensors against Gloo on CPU tensors, DDP training on lazyjit against
one eager process training on the whole batch (each rank's own loss against that process's
loss on the rank's half of the batch, the ranks' mean against its whole-batch loss, each
rank's final weights against its weights). One torchrun run serves every test here.
"""
import importlib.util

import pytest

from dist_launch import run_ranks


def _torchrun(out, parts=(), backend=None):
    return run_ranks("dist_worker.py", out, parts, {"LAZYJIT_TEST_DIST_BACKEND": backend} if backend else None)


HAVE_TRANSFORMERS = importlib.util.find_spec("transformers") is not None
MODELS = ["ddp_mlp", "ddp_gpt2"]


def _part(r, model):
    """Rank r's results for `model`; transformers is installed by scripts/setup.sh, so
    its absence fails ddp_gpt2 rather than skipping it."""
    if model == "ddp_gpt2" and not HAVE_TRANSFORMERS:
        pytest.fail("transformers is not installed: run scripts/setup.sh")
    return r[model]


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    parts = ["collectives", "wait_order", "avg_ops", "ddp_mlp", "ddp_unused"] + (["ddp_gpt2"] if HAVE_TRANSFORMERS else [])
    return _torchrun(tmp_path_factory.mktemp("dist"), parts)


@pytest.fixture(scope="module")
def ranks_lazyjit_only(tmp_path_factory):
    # init_process_group("lazyjit"): the backend's group brings its own Gloo for the CPU.
    return _torchrun(tmp_path_factory.mktemp("dist_lazyjit"), ["collectives"], backend="lazyjit")


COLLECTIVES = ["all_reduce_sum", "all_reduce_max", "all_reduce_min", "all_reduce_product", "all_reduce_avg",
               "all_reduce_int64", "all_gather", "all_gather_into_tensor", "reduce_scatter_tensor",
               "reduce_scatter", "broadcast", "functional_all_reduce", "functional_all_gather", "step_mode"]


@pytest.mark.parametrize("name", COLLECTIVES)
def test_collective_on_lazyjit_equals_gloo_on_cpu(ranks, name):
    for r in ranks:
        assert r["collectives"][name] is True, (r["rank"], name)


def test_barrier(ranks):
    for r in ranks:
        c = r["collectives"]
        # dist.barrier() goes to Gloo at once; dist.barrier(device_ids=[0]) is the lazyjit
        # backend's: it runs what was recorded (one sync), then Gloo's barrier.
        assert (c["barrier_cpu_syncs"], c["barrier_lazyjit_syncs"], c["barrier_value"]) == (0, 1, True), c


def test_backend_alone_serves_cpu_and_lazyjit_tensors(ranks_lazyjit_only):
    for r in ranks_lazyjit_only:
        c = r["collectives"]
        assert [n for n in COLLECTIVES if c[n] is not True] == [], c
        assert c["inside_one_program_again"]["compiles"] == 0


def test_collective_is_a_step_inside_one_program(ranks):
    for r in ranks:
        c = r["collectives"]
        # x*2 -> relu -> all_reduce -> +1 -> sum: one sync, one program, the collective in it.
        d = c["inside_one_program"]
        assert d["syncs"] == 1 and d["graphs_executed"] == 1 and d["collectives"] == 1, d
        assert c["inside_one_program_value"] is True
        # The same work again hits the cache.
        d = c["inside_one_program_again"]
        assert d == {"compiles": 0, "graphs_executed": 1, "syncs": 1, "cache_misses": 0, "collectives": 1}, d
        assert "collectives on lazyjit tensors (" in c["report"]
        assert "all_reduce" in c["report"].split("collectives on lazyjit tensors", 1)[1].splitlines()[0]



def test_a_step_waits_only_for_the_collectives_it_reads(ranks):
    # a and b all_reduced, both in flight; one step reads a, a later one b. The step
    # reading a waits for a alone and runs while b may still be in flight; b is waited
    # for where it is read (before, any read waited for every collective in flight).
    for r in ranks:
        w = r["wait_order"]
        assert w["values"] is True
        waits = w["waits"]
        assert len(waits) == 2, waits
        first, second = sorted(waits, key=lambda x: x["ts"])
        assert first["step"] != second["step"], ("both waited before one step", waits, w["steps"])
        # The step that waited first ran, and ended, before the second wait began.
        reader = [s for s in w["steps"] if s["step"] == first["step"]]
        assert reader and reader[0]["end"] <= second["ts"], (waits, w["steps"])


def test_avg_is_a_division_and_a_sum_in_flight(ranks):
    # ReduceOp.AVG: the collective records a sum (a collective in flight, as any other)
    # and a division by the group size, a node of the graph: nothing waits inside the
    # collective's start. A group of 2 (a power of two) divides the input first (exact).
    # The values are Gloo's AVG on CPU tensors, exactly.
    for r in ranks:
        a = r["avg_ops"]
        assert a["values"] is True
        ops = a["ops"]
        colls = [i for i, op in enumerate(ops) if op.startswith("lazyjit_c10d::")]
        assert [ops[i] for i in colls] == ["lazyjit_c10d::reduce_scatter_tensor", "lazyjit_c10d::all_reduce"], ops
        for i in colls:  # recorded right before the collective
            assert i > 0 and ops[i - 1].startswith("aten::div"), ("no division before", ops[i], ops)

def test_bad_input_raises_a_clear_error(ranks):
    for r in ranks:
        e = r["collectives"]["errors"]
        assert "reduce op 'premul_sum' is not supported on lazyjit tensors" in e["premul_sum"], e
        # all_to_all and the rest: tests/python/test_distributed_collectives.py.
        assert "Backend lazyjit does not support recvAnysource" in e["recv_any_source"], e
        assert "_c10d_functional::isend on lazyjit tensors is not supported" in e["isend_functional"], e
        assert "no-such-group" in e["no_group"], e
        assert "avg needs a floating-point tensor" in e["avg_int"], e


@pytest.mark.parametrize("model", MODELS)
def test_ddp_matches_one_process_on_the_whole_batch(ranks, model):
    for r in ranks:
        d = _part(r, model)
        _assert_matches_eager(d)
        assert d["buckets"] >= 2, d["buckets"]  # gradients travel in several buckets
    # The ranks trained on different halves: their own losses differ, so the per-rank
    # comparison above says what the mean alone could not.
    assert ranks[0][model]["local_losses"] != ranks[1][model]["local_losses"]


def _assert_matches_eager(d):
    # This rank's own losses (before any all_reduce) against the eager process's loss
    # on the same half of each batch under the same weights: a rank that computed its
    # half wrong, or started from its own weights (DDP's broadcast from rank 0 not
    # done: rank 1 starts 1.0 off), fails here.
    assert d["local_losses"] == pytest.approx(d["ref_local_losses"], rel=1e-4, abs=1e-5), (
        d["local_losses"], d["ref_local_losses"])
    # The ranks' mean against the eager process's loss on the whole batch.
    assert d["losses"] == pytest.approx(d["ref_losses"], rel=1e-4, abs=1e-5), (d["losses"], d["ref_losses"])
    # This rank's final weights against the eager process's.
    assert d["max_param_err"] <= 1e-4 * max(1.0, d["param_scale"]), d["max_param_err"]


@pytest.mark.parametrize("model", MODELS)
def test_ddp_steady_steps_compile_nothing(ranks, model):
    # DDP would put every gradient in one bucket for step 1 and rebuild its buckets before
    # step 2 (a new program to compile); on lazyjit the buckets are final at construction
    # (python/lazyjit/distributed.py: _fix_ddp_buckets), so step 1's program is every
    # step's: from step 2 on nothing compiles, each step is one program, cut only by
    # loss.item().
    for r in ranks:
        d = _part(r, model)
        steps = d["per_step"]
        assert steps[0]["compiles"] >= 1 and steps[0]["syncs"] == 1, steps
        for s in steps[1:]:
            assert s["compiles"] == 0 and s["cache_misses"] == 0, (steps, d["sync_reasons"])
            assert s["syncs"] == 1 and s["graphs_executed"] == 1, steps
        assert d["rebuilt_at_construction"] is True, d
        item = [k for k in d["sync_reasons"] if k.startswith("item() @ ") and "dist_worker.py" in k]
        assert item and d["sync_reasons"][item[0]] >= len(steps), d["sync_reasons"]


def test_ddp_finds_unused_parameters(ranks):
    # find_unused_parameters=True (a head the loss never uses): DDP trains as one eager
    # process does. DDP then keeps its construction buckets (no rebuild), but its first
    # step records a graph the later steps do not repeat (lazyjit's recompile log: the
    # step's inputs differ), so step 2 compiles once more; from step 3 on nothing compiles.
    for r in ranks:
        d = r["ddp_unused"]
        _assert_matches_eager(d)
        assert d["rebuilt_at_construction"] is False, d
        for s in d["per_step"][2:]:
            assert s["compiles"] == 0 and s["cache_misses"] == 0 and s["graphs_executed"] == 1, d["per_step"]


@pytest.mark.parametrize("model", MODELS)
def test_ddp_gradient_buckets_run_inside_the_step_program(ranks, model):
    for r in ranks:
        d = _part(r, model)
        for s in d["per_step"]:
            # Every bucket's all_reduce runs inside the step's one program: no graph is cut for them.
            assert s["collectives"] == d["buckets"] and s["graphs_executed"] == 1, (s, d["buckets"])
        assert not d["fallbacks"], d["fallbacks"]
