"""The GPU bench's workloads (issue 43, "Bench"): bench/workloads.py's a–g on CUDA,
the same models and shapes, plus d in bfloat16 and a transformers GPT-2 training
step; the order they run in (the issue's done-when ones first), the tolerances
outputs are compared at, per dtype, and the issue's targets (``DONE_WHEN``).
Importable without CUDA; bench/gpu_bench.py runs them.

Sizes: scale "gpu" is the CPU bench's "full" except a and b, which are sized past
the H200's 50 MB L2 (256 MB read and 256 MB written a call, as bench/gpu_chain.py)
so that their bandwidth is the DRAM's; scale "tiny" is the dry run's (--device cpu).

A workload builds ``(fn, args)`` for a device; ``compile_fn`` (torch.compile with a
backend and mode, or None) is applied by the runner to ``fn``, except for workloads
that compile their parts themselves (``compiles_itself``: the training steps compile
the model and ``optimizer.step`` separately, the standard recipe, since ``backward()``
is a graph break; decode compiles the model's ``forward``, generate's loop stays Python).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from workloads import (GeluPrimitive, LayerNorm, LlamaDecode, LlamaLayer, MLPBlock,
                       MLPForward, MLPTrain, MiB, SmallOps, Softmax, TRAIN_STATE_TOL, compare)

# Systems, each run in a process of its own (bench/gpu_bench.py). inductor_ro is
# torch.compile(mode="reduce-overhead"): Inductor with CUDA graphs.
SYSTEMS = ("eager", "lazyjit", "lazyjit_compile", "inductor", "inductor_ro")
CUDA_ONLY_SYSTEMS = {"inductor_ro": "reduce-overhead records CUDA graphs"}
# system -> torch.compile keyword arguments (None: not compiled)
COMPILE_ARGS = {"inductor": {"backend": "inductor"},
                "inductor_ro": {"backend": "inductor", "mode": "reduce-overhead"},
                "lazyjit_compile": {"backend": "lazyjit"}}
SYSTEM_TITLES = {"eager": "CUDA eager", "lazyjit": "lazyjit device route",
                 "lazyjit_compile": 'torch.compile(backend="lazyjit")',
                 "inductor": "Inductor (default)", "inductor_ro": 'Inductor "reduce-overhead"'}

# Outputs are compared with CUDA eager's at these tolerances, by the output's dtype:
# float32 allows other reduction orders and libdevice against CUDA's math library;
# bfloat16 a few units in the last place (2^-8) of values around 1, where one system
# rounds a fused intermediate once and another after every op. Other dtypes (token
# ids) compare exactly. A training step's parameters use TRAIN_STATE_TOL (workloads.py).
TOLERANCE = {torch.float32: {"rtol": 1e-4, "atol": 1e-5},
             torch.float16: {"rtol": 1e-3, "atol": 1e-3},
             torch.bfloat16: {"rtol": 1.6e-2, "atol": 1.6e-2}}


def compare_outputs(got, want, state_tol: dict | None = None, device: str = "cpu") -> dict:
    """Every tensor of `got` against `want` (CPU copies) at TOLERANCE for its dtype, or
    at `state_tol` when given, compared on `device` (the GPU's: a and b's outputs are
    256 MB); never raises. -> {"ok", "max_abs_diff", "error"}."""
    return compare(got, want, device=device,
                   tolerance=lambda dt: state_tol or TOLERANCE.get(dt, {"rtol": 0.0, "atol": 0.0}))


def compare_checkpoint(got, want, device: str = "cpu") -> dict:
    """A training step's (loss, parameters) after the same number of steps: the loss at
    its dtype's tolerance, the parameters at TRAIN_STATE_TOL."""
    a = compare_outputs(got[0], want[0], device=device)
    b = compare_outputs(got[1], want[1], TRAIN_STATE_TOL, device)
    return {"ok": a["ok"] and b["ok"], "max_abs_diff": max(a["max_abs_diff"], b["max_abs_diff"]),
            "error": a["error"] or b["error"]}


