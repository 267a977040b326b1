"""Collectives and point-to-point ops are never dead, and run in the order the
program issued them (issue 56, items 1 and 2; docs/distributed.md, "Order").

torchrun starts 2 processes on loopback (tests/python/dist_effects_worker.py, Gloo,
a 30 s process-group timeout so that a collective paired with the wrong one fails
rather than hangs). In each case the ranks run different code: one drops the result
of a collective (all_reduce, all_gather, reduce_scatter, broadcast, all_to_all, a
functional all_reduce, a receive; or raises before reading it), or mixes sends,
receives and barriers on lazyjit tensors with ones on CPU tensors. Each rank compares
what it read on lazyjit tensors with the same program on CPU tensors over Gloo.
"""
import pytest

from dist_launch import run_ranks

DROPPED = ["all_reduce", "all_reduce_async", "all_gather", "all_gather_into_tensor", "reduce_scatter",
           "reduce_scatter_tensor", "broadcast", "all_to_all_single", "all_to_all", "functional_all_reduce",
           "send_recv", "recv_dropped"]
OTHERS = ["raise_and_catch", "equal_all_reduces", "equal_functional_all_reduces", "isend_wait_then_cpu_recv", "isend_wait_then_barrier",
          "isend_barrier_then_wait", "irecv_wait_then_cpu_send", "batch_isend_irecv_then_cpu",
          "collective_then_barrier"]
CASES = [f"dropped_{d}" for d in DROPPED] + OTHERS


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist_effects")
    return run_ranks("dist_effects_worker.py", out, CASES, timeout=240)


@pytest.mark.parametrize("name", CASES)
def test_equals_the_same_program_on_cpu_tensors(ranks, name):
    for r in ranks:
        assert r[name] is True, (r["rank"], name, r[name])
