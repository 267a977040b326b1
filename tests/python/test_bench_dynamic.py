"""Results unchanged for bench/dynamic_shapes.py's workloads, at tiny sizes: the MLP block
over varying batch sizes and greedy GPT-2 generation (two prompts of different lengths in
one process) give on lazyjit what they give in eager PyTorch. Uses the benchmark's own
builders, so the benchmark and this test cannot drift apart."""
import importlib.util
import sys
from pathlib import Path

import pytest
import torch

_SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "dynamic_shapes.py"
_spec = importlib.util.spec_from_file_location("lazyjit_bench_dynamic", _SCRIPT)
bench = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = bench
_spec.loader.exec_module(bench)


def test_batch_sizes_fixed_shuffle():
    sizes = bench.batch_sizes(40)
    assert sorted(sizes) == list(range(1, 41)) and sizes != sorted(sizes)
    assert sizes == bench.batch_sizes(40)


@pytest.mark.parametrize("system", ["lazyjit", "lazyjit_compile"])
def test_varying_batch_matches_eager(system):
    torch._dynamo.reset()
    want = bench.run_varying_batch("eager", 3)["outputs"]
    got = bench.run_varying_batch(system, 3)["outputs"]
    assert [o.shape[0] for o in got] == bench.batch_sizes(3)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)


@pytest.mark.parametrize("system", ["lazyjit", "lazyjit_compile"])
def test_generate_matches_eager(system):
    torch._dynamo.reset()
    gens = ((12, 3), (17, 3))
    want = bench.run_generate("eager", gens)["tokens"]
    got = bench.run_generate(system, gens)["tokens"]
    assert [len(t) for t in want] == [15, 20]
    assert got == want