def training_step(model, loss_of, compile_fn=None):
    """zero_grad, loss_of(model, *args), backward, AdamW(lr=1e-3, weight_decay=0.01).step(),
    as bench/workloads.py's MLPTrain; compile_fn compiles the model and optimizer.step
    apart. Returns the step, which returns the detached loss. On a GPU (and on the
    lazyjit device) every system's AdamW is capturable=True, the form CUDA-graph
    users write: its step count and bias corrections stay on the device, so a step
    can be one graph (lazyjit bakes scalar arguments into its graphs; the default
    AdamW passes new ones every step). The CPU's AdamW has no capturable form."""
    capturable = next(model.parameters()).device.type != "cpu"
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01, capturable=capturable)
    fwd = compile_fn(model) if compile_fn else model
    opt_step = compile_fn(opt.step) if compile_fn else opt.step

    def train_step(*args):
        opt.zero_grad(set_to_none=True)
        loss = loss_of(fwd, *args)
        loss.backward()
        opt_step()
        return loss.detach()

    train_step.model = model  # for state_to_compare
    return train_step


class GpuWorkload:
    """What the GPU bench adds to a bench/workloads.py workload: sizes for the scales
    "gpu" and "tiny", how many calls a timed sample runs back to back (`calls_per_sample`:
    a call of microseconds is timed over many, reported per call), whether launches
    dominate (`launch_bound`: its ratios are taken from wall time), and building with
    a compile function."""
    launch_bound = False

    def build_for(self, device: str, compile_fn=None):
        """(fn, args) on `device`, `fn` compiled with compile_fn."""
        if self.compiles_itself:
            return self.build(device, compile_fn=compile_fn)
        fn, args = self.build(device)
        return (compile_fn(fn) if compile_fn else fn), args


class Gelu(GpuWorkload, GeluPrimitive):
    sizes = {"gpu": 64 * MiB, "tiny": 4096}
    calls_per_sample = {"gpu": 5, "tiny": 2}


class SoftmaxRows(GpuWorkload, Softmax):
    sizes = {"gpu": (65536, 1024), "tiny": (64, 128)}
    calls_per_sample = {"gpu": 5, "tiny": 2}


class LayerNormRows(GpuWorkload, LayerNorm):
    sizes = {"gpu": (65536, 1024), "tiny": (64, 128)}
    calls_per_sample = {"gpu": 5, "tiny": 2}


class Mlp(GpuWorkload, MLPForward):
    sizes = {"gpu": (256, 1024), "tiny": (8, 32)}
    calls_per_sample = {"gpu": 20, "tiny": 2}


class Llama(GpuWorkload, LlamaLayer):
    sizes = {"gpu": (1, 256, 512, 1376, 8), "tiny": (1, 16, 64, 128, 4)}
    calls_per_sample = {"gpu": 20, "tiny": 2}


class LlamaBF16(Llama):
    """d with the layer's weights, its input and the rotary cos/sin in bfloat16: built
    under torch's default dtype bfloat16, so LlamaLayer.build's own code makes them."""
    key = "d_llama_layer_bf16"
    title = "Llama decoder layer forward (no_grad), bfloat16"

    def build(self, device):
        before = torch.get_default_dtype()
        torch.set_default_dtype(torch.bfloat16)
        try:
            return super().build(device)
        finally:
            torch.set_default_dtype(before)


class MlpTrain(GpuWorkload, MLPTrain):
    sizes = {"gpu": (256, 1024), "tiny": (8, 32)}
    calls_per_sample = {"gpu": 10, "tiny": 2}

    def build(self, device, compile_fn=None):
        batch, width = self.size
        torch.manual_seed(3)
        model = MLPBlock(width).train()
        g = torch.Generator().manual_seed(7)
        x = torch.randn(batch, width, generator=g)
        y = torch.randn(batch, width, generator=g)
        step = training_step(model.to(device), lambda m, x, y: F.mse_loss(m(x), y), compile_fn)
        return step, (x.to(device), y.to(device))


class Small(GpuWorkload, SmallOps):
    launch_bound = True
    sizes = {"gpu": (8, 8), "tiny": (8, 8)}
    calls_per_sample = {"gpu": 200, "tiny": 2}


class Decode(GpuWorkload, LlamaDecode):
    launch_bound = True
    sizes = {"gpu": (4, 256, 688, 4, 8, 32), "tiny": (1, 64, 128, 4, 4, 4)}

    def build(self, device, compile_fn=None):
        """LlamaDecode.build's model and prompt; compile_fn compiles the model's forward."""
        return LlamaDecode.build(self, device, compile_fn=compile_fn)


