"""Every collective DTensor and FSDP2 use, on the "lazyjit" c10d backend (issue 52, item 2):
scatter, gather, reduce, send/recv, all_to_all(_single), coalesced all-gathers and
reduce-scatters (AVG), the functional forms, and DTensor on top of them.

torchrun starts 2 processes on loopback with init_process_group("cpu:gloo,lazyjit:lazyjit");
each runs tests/python/dist_collectives_worker.py, which compares every result on lazyjit
tensors with the same collective run on CPU tensors over Gloo in the same process (each
rank against its own CPU run, never against the other rank). One torchrun run serves
every test here.
"""
import pytest

from dist_launch import run_ranks

PARTS = ["rooted", "coalesced", "functional", "program", "dropped", "errors", "dtensor"]


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist_collectives")
    return run_ranks("dist_collectives_worker.py", out, PARTS)


ROOTED = ["scatter", "scatter_into_empty", "gather", "reduce_sum", "reduce_max", "reduce_product", "reduce_avg",
          "send_recv", "batch_isend_irecv", "all_to_all_single_even", "all_to_all_single_uneven", "all_to_all", "step_mode"]
COALESCED = ["all_gather_into_tensor_coalesced", "all_gather_into_tensor_coalesced_device",
             "reduce_scatter_tensor_coalesced_sum", "reduce_scatter_tensor_coalesced_avg",
             "reduce_scatter_tensor_coalesced_avg_device", "pg_reduce_scatter_tensor_coalesced_avg",
             "reduce_scatter_tensor_premul_sum", "all_reduce_premul_sum_tensor_factor"]
FUNCTIONAL = ["all_to_all_single", "all_to_all_single_op", "all_gather_into_tensor_coalesced", "all_reduce_coalesced",
              "reduce_scatter_tensor_sum", "reduce_scatter_tensor_avg", "reduce_scatter_tensor_coalesced_sum",
              "reduce_scatter_tensor_coalesced_avg", "all_reduce_avg", "all_gather_into_tensor"]


@pytest.mark.parametrize("name", ROOTED)
def test_rooted_and_point_to_point_equal_gloo_on_cpu(ranks, name):
    for r in ranks:
        assert r["rooted"][name] is True, (r["rank"], name, r["rooted"][name])


@pytest.mark.parametrize("name", COALESCED)
def test_coalesced_equal_gloo_on_cpu(ranks, name):
    for r in ranks:
        assert r["coalesced"][name] is True, (r["rank"], name, r["coalesced"][name])


@pytest.mark.parametrize("name", FUNCTIONAL)
def test_functional_equal_gloo_on_cpu(ranks, name):
    for r in ranks:
        assert r["functional"][name] is True, (r["rank"], name, r["functional"][name])


def test_rooted_collectives_run_inside_one_program(ranks):
    # scatter -> all_to_all_single -> gather -> reduce with work between them: one sync,
    # one program holding the 4 collectives; warm, the same step compiles nothing.
    for r in ranks:
        p = r["program"]
        assert p["value"] is True, p["value"]
        for run in p["runs"]:
            assert run["syncs"] == 1 and run["graphs_executed"] == 1 and run["collectives"] == 4, p["runs"]
        for run in p["runs"][1:]:
            assert run["compiles"] == 0 and run["cache_misses"] == 0, p["runs"]


def test_collectives_a_rank_drops_still_run_in_order(ranks):
    # Rank 1 keeps nothing of its gather, reduce and send before its next sync; dropped
    # there only, rank 0's gather would meet rank 1's all_reduce. A collective is never
    # dead code (graph_ir/effects.h); more cases: test_distributed_effects.py.
    for r in ranks:
        assert r["dropped"] is True, (r["rank"], r["dropped"])


def test_bad_input_raises_a_clear_error(ranks):
    for r in ranks:
        e = r["errors"]
        # Which rank sends is only known once the program runs: c10d's own error names it.
        assert "does not support recvAnysource" in e["recv_any_source"], e
        assert "_c10d_functional::isend on lazyjit tensors is not supported" in e["isend_functional"], e
        assert "split sizes [3, 3] do not add up to dim 0 (4)" in e["a2a_bad_splits"], e
        assert "the output has sizes [5], what arrives [4]" in e["a2a_bad_output"], e
        assert "split sizes [1, 2] do not add up to dim 0 (4)" in e["a2a_functional_bad_splits"], e


def test_dtensor_shard_compute_redistribute_full_tensor(ranks):
    # distribute_tensor(Shard(0)) (a scatter) -> tanh(2x+1) -> Shard(1) (all_to_all) ->
    # Replicate (all_gather) -> full_tensor(): each step equal to the same on a CPU mesh.
    for r in ranks:
        d = r["dtensor"]
        assert d["round_trip"] is True, d["round_trip"]
        assert d["round_trip_counters"]["collectives"] >= 3, d


def test_tensor_parallel_mlp_forward_backward(ranks):
    # parallelize_module: ColwiseParallel then RowwiseParallel; the output and every
    # parameter's local gradient equal the same on a CPU mesh. A warm step is one program
    # that compiles nothing.
    for r in ranks:
        d = r["dtensor"]
        assert d["tp_mlp"] is True, d["tp_mlp"]
        warm = d["tp_warm_counters"]
        assert warm["compiles"] == 0 and warm["cache_misses"] == 0 and warm["graphs_executed"] == 1, warm
