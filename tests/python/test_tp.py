"""Tensor parallel on the lazyjit device (issue 52): transformers' tp_plan="auto" and
torch.compile(backend="lazyjit") of a parallelize_module'd MLP, two ranks over Gloo on the
loopback (tests/python/tp_worker.py under torchrun).

Each rank's lazyjit run is compared with the same rank's run of the same script on CPU
tensors, never with the other rank. The CPU run is its own torchrun with lazyjit not
loaded (TORCH_DEVICE_BACKEND_AUTOLOAD=0): transformers picks the tensor-parallel device
from the accelerator (torch._C._get_accelerator()), which is lazyjit whenever lazyjit is
loaded, so one process cannot run both.

Tolerances: float32, the same weights and inputs; the logits differ by the order of sums
in lazyjit's fused reductions and matmuls (measured: 1.0e-7 of values up to 0.51), the
TP MLP's losses by 7.5e-9 and its parameters by 1.5e-8 after 4 SGD steps (atol 1e-6 kept
with margin). The tokens are equal. A dropped or wrong all-reduce moves the logits by
whole partial sums.
"""
import os
import socket
import subprocess
import sys

import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import tp_worker  # noqa: E402

WORLD = 2
PARTS = ["hf", "compile"]


def _save_llama(path):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                      tie_word_embeddings=False)
    LlamaForCausalLM(cfg).save_pretrained(path)


def _run(out, mode):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"), LAZYJIT_CACHE="off", OMP_NUM_THREADS="1",
               GLOO_SOCKET_IFNAME="lo", TORCH_CPP_LOG_LEVEL="ERROR", LAZYJIT_BACKGROUND_COMPILE="off")
    if mode == "cpu":
        env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={WORLD}", "--nnodes=1",
           "--master_addr=127.0.0.1", f"--master_port={port}", os.path.join(HERE, "tp_worker.py"), str(out),
           mode, *PARTS]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    paths = [out / f"rank{r}_{mode}.pt" for r in range(WORLD)]
    ranks = [torch.load(path) if path.exists() else None for path in paths]
    # A rank that failed saved its traceback; torchrun then stopped the other.
    for r in ranks:
        assert r is None or "error" not in r, f"{mode} rank {r['rank']}:\n{r['error']}"
    for path, r in zip(paths, ranks):
        assert r is not None, f"{path.name} not written\n{p.stdout[-2000:]}\n{p.stderr[-6000:]}"
    assert p.returncode == 0, p.stderr[-6000:]
    return ranks


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = tmp_path_factory.mktemp("tp")
    _save_llama(out / "model")
    return {mode: _run(out, mode) for mode in ("cpu", "lazyjit")}


def test_transformers_tp_plan_auto_loads_and_generates_as_on_cpu(runs):
    for rank in range(WORLD):
        cpu, lazy = runs["cpu"][rank], runs["lazyjit"][rank]
        assert cpu["accelerator"] == "cpu" and lazy["accelerator"] == "lazyjit"
        # The weights are sharded DTensors on the lazyjit device, as on the CPU.
        placement = lazy["hf_placement"]
        assert placement["device"].startswith("lazyjit") and placement["type"] == "DTensor", placement
        assert {k: v for k, v in placement.items() if k != "device"} == \
            {k: v for k, v in cpu["hf_placement"].items() if k != "device"}
        assert placement["local_shape"] == [128 // WORLD, 64], placement
        assert torch.equal(lazy["hf_tokens"], cpu["hf_tokens"]), (rank, lazy["hf_tokens"], cpu["hf_tokens"])
        assert lazy["hf_tokens"].shape == (1, len(tp_worker.PROMPT[0]) + tp_worker.NEW_TOKENS)
        torch.testing.assert_close(lazy["hf_logits"], cpu["hf_logits"], rtol=1e-5, atol=1e-5,
                                   msg=lambda m: f"rank {rank}'s logits: {m}")
        # The row-wise layers' all-reduces ran on the lazyjit backend.
        assert lazy["hf_counters"]["collectives"] > 0, lazy["hf_counters"]


def test_torch_compile_of_a_tp_mlp_trains_as_cpu_eager_tp(runs):
    for rank in range(WORLD):
        cpu, lazy = runs["cpu"][rank], runs["lazyjit"][rank]
        torch.testing.assert_close(lazy["compile_losses"], cpu["compile_losses"], rtol=1e-5, atol=1e-6,
                                   msg=lambda m: f"rank {rank}'s losses: {m}")
        assert lazy["compile_params"].keys() == cpu["compile_params"].keys()
        for name, want in cpu["compile_params"].items():
            torch.testing.assert_close(lazy["compile_params"][name], want, rtol=1e-5, atol=1e-6,
                                       msg=lambda m: f"rank {rank}'s {name}: {m}")
        steps = lazy["compile_counters"]
        # Dynamo captured the model (DTensor's ops traced into its graphs) and handed it
        # to the lazyjit backend.
        assert lazy["compile_dynamo"]["graphs"] >= 1, lazy["compile_dynamo"]
        # A warm step runs the forward and the backward each as one captured program
        # on the device's tensors (the forward holds the row-wise layer's all-reduce;
        # the input needs no gradient, so the column-wise layer's backward has none),
        # the loss and the SGD step recorded around them; it compiles nothing.
        for s in steps[2:]:
            assert s["compiles"] == 0 and s["cache_misses"] == 0, steps
            assert s["device_calls"] == 2 and s["collectives"] == 1, steps
            assert s["syncs"] <= 2 and s["graphs_executed"] == s["syncs"] + 2, steps


def test_local_rank_names_the_one_lazyjit_device():
    # What transformers does on rank 1 under torchrun (distributed/utils.py
    # _bind_local_device): set_device_index(LOCAL_RANK). Any other index still raises.
    code = ("import torch, lazyjit\n"
            "torch.accelerator.set_device_index(1)\n"
            "assert torch.accelerator.current_device_index() == 0\n"
            "assert torch.ones(2, device='lazyjit').device == torch.device('lazyjit', 0)\n"
            "try:\n"
            "    torch.accelerator.set_device_index(2)\n"
            "except RuntimeError as e:\n"
            "    print(e)\n")
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"), LOCAL_RANK="1")
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "invalid device ordinal 2: the lazyjit device has one device, index 0 " \
           "(or 1, this process's LOCAL_RANK)" in p.stdout, p.stdout