class GPT2Train(GpuWorkload, MLPTrain):
    """A transformers GPT-2 language-model training step (zero_grad, forward with
    labels, backward, AdamW step), small config, random weights, dropout off."""
    key = "h_gpt2_train"
    title = "transformers GPT-2 training step (fwd+bwd+AdamW)"
    # (layers, n_embd, heads, vocab, batch, seq)
    sizes = {"gpu": (4, 256, 4, 8192, 8, 128), "tiny": (1, 32, 2, 128, 2, 8)}
    calls_per_sample = {"gpu": 5, "tiny": 1}

    def build(self, device, compile_fn=None):
        from transformers import GPT2Config, GPT2LMHeadModel
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        layers, embd, heads, vocab, batch, seq = self.size
        cfg = GPT2Config(n_layer=layers, n_embd=embd, n_head=heads, vocab_size=vocab,
                         n_positions=max(seq, 64), resid_pdrop=0.0, embd_pdrop=0.0,
                         attn_pdrop=0.0)
        torch.manual_seed(11)
        model = GPT2LMHeadModel(cfg).train()
        g = torch.Generator().manual_seed(12)
        ids = torch.randint(0, vocab, (batch, seq), generator=g)
        step = training_step(model.to(device), lambda m, ids: m(input_ids=ids, labels=ids).loss,
                             compile_fn)
        return step, (ids.to(device),)

    def describe(self):
        layers, embd, heads, vocab, batch, seq = self.size
        return (f"{self.title}: {layers} layers, n_embd {embd}, {heads} heads, vocab {vocab}, "
                f"batch {batch} x {seq} tokens, dropout 0")


# The order the bench runs them in: the done-when workloads first.
GPU_WORKLOADS = {w.key: w for w in (Gelu, SoftmaxRows, LayerNormRows, LlamaBF16, MlpTrain, Small,
                                    Decode, GPT2Train, Mlp, Llama)}


def make_gpu_workload(key: str, scale: str):
    return GPU_WORKLOADS[key](scale)


# The "Done when" (H200, medians): (workload, system, measure, at least).
# measure: "vs_eager" / "vs_inductor" / "vs_inductor_ro" = that system's time over
# this one's (on the workload's ratio basis: wall time where launches dominate), or
# "copy_fraction" = GB/s over the same run's device-to-device copy. Where the issue
# names no lazyjit system, both are checked and listed.
BOTH = ("lazyjit", "lazyjit_compile")
DONE_WHEN = (
    [(k, s, m, v) for k in ("a_gelu", "b1_softmax", "b2_layer_norm") for s in BOTH
     for m, v in (("vs_inductor", 1.0), ("copy_fraction", 0.75))]
    + [(k, s, m, v) for k in ("d_llama_layer_bf16", "e_mlp_train") for s in BOTH
       for m, v in (("vs_eager", 1.3), ("vs_inductor", 1.0))]
    + [("f_small_ops", "lazyjit_compile", "vs_eager", 5.0),
       ("f_small_ops", "lazyjit_compile", "vs_inductor_ro", 1.0),
       ("f_small_ops", "lazyjit", "vs_eager", 2.0),
       ("g_decode", "lazyjit", "vs_eager", 1.5),
       ("g_decode", "lazyjit_compile", "vs_eager", 3.0)]
    + [("h_gpt2_train", s, "vs_eager", 1.3) for s in BOTH])
MEASURE_SYSTEM = {"vs_eager": "eager", "vs_inductor": "inductor", "vs_inductor_ro": "inductor_ro"}


def schedule(keys: list[str], systems: list[str]) -> list[tuple[str, str]]:
    """(workload, system) pairs in the order they run, so that a time budget cuts the
    least needed: first, per workload in order, eager (the reference) and the systems
    the done-when names for it; then every other pair, workload by workload (eager
    always before the others of its workload)."""
    pairs = []
    for k in keys:
        need = {s for w, s, m, _ in DONE_WHEN if w == k}
        need |= {MEASURE_SYSTEM[m] for w, _, m, _ in DONE_WHEN if w == k and m in MEASURE_SYSTEM}
        if need:
            pairs += [(k, s) for s in systems if s == "eager" or s in need]
    for k in keys:
        pairs += [(k, s) for s in systems if (k, s) not in pairs]
    return pairs
