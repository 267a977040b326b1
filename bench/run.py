"""lazyjit benchmark: eager PyTorch vs lazyjit (the device) vs torch.compile(backend="inductor")
vs torch.compile(backend="lazyjit").

    bash bench/run.sh            # full run, writes bench/results/latest.{json,md}
    bash bench/run.sh --quick    # smoke test: small sizes, few runs

Each system runs each workload in a subprocess of its own (``--worker NAME``), one
after another (eager, lazyjit, inductor, lazyjit_compile; ``--rounds N`` alternates
them N times and pools the timed samples), on identical, seeded inputs and weights:
ATen's OpenMP threads, Inductor's and lazyjit's TBB workers never share a process.
Eager's outputs are saved for the others' workers, which check theirs against them
with ``torch.testing.assert_close`` and measure their own peak resident memory. The parent
process measures the machine's memory bandwidth (a STREAM-like triad) and
lazyjit's per-op tracing cost, collects everything and writes the JSON and the
markdown table. See bench/README.md for what each number means.

The workload definitions (``WORKLOADS``, ``make_workload``) are importable without
running anything; tests/python/test_bench_workloads.py uses them at tiny sizes.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import json
import math
import os
import platform
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import torch
import torch.nn.functional as F

REPO = Path(__file__).resolve().parents[1]
RESULTS_DIR = REPO / "bench" / "results"
# lazyjit = the device (.to("lazyjit") + lazyjit.sync()); lazyjit_compile =
# torch.compile(fn, backend="lazyjit") on CPU tensors (python/lazyjit/dynamo.py).
SYSTEMS = ("eager", "lazyjit", "inductor", "lazyjit_compile")
COMPILE_BACKENDS = {"inductor": "inductor", "lazyjit_compile": "lazyjit"}
MiB = 1024 * 1024

# --------------------------------------------------------------------------------------
# lazyjit import (the extension may be being rebuilt concurrently: retry a few times)
# --------------------------------------------------------------------------------------
_lazyjit = None


def import_lazyjit(retries: int = 4, wait_s: float = 30.0):
    global _lazyjit
    if _lazyjit is not None:
        return _lazyjit
    last = None
    for i in range(retries):
        try:
            import lazyjit  # noqa: WPS433

            _lazyjit = lazyjit
            return lazyjit
        except Exception as e:  # ImportError, OSError (half-written .so), ...
            last = e
            if i + 1 < retries:
                print(f"[bench] import lazyjit failed ({e!r}); retrying in {wait_s:.0f} s",
                      file=sys.stderr, flush=True)
                time.sleep(wait_s)
    raise last


# --------------------------------------------------------------------------------------
# Workloads
# --------------------------------------------------------------------------------------
# Each workload builds, for a device ("cpu" or "lazyjit"), a function and its arguments.
# Everything is created on the CPU from a fixed seed and then moved, so every system
# sees bit-identical inputs and weights. `bytes_moved` is the compulsory memory traffic
# of one step (inputs read once + outputs written once) used for GB/s (a and b only).


class MLPBlock(torch.nn.Module):
    """linear + bias + GELU(tanh) + linear + residual + layer_norm (as examples/demo.py)."""

    def __init__(self, width: int):
        super().__init__()
        self.fc1 = torch.nn.Linear(width, 4 * width)
        self.fc2 = torch.nn.Linear(4 * width, width)
        self.norm = torch.nn.LayerNorm(width)

    def forward(self, x):
        h = F.gelu(self.fc1(x), approximate="tanh")
        return self.norm(x + self.fc2(h))


def gelu_tanh_primitive(x):
    """tanh-GELU spelled out in primitive elementwise ops."""
    inner = 0.7978845608028654 * (x + 0.044715 * (x * x * x))  # sqrt(2/pi)
    return 0.5 * x * (1.0 + torch.tanh(inner))


def softmax_lastdim(x):
    return torch.softmax(x, dim=-1)


def layer_norm_lastdim(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b, 1e-5)


class Workload:
    key = ""
    title = ""
    no_grad = True      # run the step under torch.no_grad()
    train = False       # step mutates state (compare parameters at the end)
    memory_bound = False
    compiles_itself = False  # build(device, compile_backend=...) applies torch.compile itself
    sizes: dict = {}
    # Timed calls per sample: a workload whose call takes microseconds loops this many
    # calls per timed sample (and per warm-up step) and reports the per-call time, so a
    # sample is long enough to time on a noisy machine. The first call is one call.
    calls_per_sample: dict = {}
    # compare()'s tolerances for this workload's outputs; empty: PyTorch's defaults
    tolerance: dict = {}
    # torch.backends.mkldnn.matmul.fp32_precision while the workload runs (every
    # system alike); None: left as it is
    matmul_precision: str | None = None

    def __init__(self, scale: str = "full"):
        self.scale = scale
        self.size = self.sizes[scale]

    # -> (fn, args); fn(*args) is one step and returns the output to compare
    def build(self, device: str):
        raise NotImplementedError

    @contextlib.contextmanager
    def settings(self):
        """The process-wide PyTorch settings the workload runs under, restored after."""
        if self.matmul_precision is None:
            yield
            return
        mm = torch.backends.mkldnn.matmul
        before = mm.fp32_precision
        mm.fp32_precision = self.matmul_precision
        try:
            yield
        finally:
            mm.fp32_precision = before

    def state_to_compare(self, built):
        """Extra tensors (e.g. parameters after training) compared at the end."""
        return None

    def bytes_moved(self) -> int | None:
        return None

    def describe(self) -> str:
        return self.title

    @property
    def calls(self) -> int:
        return self.calls_per_sample.get(self.scale, 1)


class GeluPrimitive(Workload):
    key = "a_gelu"
    title = "tanh-GELU as primitive ops"
    memory_bound = True
    sizes = {"full": 16 * MiB, "quick": 1 * MiB, "tiny": 4096}

    def build(self, device):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(self.size, generator=g).to(device)
        return gelu_tanh_primitive, (x,)

    def bytes_moved(self):
        return 2 * 4 * self.size  # read x, write y

    def describe(self):
        return f"{self.title}, {self.size / MiB:g}M float32"


class Softmax(Workload):
    key = "b1_softmax"
    title = "softmax(dim=-1)"
    memory_bound = True
    sizes = {"full": (4096, 1024), "quick": (512, 1024), "tiny": (64, 128)}

    def build(self, device):
        g = torch.Generator().manual_seed(1)
        x = torch.randn(*self.size, generator=g).to(device)
        return softmax_lastdim, (x,)

    def bytes_moved(self):
        return 2 * 4 * math.prod(self.size)

    def describe(self):
        return f"{self.title}, [{self.size[0]}, {self.size[1]}] float32"


class LayerNorm(Workload):
    key = "b2_layer_norm"
    title = "layer_norm(last dim, weight+bias)"
    memory_bound = True
    sizes = {"full": (4096, 1024), "quick": (512, 1024), "tiny": (64, 128)}

    def build(self, device):
        g = torch.Generator().manual_seed(2)
        n, d = self.size
        x = torch.randn(n, d, generator=g)
        w = 1.0 + 0.1 * torch.randn(d, generator=g)
        b = 0.1 * torch.randn(d, generator=g)
        return layer_norm_lastdim, (x.to(device), w.to(device), b.to(device))

    def bytes_moved(self):
        n, d = self.size
        return 4 * (2 * n * d + 2 * d)

    def describe(self):
        return f"{self.title}, [{self.size[0]}, {self.size[1]}] float32"


class MLPForward(Workload):
    key = "c_mlp"
    title = "MLP block forward (no_grad)"
    sizes = {"full": (256, 1024), "quick": (64, 256), "tiny": (8, 32)}

    def build(self, device):
        batch, width = self.size
        torch.manual_seed(3)
        model = MLPBlock(width).eval()
        g = torch.Generator().manual_seed(4)
        x = torch.randn(batch, width, generator=g)
        return model.to(device), (x.to(device),)

    def describe(self):
        b, w = self.size
        return f"{self.title}, batch {b}, width {w} (hidden {4 * w})"


LLAMA_ATTN = os.environ.get("LAZYJIT_BENCH_LLAMA_ATTN", "sdpa")


class LlamaLayer(Workload):
    key = "d_llama_layer"
    title = "Llama decoder layer forward (no_grad)"
    # (batch, seq, hidden, intermediate, heads)
    sizes = {"full": (1, 256, 512, 1376, 8), "quick": (1, 64, 512, 1376, 8),
             "tiny": (1, 16, 64, 128, 4)}

    def build(self, device):
        from transformers import LlamaConfig
        from transformers.models.llama.modeling_llama import (LlamaDecoderLayer,
                                                              LlamaRotaryEmbedding)

        batch, seq, hidden, inter, heads = self.size
        cfg = LlamaConfig(hidden_size=hidden, intermediate_size=inter,
                          num_attention_heads=heads, num_key_value_heads=heads,
                          num_hidden_layers=1, vocab_size=1000)
        cfg._attn_implementation = LLAMA_ATTN
        torch.manual_seed(5)
        layer = LlamaDecoderLayer(cfg, layer_idx=0).eval()
        # LlamaDecoderLayer.__init__ leaves nn.Linear's default init; scale the RMSNorm
        # weights a little so they are not all ones.
        with torch.no_grad():
            for name, p in layer.named_parameters():
                if "layernorm" in name:
                    p.mul_(1.0 + 0.1 * torch.randn_like(p))
        g = torch.Generator().manual_seed(6)
        x = torch.randn(batch, seq, hidden, generator=g)
        rope = LlamaRotaryEmbedding(config=cfg)
        pos = torch.arange(seq).unsqueeze(0).expand(batch, seq)
        cos, sin = rope(x, pos)  # position embeddings computed once, on the CPU
        mask = None
        if LLAMA_ATTN == "eager":  # eager attention needs an explicit additive causal mask
            mask = torch.full((seq, seq), float("-inf")).triu(1)[None, None]
        layer = layer.to(device)
        x, cos, sin = x.to(device), cos.to(device), sin.to(device)
        if mask is not None:
            mask = mask.to(device)

        def fn(x, cos, sin, mask):
            return layer(x, attention_mask=mask, position_embeddings=(cos, sin))

        return fn, (x, cos, sin, mask)

    def describe(self):
        b, s, h, i, n = self.size
        return (f"{self.title}, batch {b}, seq {s}, hidden {h}, intermediate {i}, {n} heads, "
                f"attn={LLAMA_ATTN}")


class LlamaLayerBF16Matmul(LlamaLayer):
    """d with PyTorch's opt-in to bfloat16 inside float32 matmuls
    (torch.backends.mkldnn.matmul.fp32_precision = "bf16", what
    torch.set_float32_matmul_precision("medium") sets), set alike for every system.
    Each system does what it does with it: with AMX, eager's, Inductor's and
    lazyjit's big GEMMs all run on bf16 tiles; with AVX512-BF16 alone, eager's and
    Inductor's ATen mm stay float32 and lazyjit's run on bf16 operands
    (executor/gemm.h). Outputs compared at bf16 tolerances."""
    key = "d_llama_layer_bf16mm"
    title = "Llama decoder layer forward (no_grad), matmul fp32_precision=bf16"
    matmul_precision = "bf16"
    # bf16 operands: a GEMM's error is ~2^-8 of its output's scale (the layer's
    # outputs are ~1); torch.testing's bf16 rtol, and an atol of the same size
    tolerance = {"rtol": 1.6e-2, "atol": 1.6e-2}


class MLPTrain(Workload):
    key = "e_mlp_train"
    title = "MLP block training step (fwd+bwd+AdamW)"
    no_grad = False
    train = True
    compiles_itself = True
    sizes = {"full": (256, 1024), "quick": (64, 256), "tiny": (8, 32)}

    def build(self, device, compile_inductor: bool = False, compile_backend: str | None = None):
        """compile_backend: torch.compile the module and optimizer.step separately with
        that backend (the standard recipe: backward() is a graph break);
        compile_inductor=True is compile_backend="inductor"."""
        if compile_inductor:
            compile_backend = "inductor"
        batch, width = self.size
        torch.manual_seed(3)
        model = MLPBlock(width).train()
        g = torch.Generator().manual_seed(7)
        x = torch.randn(batch, width, generator=g)
        y = torch.randn(batch, width, generator=g)
        model = model.to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
        fwd = torch.compile(model, backend=compile_backend) if compile_backend else model
        opt_step = torch.compile(opt.step, backend=compile_backend) if compile_backend else opt.step

        def train_step(x, y):
            opt.zero_grad(set_to_none=True)
            loss = F.mse_loss(fwd(x), y)
            loss.backward()
            opt_step()
            return loss.detach()

        train_step.model = model  # for state_to_compare
        return train_step, (x.to(device), y.to(device))

    def state_to_compare(self, built):
        fn, _ = built
        return {name: p.detach() for name, p in fn.model.named_parameters()}

    def describe(self):
        b, w = self.size
        return f"{self.title}, batch {b}, width {w} (hidden {4 * w})"


def small_ops(x):
    """30 small torch ops (elementwise, a clamp, a where, two small reductions)."""
    y = x * 1.5                          # 1 mul
    y = y + 0.25                         # 2 add
    y = torch.sin(y)                     # 3 sin
    y = y * x                            # 4 mul
    y = torch.exp(y * 0.5)               # 5 mul, 6 exp
    y = torch.tanh(y - 1.0)              # 7 sub, 8 tanh
    y = torch.relu(y + x)                # 9 add, 10 relu
    y = torch.sigmoid(y * 2.0)           # 11 mul, 12 sigmoid
    y = torch.where(x > 0, y, -y)        # 13 gt, 14 neg, 15 where
    y = torch.clamp(y, -0.5, 0.8)        # 16 clamp
    s = y.sum(dim=1, keepdim=True)       # 17 sum (rows)
    y = y - s / 8.0                      # 18 div, 19 sub
    y = torch.cos(y)                     # 20 cos
    y = y * y                            # 21 mul
    y = torch.sqrt(y + 1.0)              # 22 add, 23 sqrt
    y = torch.log(y)                     # 24 log
    y = torch.abs(y - 0.1)               # 25 sub, 26 abs
    y = torch.maximum(y, x)              # 27 maximum
    m = y.mean(dim=0, keepdim=True)      # 28 mean (columns)
    return y + m * 0.5                   # 29 mul, 30 add


SMALL_OPS_COUNT = 30  # ATen ops small_ops runs in eager (tests/python/test_bench_workloads.py)


class SmallOps(Workload):
    key = "f_small_ops"
    title = "30 small ops on 8×8"
    sizes = {"full": (8, 8), "quick": (8, 8), "tiny": (8, 8)}
    calls_per_sample = {"full": 200, "quick": 50, "tiny": 1}

    def build(self, device):
        g = torch.Generator().manual_seed(8)
        x = torch.randn(*self.size, generator=g)
        return small_ops, (x.to(device),)

    def describe(self):
        return (f"{self.title}: {SMALL_OPS_COUNT} elementwise/small ops on "
                f"[{self.size[0]}, {self.size[1]}] float32, per call "
                f"({self.calls} calls per timed sample)")


class LlamaDecode(Workload):
    """Greedy decoding with a transformers Llama (small config, random weights): one
    call is model.generate(...) of `tokens` new tokens after an 8-token prompt, batch
    1, the KV cache growing a token per step. Times are per call; per token is the
    call's time over `tokens` (the ratios are the same). Warm-up calls fill lazyjit's
    caches (the timed calls compile nothing: each decode step's program is cached);
    torch.compile compiles the model's forward (generate's loop stays Python)."""
    key = "g_decode"
    title = "Llama greedy decode"
    compiles_itself = True
    # (layers, hidden, intermediate, heads, prompt, new tokens)
    sizes = {"full": (4, 256, 688, 4, 8, 32), "quick": (2, 256, 688, 4, 8, 16),
             "tiny": (1, 64, 128, 4, 4, 4)}

    def build(self, device, compile_backend: str | None = None):
        from transformers import LlamaConfig, LlamaForCausalLM
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        layers, hidden, inter, heads, prompt, tokens = self.size
        cfg = LlamaConfig(hidden_size=hidden, intermediate_size=inter, num_attention_heads=heads,
                          num_key_value_heads=heads, num_hidden_layers=layers, vocab_size=1000,
                          max_position_embeddings=256, bos_token_id=1, eos_token_id=2,
                          pad_token_id=0)
        cfg._attn_implementation = LLAMA_ATTN
        torch.manual_seed(9)
        model = LlamaForCausalLM(cfg).eval().to(device)
        if compile_backend:
            model.forward = torch.compile(model.forward, backend=compile_backend)
        g = torch.Generator().manual_seed(10)
        ids = torch.randint(3, 1000, (1, prompt), generator=g).to(device)

        def decode(ids):
            return model.generate(ids, max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False,
                                  pad_token_id=0)

        return decode, (ids,)

    def describe(self):
        layers, hidden, inter, heads, prompt, tokens = self.size
        return (f"{self.title}: transformers Llama, {layers} layers, hidden {hidden}, intermediate "
                f"{inter}, {heads} heads, batch 1, {prompt}-token prompt, {tokens} new tokens per call "
                f"(per token: the call's time / {tokens}), attn={LLAMA_ATTN}")


WORKLOADS = {w.key: w for w in (GeluPrimitive, Softmax, LayerNorm, MLPForward, LlamaLayer,
                                LlamaLayerBF16Matmul, MLPTrain, SmallOps, LlamaDecode)}

# The targets (bench/README.md): min speedup over eager, over inductor, and for
# memory-bound ones the minimum fraction of measured triad bandwidth. They are checked
# for the lazyjit device unless "systems" names another system for a check (f: the
# vs_inductor target is torch.compile(backend="lazyjit")'s).
TARGETS = {
    "a_gelu": {"vs_eager": 3.0, "vs_inductor": 1.0, "bandwidth": 0.70},
    "b1_softmax": {"vs_eager": 3.0, "vs_inductor": 1.0},
    "b2_layer_norm": {"vs_eager": 3.0, "vs_inductor": 1.0},
    "c_mlp": {"vs_eager": 1.3, "vs_inductor": 1.0},
    "d_llama_layer": {"vs_eager": 1.3, "vs_inductor": 1.0},
    "d_llama_layer_bf16mm": {"vs_eager": 1.3, "vs_inductor": 1.0},
    "e_mlp_train": {"vs_eager": 1.3, "vs_inductor": 1.0},
    "g_decode": {"vs_eager": 1.2},
    "f_small_ops": {"vs_eager": 1.5, "vs_inductor": 1.0,
                    "systems": {"vs_eager": "lazyjit", "vs_inductor": "lazyjit_compile"}},
}


def make_workload(key: str, scale: str = "full") -> Workload:
    return WORKLOADS[key](scale)


# --------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------

def to_cpu(obj):
    """Detached CPU clones of every tensor in a (nested) output; syncs lazyjit tensors."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().to("cpu").clone()
    if isinstance(obj, (tuple, list)):
        return type(obj)(to_cpu(o) for o in obj)
    if isinstance(obj, dict):
        return {k: to_cpu(v) for k, v in obj.items()}
    return obj


def _flatten(obj, prefix="out"):
    if isinstance(obj, torch.Tensor):
        yield prefix, obj
    elif isinstance(obj, (tuple, list)):
        for i, o in enumerate(obj):
            yield from _flatten(o, f"{prefix}[{i}]")
    elif isinstance(obj, dict):
        for k, o in obj.items():
            yield from _flatten(o, f"{prefix}.{k}")


def compare(got, want, rtol=None, atol=None) -> dict:
    """assert_close with PyTorch's default tolerances for the dtype; never raises."""
    res = {"ok": True, "max_abs_diff": 0.0, "error": None}
    try:
        g, w = dict(_flatten(got)), dict(_flatten(want))
        if g.keys() != w.keys():
            raise AssertionError(f"output structure differs: {sorted(g)} vs {sorted(w)}")
        for k in w:
            if g[k].shape == w[k].shape and g[k].numel():
                d = (g[k].double() - w[k].double()).abs().max().item()
                res["max_abs_diff"] = max(res["max_abs_diff"], d)
            torch.testing.assert_close(g[k], w[k], rtol=rtol, atol=atol, msg=lambda m, k=k: f"{k}: {m}")
    except Exception as e:
        res["ok"] = False
        res["error"] = _short_error(e)
    return res


# Parameters of a training step, compared after the first call + warm-up steps: AdamW
# (lr=1e-3) moves a parameter by up to ~1e-3 per step, and float32 reductions summed in
# another order legitimately move single elements by ~1e-5 after a few steps (Adam's
# m_hat/sqrt(v_hat) amplifies tiny gradient differences; Inductor at --quick: 1 element
# of 262144 off by 1.1e-5), so PyTorch's default atol (1e-5) is too tight there. 1e-4 is
# a tenth of one step: a missing or wrong update still fails. The loss is compared at
# the default tolerances.
TRAIN_STATE_TOL = {"rtol": 1e-4, "atol": 1e-4}


def compare_train(got, want) -> dict:
    """compare() of a training checkpoint (output, parameters): the output at the
    default tolerances, the parameters at TRAIN_STATE_TOL."""
    a = compare(got[0], want[0])
    b = compare(got[1], want[1], **TRAIN_STATE_TOL)
    return {"ok": a["ok"] and b["ok"], "max_abs_diff": max(a["max_abs_diff"], b["max_abs_diff"]),
            "error": a["error"] or b["error"]}


def _short_error(e: BaseException, limit: int = 1200) -> str:
    """Exception type + message, without the C++ frame dump c10 errors carry."""
    msg = str(e)
    cut = msg.find("\nException raised from")
    if cut >= 0:
        msg = msg[:cut]
    msg = f"{type(e).__name__}: {msg.strip()}"
    return msg if len(msg) <= limit else msg[:limit] + " ..."


def _where(e: BaseException) -> str:
    tb = traceback.extract_tb(e.__traceback__)
    frames = [f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in tb[-4:]]
    return " <- ".join(reversed(frames))


def rss_kib() -> tuple[int, int]:
    """(current RSS, peak RSS since the last reset) in KiB, from /proc/self/status."""
    txt = Path("/proc/self/status").read_text()
    cur = int(re.search(r"VmRSS:\s+(\d+)", txt).group(1))
    hwm = int(re.search(r"VmHWM:\s+(\d+)", txt).group(1))
    return cur, hwm


def reset_peak_rss() -> bool:
    """Resets the kernel's peak-RSS counter (Linux >= 4.0); ru_maxrss follows it."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def median(xs):
    return statistics.median(xs) if xs else None


# --------------------------------------------------------------------------------------
# Machine bandwidth: STREAM-like triad a = b + s*c
# --------------------------------------------------------------------------------------

def triad_bandwidth(n: int, reps: int) -> dict:
    """Best-of-reps GB/s for a = b + s*c (3 arrays x 4 bytes x n, STREAM counting: no
    write-allocate traffic), with 1 thread and with all torch threads."""
    b = torch.rand(n)
    c = torch.rand(n)
    a = torch.empty(n)
    s = 3.0
    all_threads = torch.get_num_threads()
    out = {"array_elems": n, "array_mib": 4 * n / MiB, "reps": reps}
    for label, nt in (("1_thread", 1), ("all_threads", all_threads)):
        torch.set_num_threads(nt)
        best = float("inf")
        torch.add(b, c, alpha=s, out=a)  # touch / warm
        for _ in range(reps):
            t0 = time.perf_counter()
            torch.add(b, c, alpha=s, out=a)
            best = min(best, time.perf_counter() - t0)
        out[f"gbps_{label}"] = 3 * 4 * n / best / 1e9
        out[f"threads_{label}"] = nt
    torch.set_num_threads(all_threads)
    torch.testing.assert_close(a, b + s * c)
    out["gbps_best"] = max(out["gbps_1_thread"], out["gbps_all_threads"])
    return out


# --------------------------------------------------------------------------------------
# lazyjit tracing cost per op
# --------------------------------------------------------------------------------------

def tracing_cost(ops_per_rep: int, reps: int) -> dict:
    """Records `ops_per_rep` small elementwise ops (on a 16-element tensor) without
    syncing, `reps` times. The same loop on eager CPU tensors (Python + dispatcher + a
    16-element kernel) is the baseline: lazyjit − eager approximates what recording
    costs beyond PyTorch's own per-op overhead. (The meta device is no baseline: many of
    its kernels are Python decompositions, slower than eager.)"""
    lazyjit = import_lazyjit()

    def loop(x):
        for i in range(ops_per_rep // 4):
            x = x * 1.0001
            x = x + 0.5
            x = torch.tanh(x)
            x = x - 0.25
        return x

    res = {"ops_per_rep": ops_per_rep, "reps": reps}
    for dev in ("cpu", "lazyjit"):
        x0 = torch.randn(16).to(dev)
        if dev == "lazyjit":
            lazyjit.sync()
        times, traced = [], []
        for r in range(reps + 1):
            before = lazyjit.metrics()["ops_traced"] if dev == "lazyjit" else 0
            t0 = time.perf_counter()
            y = loop(x0)
            t1 = time.perf_counter()
            if dev == "lazyjit":
                traced.append(lazyjit.metrics()["ops_traced"] - before)
                ts = time.perf_counter()
                lazyjit.sync()
                sync_s = time.perf_counter() - ts
                if r == 0:
                    res["lazyjit_first_sync_ms"] = 1e3 * sync_s  # compile of the chain
                else:
                    res.setdefault("lazyjit_sync_ms", []).append(1e3 * sync_s)
            if r > 0:  # rep 0 is warm-up
                times.append(t1 - t0)
            del y
        res[f"{dev}_us_per_op"] = 1e6 * median(times) / ops_per_rep
        if dev == "lazyjit":
            res["lazyjit_ops_traced_per_rep"] = median(traced)
    res["lazyjit_sync_ms"] = median(res.get("lazyjit_sync_ms", []))
    res["lazyjit_minus_eager_us_per_op"] = res["lazyjit_us_per_op"] - res["cpu_us_per_op"]
    return res


# --------------------------------------------------------------------------------------
# Worker: one workload, three systems
# --------------------------------------------------------------------------------------

def _lz_metrics_delta(a: dict, b: dict) -> dict:
    d = {k: b[k] - a[k] for k in ("ops_traced", "compiles", "cache_hits", "cache_misses",
                                   "syncs", "graphs_executed", "step_ops") if k in a}
    for t in ("compile", "execute"):
        ta, tb = a["timings"].get(t, {}), b["timings"].get(t, {})
        d[f"{t}_ms"] = tb.get("total_ms", 0.0) - ta.get("total_ms", 0.0)
        d[f"{t}_count"] = tb.get("count", 0) - ta.get("count", 0)
    fa, fb = a.get("fallbacks", {}) or {}, b.get("fallbacks", {}) or {}
    d["fallbacks"] = {k: fb[k] - fa.get(k, 0) for k in fb if fb[k] - fa.get(k, 0)}
    return d


def _dynamo_counters() -> dict:
    """Dynamo's graph-break and unique-graph counters (0 if Dynamo was never imported)."""
    if "torch._dynamo" not in sys.modules:
        return {"graph_breaks": 0, "unique_graphs": 0}
    from torch._dynamo.utils import counters
    return {"graph_breaks": sum(counters["graph_break"].values()),
            "unique_graphs": counters["stats"]["unique_graphs"]}


def _compile_stats(lazyjit) -> dict:
    """lazyjit.dynamo.stats() + the compile counters of lazyjit.metrics()."""
    from lazyjit import dynamo as lzd
    st = lzd.stats()
    m = lazyjit.metrics()
    for k in ("compiles", "llvm_compiles", "kernel_hits", "disk_hits", "cache_hits",
              "cache_misses"):
        if isinstance(m.get(k), int):
            st[k] = m[k]
    st["compile_ms"] = m["timings"].get("compile", {}).get("total_ms", 0.0)
    return st


def _compile_stats_delta(a: dict, b: dict) -> dict:
    d = {k: b[k] - a[k] for k in b if k != "eager_reasons" and k in a}
    d["eager_reasons"] = b["eager_reasons"][len(a["eager_reasons"]):]
    return d


def _fresh_lazyjit_caches(lazyjit) -> None:
    """Empties lazyjit's in-memory program/kernel caches and this worker's on-disk cache
    directory, so that torch.compile(backend="lazyjit")'s first call is a cold compile
    (the lazyjit device system ran before it in this process, on the same graphs). The
    directory is only emptied when it is the scratch one the bench's parent made for this
    worker (LAZYJIT_BENCH_SCRATCH_CACHE_DIR), never a user's cache."""
    lazyjit.clear_cache()
    d = os.environ.get("LAZYJIT_CACHE_DIR")
    if d and d == os.environ.get("LAZYJIT_BENCH_SCRATCH_CACHE_DIR") and Path(d).is_dir():
        import shutil
        for child in Path(d).iterdir():
            if child.is_dir():
                shutil.rmtree(child, ignore_errors=True)
            else:
                child.unlink(missing_ok=True)


def run_system(wl: Workload, system: str, warmup: int, runs: int, min_time_s: float = 0.0,
               max_runs: int = 50) -> tuple[dict, object, object]:
    """_run_system under the workload's settings (Workload.settings)."""
    with wl.settings():
        return _run_system(wl, system, warmup, runs, min_time_s, max_runs)


def _run_system(wl: Workload, system: str, warmup: int, runs: int, min_time_s: float = 0.0,
                max_runs: int = 50) -> tuple[dict, object, object]:
    """Returns (result, first-call output on CPU, (last output, compare-state) on CPU).

    For a training workload (``wl.train``) the third element is taken after the first
    call and the warm-up steps instead, a step count every system runs alike (the number
    of timed steps adapts to speed): the last warm-up step's output and the parameters
    then, so that a step that does not update the parameters shows as a mismatch.

    Systems: eager; lazyjit (the device: a step is the call, which records, then
    lazyjit.sync()); inductor / lazyjit_compile (torch.compile(fn, backend=...) on CPU
    tensors; a training step compiles the module and optimizer.step separately).
    A workload with ``calls`` > 1 runs that many calls per warm-up step and timed sample;
    times are reported per call."""
    on_device = system == "lazyjit"
    backend = COMPILE_BACKENDS.get(system)
    lazyjit = import_lazyjit() if system in ("lazyjit", "lazyjit_compile") else None
    dev = lazyjit if on_device else None  # the device system: sync after each call
    device = "lazyjit" if on_device else "cpu"
    calls = wl.calls
    res = {"system": system, "calls_per_sample": calls}
    if backend:
        import torch._dynamo as dynamo
        dynamo.reset()  # cold first call; no cache entries of another backend
        if system == "lazyjit_compile":
            _fresh_lazyjit_caches(lazyjit)
        dyn0 = _dynamo_counters()
    cs0 = _compile_stats(lazyjit) if system == "lazyjit_compile" else None
    t_build = time.perf_counter()
    if backend and wl.compiles_itself:
        built = wl.build("cpu", compile_backend=backend)
        fn, args = built
    else:
        built = wl.build(device)
        fn, args = built
        if backend:
            fn = torch.compile(fn, backend=backend)
    if dev is not None:
        dev.sync()  # materialize the inputs/weights copied to the device
    res["build_s"] = time.perf_counter() - t_build

    grad_ctx = torch.no_grad if wl.no_grad else torch.enable_grad
    split = [0.0, 0.0]  # lazyjit device: (trace s, sync s) summed over the last step's calls

    def step(n=calls):
        split[:] = [0.0, 0.0]
        out = None
        with grad_ctx():
            for _ in range(n):
                out = None
                if dev is None:
                    out = fn(*args)
                    continue
                t0 = time.perf_counter()
                out = fn(*args)
                t1 = time.perf_counter()
                dev.sync()
                split[0] += t1 - t0
                split[1] += time.perf_counter() - t1
        return out

    m0 = dev.metrics() if dev else None
    t0 = time.perf_counter()
    out = step(1)  # the first call: one call, compile included
    res["first_call_ms"] = 1e3 * (time.perf_counter() - t0)
    first = to_cpu(out)
    del out
    m1 = dev.metrics() if dev else None
    cs1 = _compile_stats(lazyjit) if cs0 is not None else None
    warm_ms = []
    warm_out = first
    for i in range(warmup):
        if dev is not None and i == warmup - 1 and hasattr(dev, "wait_for_compiles"):
            # Programs compile in the background while their graphs run op by op
            # (LAZYJIT_BACKGROUND_COMPILE): the last warm-up step runs them compiled.
            dev.wait_for_compiles()
        tw = time.perf_counter()
        out = step()
        warm_ms.append(1e3 * (time.perf_counter() - tw) / calls)
        if wl.train:
            warm_out = to_cpu(out)
        del out
    res["warmup_ms"] = warm_ms
    if wl.train:  # the checkpoint every system reaches after the same steps
        checkpoint = (warm_out, to_cpu(wl.state_to_compare(built)))
    m2 = dev.metrics() if dev else None
    cs2 = _compile_stats(lazyjit) if cs0 is not None else None
    # timed samples: at least `runs`, and more (up to max_runs) until min_time_s of
    # measured time, so that short steps get enough samples on a noisy machine
    times, per_step = [], []  # times: per call (sample time / calls)
    measured = 0.0
    out = None
    while len(times) < runs or (measured < min_time_s and len(times) < max_runs):
        out = None
        mb = dev.metrics() if dev else None  # metrics reads stay outside the timing
        t0 = time.perf_counter()
        out = step()
        dt = time.perf_counter() - t0
        measured += dt
        times.append(dt / calls)
        if dev:
            d = _lz_metrics_delta(mb, dev.metrics())
            d = {k: (v / calls if isinstance(v, (int, float)) else v) for k, v in d.items()}
            d["trace_ms"], d["sync_ms"] = 1e3 * split[0] / calls, 1e3 * split[1] / calls
            per_step.append(d)
    m3 = dev.metrics() if dev else None
    cs3 = _compile_stats(lazyjit) if cs0 is not None else None
    if wl.train:
        last, state = checkpoint
        res["checked_after_steps"] = 1 + warmup
    else:
        last = to_cpu(out)
        state = to_cpu(wl.state_to_compare(built))
    res["times_ms"] = [1e3 * t for t in times]
    res["median_ms"] = 1e3 * median(times)
    res["min_ms"] = 1e3 * min(times)
    res["warmup"] = warmup
    res["runs"] = len(times)
    res["measured_s"] = measured
    if backend:
        dyn = _dynamo_counters()
        res["dynamo"] = {k: dyn[k] - dyn0[k] for k in dyn}
    if cs0 is not None:
        n_calls = len(times) * calls
        lc = {"build_and_first": _compile_stats_delta(cs0, cs1),
              "warmup": _compile_stats_delta(cs1, cs2),
              "steady": _compile_stats_delta(cs2, cs3),
              "total": _compile_stats_delta(cs0, cs3)}
        lc["steady_calls_per_call"] = lc["steady"]["calls"] / n_calls
        # A graph lazyjit could not capture runs through ATen (dynamo.py): that is a
        # failure of this system even though the output is right.
        lc["eager_fallback"] = lc["total"]["eager_graphs"] > 0
        lc["no_lazyjit_calls"] = lc["steady"]["calls"] == 0
        res["lazyjit_compile"] = lc
    if dev is not None:
        n = len(times)
        res["lazyjit_first"] = _lz_metrics_delta(m0, m1)
        res["lazyjit_warmup"] = _lz_metrics_delta(m1, m2)
        steady = _lz_metrics_delta(m2, m3)
        res["lazyjit_steady"] = steady
        med = lambda k: median([d[k] for d in per_step])  # noqa: E731
        nc = n * calls
        ps = {
            "ops_traced": steady["ops_traced"] / nc,
            "trace_ms": med("trace_ms"),
            "sync_ms": med("sync_ms"),
            "execute_ms": med("execute_ms"),
            # what a sync costs beyond running the compiled program: cache lookup,
            # binding, launch (+ any steady-state compile)
            "sync_overhead_ms": median([d["sync_ms"] - d["execute_ms"] for d in per_step]),
            "compile_ms": steady["compile_ms"] / nc,
            "compiles": steady["compiles"] / nc,
            "graphs_executed": steady["graphs_executed"] / nc,
            "syncs": steady["syncs"] / nc,
        }
        ps["trace_us_per_op"] = 1e3 * ps["trace_ms"] / ps["ops_traced"] if ps["ops_traced"] else None
        res["lazyjit_per_step"] = ps
    return res, first, (last, state)


def worker(key: str, scale: str, warmup: int, runs: int, systems: list[str], out_path: Path,
           threads: int | None, min_time_s: float = 0.0, max_runs: int = 50,
           ref_path: Path | None = None) -> None:
    """Runs `systems` on workload `key` in this process. With `ref_path`, eager's
    first and last outputs are saved there (when eager runs here) or compared with
    (when it ran in another process): the parent runs each system in a process of
    its own, so ATen's OpenMP threads, Inductor's and lazyjit's TBB workers never
    share one."""
    if threads:
        torch.set_num_threads(threads)
    import_error = None
    if "lazyjit" in systems or "lazyjit_compile" in systems:
        # Import before anything else runs: the autograd engine sizes its per-device
        # queues at the first backward(), so a device registered after an eager
        # backward cannot run backward (INTERNAL ASSERT in engine.cpp).
        try:
            import_lazyjit()
        except Exception as e:
            import_error = _short_error(e)
    wl = make_workload(key, scale)
    result = {"workload": key, "description": wl.describe(), "scale": scale,
              "bytes_moved": wl.bytes_moved(), "systems": {},
              "torch_threads": torch.get_num_threads()}

    def flush():
        out_path.write_text(json.dumps(result, indent=1, default=str))

    ref_first = ref_last = None
    if ref_path is not None and "eager" not in systems and ref_path.exists():
        ref_first, ref_last = torch.load(ref_path, weights_only=False)
    for system in systems:
        can_reset = reset_peak_rss()
        rss_before, _ = rss_kib()
        print(f"[bench] {key}: {system} ...", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        try:
            if system in ("lazyjit", "lazyjit_compile") and import_error:
                raise ImportError(import_error)
            res, first, last = run_system(wl, system, warmup, runs, min_time_s, max_runs)
        except Exception as e:
            res = {"system": system, "error": _short_error(e), "error_where": _where(e)}
            first = last = None
            print(f"[bench] {key}: {system} FAILED: {res['error'][:300]}", file=sys.stderr,
                  flush=True)
        res["wall_s"] = time.perf_counter() - t0
        res["loadavg_1min_after"] = os.getloadavg()[0]
        _, peak = rss_kib()
        res["rss_before_mib"] = rss_before / 1024
        res["peak_rss_mib"] = peak / 1024
        res["peak_rss_delta_mib"] = (peak - rss_before) / 1024
        res["peak_rss_separate"] = can_reset
        res["ru_maxrss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        if first is not None:
            if system == "eager":
                ref_first, ref_last = first, last
                if ref_path is not None:
                    torch.save((first, last), ref_path)
            elif ref_first is not None:
                c_first = compare(first, ref_first, **wl.tolerance)
                # last = (output, state): for a training step after the first call and
                # the warm-up steps (the same count for every system; the number of
                # timed steps adapts to speed), the parameters included
                c_last = (compare_train(last, ref_last) if wl.train
                          else compare(last, ref_last, **wl.tolerance))
                res["correct"] = c_first["ok"] and c_last["ok"]
                res["max_abs_diff"] = max(c_first["max_abs_diff"], c_last["max_abs_diff"])
                res["correct_error"] = c_first["error"] or c_last["error"]
        lc = res.get("lazyjit_compile")
        if lc and (lc["eager_fallback"] or lc["no_lazyjit_calls"]):
            why = ("graphs run through ATen (eager fallback): "
                   + "; ".join(lc["total"]["eager_reasons"]) if lc["eager_fallback"]
                   else "no captured lazyjit program ran in the timed steps")
            res["failed"] = why
            print(f"[bench] {key}: {system} FAILED: {why[:300]}", file=sys.stderr, flush=True)
        if wl.bytes_moved() and res.get("median_ms"):
            res["gbps"] = wl.bytes_moved() / (res["median_ms"] / 1e3) / 1e9
        result["systems"][system] = res
        flush()
        del first, last
    flush()


# --------------------------------------------------------------------------------------
# Parent: orchestrate, write JSON and markdown
# --------------------------------------------------------------------------------------

def machine_info() -> dict:
    model = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    flags = ""
    try:
        flags = next(l for l in Path("/proc/cpuinfo").read_text().splitlines()
                     if l.startswith("flags"))
    except (OSError, StopIteration):
        pass
    isa = [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_tile") if f" {f}" in flags]
    mem_gib = None
    try:
        mem_gib = int(re.search(r"MemTotal:\s+(\d+)", Path("/proc/meminfo").read_text())
                      .group(1)) / 1024 / 1024
    except (OSError, AttributeError):
        pass

    def git(*a):
        try:
            return subprocess.run(["git", *a], cwd=REPO, capture_output=True, text=True,
                                  timeout=10).stdout.strip()
        except Exception:
            return ""

    try:
        import transformers
        tf_version = transformers.__version__
    except Exception:
        tf_version = None
    return {
        "cpu_model": model,
        "cpu_isa": isa,
        "logical_cpus": os.cpu_count(),
        "cpus_available": len(os.sched_getaffinity(0)),
        "torch_threads": torch.get_num_threads(),
        "memory_gib": mem_gib,
        "torch": torch.__version__,
        "transformers": tf_version,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "date": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "git_commit": git("rev-parse", "--short", "HEAD"),
        "git_dirty": bool(git("status", "--porcelain", "--untracked-files=no")),
        "lazyjit_num_threads_env": os.environ.get("LAZYJIT_NUM_THREADS"),
        "loadavg_start": os.getloadavg(),
    }


def run_workload(key, args, tmpdir: Path) -> dict:
    """Each system in a process of its own, eager first (its outputs are the
    reference the others are checked against); with --rounds N, N such passes,
    alternating the systems, and each system's timed samples pooled."""
    merged = None
    ref = tmpdir / f"{key}.eager-ref.pt"
    for rnd in range(args.rounds):
        for system in args.systems:
            r = run_worker_subprocess(key, args, tmpdir, [system], ref, tag=f"{system}-{rnd}")
            if merged is None:
                merged = {k: v for k, v in r.items() if k != "systems"}
                merged["systems"] = {}
                merged["worker_wall_s"] = 0.0
            else:
                merged["worker_wall_s"] += r.get("worker_wall_s", 0.0)
                for k in ("worker_error", "worker_log_tail"):
                    if k in r:
                        merged[k] = r[k]
            for name, sr in r.get("systems", {}).items():
                if name not in merged["systems"] or "error" in merged["systems"][name]:
                    merged["systems"][name] = sr
                    continue
                pooled = merged["systems"][name]
                if "times_ms" in pooled and "times_ms" in sr:
                    pooled["times_ms"] = pooled["times_ms"] + sr["times_ms"]
                    pooled["median_ms"] = median(pooled["times_ms"])
                    pooled["min_ms"] = min(pooled.get("min_ms", float("inf")), sr.get("min_ms", float("inf")))
                    pooled["runs"] = len(pooled["times_ms"])
                    pooled["rounds"] = pooled.get("rounds", 1) + 1
                if sr.get("correct") is False or sr.get("failed"):
                    for k in ("correct", "failed", "correct_error", "max_abs_diff"):
                        if k in sr:
                            pooled[k] = sr[k]
    return merged


def run_worker_subprocess(key, args, tmpdir: Path, systems=None, ref: Path | None = None,
                          tag: str = "") -> dict:
    systems = systems or args.systems
    out = tmpdir / f"{key}{'.' + tag if tag else ''}.json"
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", key,
           "--worker-out", str(out), "--warmup", str(args.warmup), "--runs", str(args.runs),
           "--systems", ",".join(systems), "--scale", args.scale,
           "--min-time", str(args.min_time), "--max-runs", str(args.max_runs)]
    if ref is not None:
        cmd += ["--worker-ref", str(ref)]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    env = dict(os.environ)
    # a fresh Inductor cache per workload: "first call" is a cold compile, not a
    # cache hit from an earlier bench run
    env["TORCHINDUCTOR_CACHE_DIR"] = str(tmpdir / f"inductor-cache-{key}{'-' + tag if tag else ''}")
    # likewise lazyjit's on-disk cache: "1st call" is a cold compile
    env["LAZYJIT_CACHE_DIR"] = str(tmpdir / f"lazyjit-cache-{key}{'-' + tag if tag else ''}")
    # ... which the worker empties again before lazyjit_compile (run_system)
    env["LAZYJIT_BENCH_SCRATCH_CACHE_DIR"] = env["LAZYJIT_CACHE_DIR"]
    env.setdefault("PYTHONPATH", str(REPO / "python"))
    t0 = time.perf_counter()
    err = None
    try:
        p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, timeout=args.timeout)
        log = p.stdout
        if p.returncode != 0:
            err = f"worker exited with status {p.returncode}"
    except subprocess.TimeoutExpired as e:
        log = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        err = f"worker timed out after {args.timeout} s"
    sys.stderr.write("".join(l + "\n" for l in log.splitlines() if l.startswith("[bench]")))
    result = json.loads(out.read_text()) if out.exists() else {"workload": key, "systems": {}}
    result["worker_wall_s"] = time.perf_counter() - t0
    if err:
        # the system that was running when the worker died gets the error
        done = set(result.get("systems", {}))
        for s in systems:
            if s not in done:
                result["systems"][s] = {"system": s, "error": err,
                                        "log_tail": log[-2000:]}
                break
        result["worker_error"] = err
        result["worker_log_tail"] = log[-4000:]
    return result


def system_failed(sr: dict) -> bool:
    """The system raised, gave a wrong result, or (lazyjit_compile) ran graphs through
    ATen instead of lazyjit."""
    return bool(sr.get("error") or sr.get("correct") is False or sr.get("failed"))


def summarize(results: dict) -> None:
    """Speedups, bandwidth fractions, target checks (in place)."""
    triad = results["triad"]["gbps_best"] if results.get("triad") else None
    for key, r in results["workloads"].items():
        s = r.get("systems", {})
        lz = s.get("lazyjit", {}).get("median_ms")
        eg = s.get("eager", {}).get("median_ms")
        ind = s.get("inductor", {}).get("median_ms")
        lcs = s.get("lazyjit_compile", {})
        lc = lcs.get("median_ms") if not system_failed(lcs) else None
        sm = {}
        sm["speedup_vs_eager"] = eg / lz if (eg and lz) else None
        sm["speedup_vs_inductor"] = ind / lz if (ind and lz) else None
        sm["inductor_vs_eager"] = eg / ind if (eg and ind) else None
        # torch.compile(backend="lazyjit"): None when it failed (error, mismatch, or
        # graphs run through ATen), its time is still in systems.lazyjit_compile
        sm["compile_speedup_vs_eager"] = eg / lc if (eg and lc) else None
        sm["compile_speedup_vs_inductor"] = ind / lc if (ind and lc) else None
        sm["lazyjit_compile_failed"] = system_failed(lcs) if lcs else None
        if triad:
            for name, sr in s.items():
                if sr.get("gbps"):
                    sr["fraction_of_triad"] = sr["gbps"] / triad
        tg = TARGETS.get(key, {})
        tsys = tg.get("systems", {})
        speedups = {"lazyjit": (sm["speedup_vs_eager"], sm["speedup_vs_inductor"]),
                    "lazyjit_compile": (sm["compile_speedup_vs_eager"],
                                        sm["compile_speedup_vs_inductor"])}
        checks = {}
        if "vs_eager" in tg:
            x = speedups[tsys.get("vs_eager", "lazyjit")][0]
            checks["vs_eager"] = x is not None and x >= tg["vs_eager"]
        if "vs_inductor" in tg:
            x = speedups[tsys.get("vs_inductor", "lazyjit")][1]
            checks["vs_inductor"] = x is not None and x >= tg["vs_inductor"]
        if "bandwidth" in tg:
            f = s.get(tsys.get("bandwidth", "lazyjit"), {}).get("fraction_of_triad")
            checks["bandwidth"] = f is not None and f >= tg["bandwidth"]
        checks["correct"] = s.get("lazyjit", {}).get("correct") is True
        for x in sorted(set(tsys.values()) - {"lazyjit"}):
            checks[f"correct_{x}"] = (s.get(x, {}).get("correct") is True
                                      and not system_failed(s.get(x, {})))
        # The same speedup targets met by each lazyjit system (the device and
        # torch.compile(backend="lazyjit")), shown beside the check itself.
        by_system = {}
        for name, (ve, vi) in speedups.items():
            by_system[name] = {c: x is not None and x >= tg[c]
                               for c, x in (("vs_eager", ve), ("vs_inductor", vi)) if c in tg}
        sm["targets"] = tg
        sm["target_checks"] = checks
        sm["target_checks_by_system"] = by_system
        sm["targets_met"] = all(checks.values()) if checks else None
        r["summary"] = sm


def _f(x, fmt="{:.2f}", none="–"):
    return none if x is None else fmt.format(x)


def _ms(x):
    if x is None:
        return "–"
    return f"{x:.3g}" if x < 10 else f"{x:.1f}"


def _corr(sr):
    if not sr:
        return "–"
    if sr.get("error"):
        return "ERROR"
    if sr.get("failed"):
        return "FAIL (fallback)"
    c = sr.get("correct")
    if c is None:
        return "–"
    return "pass" if c else "FAIL"


def render_markdown(results: dict) -> str:
    m = results["machine"]
    tr = results.get("triad")
    tc = results.get("tracing")
    L = []
    L.append("# lazyjit benchmark results")
    L.append("")
    L.append(f"- Date: {m['date']}; commit `{m['git_commit']}`"
             f"{' (dirty tree)' if m['git_dirty'] else ''}; scale `{results['config']['scale']}`"
             f", {results['config']['warmup']} warm-up + {results['config']['runs']} timed runs"
             " per system")
    L.append(f"- CPU: {m['cpu_model']} ({m['cpus_available']} CPUs available, ISA "
             f"{', '.join(m['cpu_isa'])}); torch threads {m['torch_threads']}; "
             f"memory {_f(m['memory_gib'], '{:.0f}')} GiB")
    L.append(f"- torch {m['torch']}, transformers {m['transformers']}, Python {m['python']}")
    la0, la1 = m.get("loadavg_start"), m.get("loadavg_end")
    if la0:
        busy = max(la0[0], (la1 or la0)[0]) > 0.5 * m["cpus_available"]
        L.append(f"- Load average (1 min) at start {la0[0]:.2f}, at end "
                 f"{_f(la1[0] if la1 else None)}"
                 + (" — **the machine was shared with other work during the run: "
                    "expect noise, and OpenMP-threaded code (eager, Inductor, ATen calls) "
                    "suffers most from oversubscription**" if busy else ""))
    if results["config"].get("competing_load"):
        L.append(f"- **Competing load during the workloads: {results['config']['competing_load']}** "
                 "(started by `--load`; the triad and tracing figures are taken before it starts)")
    if tr:
        L.append(f"- Measured bandwidth (triad a = b + s·c, {tr['array_mib']:.0f} MiB arrays, "
                 f"best of {tr['reps']}): **{tr['gbps_best']:.1f} GB/s** "
                 f"(1 thread {tr['gbps_1_thread']:.1f}, {tr['threads_all_threads']} threads "
                 f"{tr['gbps_all_threads']:.1f})")
    L.append("")
    L.append("## Summary")
    L.append("")
    L.append("Times are medians of the timed runs (ms per step; `f_small_ops`: per call, "
             "each timed sample loops many calls). lazyjit = the lazyjit device "
             "(`.to(\"lazyjit\")`, call + `lazyjit.sync()`); lazyjit_compile = "
             "`torch.compile(fn, backend=\"lazyjit\")` on CPU tensors. Speedups are ratios "
             "of medians: `eager/X` and `inductor/X` (> 1 means X is faster). First call = "
             "first step including compilation. min = fastest timed step (eager / lazyjit / "
             "inductor / lazyjit_compile), less sensitive to a busy machine. A failed "
             "lazyjit_compile (error, wrong result, or graphs run through ATen: "
             "`lazyjit.dynamo.stats()[\"eager_reasons\"]`) shows `failed` and no ratios.")
    L.append("")
    L.append("| workload | eager ms | lazyjit ms | inductor ms | lazyjit_compile ms | "
             "eager/lazyjit | inductor/lazyjit | eager/lazyjit_compile | "
             "inductor/lazyjit_compile | lazyjit 1st call ms | inductor 1st call ms | "
             "lazyjit_compile 1st call ms | lazyjit correct | inductor correct | "
             "lazyjit_compile correct | min ms e / l / i / lc | targets |")
    L.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|:-:|:-:|:-:|---:|---|")
    for key, r in results["workloads"].items():
        s = r.get("systems", {})
        e, l, i = s.get("eager", {}), s.get("lazyjit", {}), s.get("inductor", {})
        lc = s.get("lazyjit_compile", {})
        sm = r.get("summary", {})
        chk = sm.get("target_checks", {})
        tg = sm.get("targets", {})
        tsys = tg.get("systems", {})
        who = lambda c: "" if tsys.get(c, "lazyjit") == "lazyjit" else f" ({tsys[c]})"  # noqa: E731
        by_sys = sm.get("target_checks_by_system", {})

        def other(c):  # the other lazyjit system's result on the same target, if it ran
            o = "lazyjit_compile" if tsys.get(c, "lazyjit") == "lazyjit" else "lazyjit"
            if o not in s or system_failed(s[o]) or c not in by_sys.get(o, {}):
                return ""
            return f" [{'compile' if o == 'lazyjit_compile' else 'device'} {'✓' if by_sys[o][c] else '✗'}]"
        parts = []
        if "vs_eager" in tg:
            parts.append(f"≥{tg['vs_eager']:g}× eager{who('vs_eager')} "
                         f"{'✓' if chk.get('vs_eager') else '✗'}{other('vs_eager')}")
        if "vs_inductor" in tg:
            parts.append(f"≥{tg['vs_inductor']:g}× ind.{who('vs_inductor')} "
                         f"{'✓' if chk.get('vs_inductor') else '✗'}{other('vs_inductor')}")
        if "bandwidth" in tg:
            parts.append(f"≥{100 * tg['bandwidth']:.0f}% BW{who('bandwidth')} "
                         f"{'✓' if chk.get('bandwidth') else '✗'}")
        if lc.get("error"):
            lc_ms = "**error**"
        elif lc and system_failed(lc):
            lc_ms = f"**failed** ({_ms(lc.get('median_ms'))})"
        else:
            lc_ms = _ms(lc.get("median_ms"))
        L.append(
            f"| {key} | {_ms(e.get('median_ms'))} | "
            f"{'**error**' if l.get('error') else _ms(l.get('median_ms'))} | "
            f"{'**error**' if i.get('error') else _ms(i.get('median_ms'))} | {lc_ms} | "
            f"{_f(sm.get('speedup_vs_eager'), '{:.2f}×')} | "
            f"{_f(sm.get('speedup_vs_inductor'), '{:.2f}×')} | "
            f"{_f(sm.get('compile_speedup_vs_eager'), '{:.2f}×')} | "
            f"{_f(sm.get('compile_speedup_vs_inductor'), '{:.2f}×')} | "
            f"{_ms(l.get('first_call_ms'))} | {_ms(i.get('first_call_ms'))} | "
            f"{_ms(lc.get('first_call_ms'))} | "
            f"{_corr(l)} | {_corr(i)} | {_corr(lc)} | "
            f"{' / '.join(_ms(x.get('min_ms')) for x in (e, l, i, lc))} | {'; '.join(parts)} |")
    L.append("")
    L.append("Workloads:")
    for key, r in results["workloads"].items():
        L.append(f"- `{key}`: {r.get('description', '')}")
    L.append("")

    if any("lazyjit_compile" in r.get("systems", {}) for r in results["workloads"].values()):
        L.append('## torch.compile(backend="lazyjit") counters')
        L.append("")
        L.append("From `lazyjit.dynamo.stats()` and `lazyjit.metrics()`, over the whole phase "
                 "(build, first call, warm-up, timed): graphs = graphs handed to lazyjit "
                 "(Dynamo's, or AOTAutograd's forward/backward), captures = graph captures (steady = during the timed steps, "
                 "should be 0), calls/call = captured-program runs per workload call in the "
                 "timed steps, eager graphs = graphs run through ATen (a failure), "
                 "compiles / llvm compiles / disk hits = `lazyjit.metrics()`'s counters "
                 "(disk hits 0: the first call was a cold compile); graph breaks = "
                 "Dynamo's, for Inductor and lazyjit_compile.")
        L.append("")
        L.append("| workload | graphs | captures (steady) | calls/call | eager graphs | "
                 "compiles | llvm compiles | disk hits | compile ms | graph breaks ind. / lc |")
        L.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for key, r in results["workloads"].items():
            s = r.get("systems", {})
            st = s.get("lazyjit_compile", {}).get("lazyjit_compile")
            if not st:
                L.append(f"| {key} | " + " | ".join(["–"] * 9) + " |")
                continue
            tot, sd = st["total"], st["steady"]
            gb = " / ".join(str(s.get(x, {}).get("dynamo", {}).get("graph_breaks", "–"))
                            for x in ("inductor", "lazyjit_compile"))
            L.append(f"| {key} | {tot['graphs']} | {tot['captures']} ({sd['captures']}) | "
                     f"{st['steady_calls_per_call']:.3g} | {tot['eager_graphs']} | "
                     f"{tot.get('compiles', '–')} | {tot.get('llvm_compiles', '–')} | "
                     f"{tot.get('disk_hits', '–')} | "
                     f"{_ms(tot.get('compile_ms'))} | {gb} |")
        L.append("")

    L.append("## Bandwidth (memory-bound workloads)")
    L.append("")
    L.append("GB/s = compulsory bytes (inputs read once + output written once) / median time; "
             "% = of the measured triad bandwidth (DRAM: its arrays exceed the L3). A working "
             "set that fits in the last-level cache can exceed 100%.")
    L.append("")
    L.append("| workload | MB moved | " + " | ".join(f"{x} GB/s" for x in SYSTEMS) + " | "
             + " | ".join(f"{x} %" for x in SYSTEMS) + " |")
    L.append("|---|---:|" + "---:|" * (2 * len(SYSTEMS)))
    for key, r in results["workloads"].items():
        if not r.get("bytes_moved"):
            continue
        s = r.get("systems", {})
        row = [key, f"{r['bytes_moved'] / 1e6:.1f}"]
        row += [_f(s.get(x, {}).get("gbps"), "{:.1f}") for x in SYSTEMS]
        row += [_f(s.get(x, {}).get("fraction_of_triad"), "{:.0%}") for x in SYSTEMS]
        L.append("| " + " | ".join(row) + " |")
    L.append("")

    L.append("## Peak resident memory (MiB)")
    L.append("")
    L.append("Each workload runs in its own process; the peak-RSS counter is reset before "
             "each system, so the numbers are per system: peak RSS during that system's "
             "phase (growth over the RSS at the start of the phase in parentheses). The "
             "process also holds eager's reference outputs during the later phases.")
    L.append("")
    L.append("| workload | " + " | ".join(SYSTEMS) + " |")
    L.append("|---|" + "---:|" * len(SYSTEMS))
    for key, r in results["workloads"].items():
        s = r.get("systems", {})
        cells = []
        for x in SYSTEMS:
            sr = s.get(x, {})
            cells.append("–" if sr.get("peak_rss_mib") is None else
                         f"{sr['peak_rss_mib']:.0f} ({round(sr['peak_rss_delta_mib']):+d})")
        L.append(f"| {key} | " + " | ".join(cells) + " |")
    L.append("")

    L.append("## Where lazyjit's time goes (per steady-state step)")
    L.append("")
    L.append("trace = Python call of the workload (recording ops, no execution); "
             "sync = `lazyjit.sync()` (cache lookup + run); execute = the executor's own "
             "timer from `lazyjit.metrics()`; sync overhead = sync − execute. "
             "ops/step = `ops_traced` per step. compile ms / 50 ops = the first call's compile "
             "time per 50 ops traced (a graph of fewer ops counts as 50: the issue's bound is "
             "100 ms per 50 ops).")
    L.append("")
    L.append("| workload | step ms | trace ms | sync ms | execute ms | sync overhead ms | "
             "ops/step | trace µs/op | graphs/step | compiles (steady) | 1st-call compile ms | "
             "compile ms / 50 ops |")
    L.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for key, r in results["workloads"].items():
        l = r.get("systems", {}).get("lazyjit", {})
        ps = l.get("lazyjit_per_step")
        if not ps:
            L.append(f"| {key} | " + " | ".join(["–"] * 11) + " |")
            continue
        fc = l.get("lazyjit_first", {})
        L.append(f"| {key} | {_ms(l['median_ms'])} | {_ms(ps['trace_ms'])} | "
                 f"{_ms(ps['sync_ms'])} | {_ms(ps['execute_ms'])} | "
                 f"{_ms(ps['sync_overhead_ms'])} | {ps['ops_traced']:.0f} | "
                 f"{_f(ps['trace_us_per_op'], '{:.1f}')} | {ps['graphs_executed']:.2g} | "
                 f"{l['lazyjit_steady']['compiles']} | {_ms(fc.get('compile_ms'))} | "
                 f"{_ms(fc['compile_ms'] * 50 / max(ps['ops_traced'], 50) if fc.get('compile_ms') else None)} |")
    L.append("")
    if tc:
        L.append("## Tracing cost per op")
        L.append("")
        if tc.get("error"):
            L.append(f"lazyjit tracing benchmark failed: `{tc['error']}`")
        else:
            L.append(f"A chain of {tc['ops_per_rep']} small elementwise ops (16 elements, "
                     "mul/add/tanh/sub) recorded without syncing, median of "
                     f"{tc['reps']} repetitions:")
            L.append("")
            L.append("| device | µs/op |")
            L.append("|---|---:|")
            L.append(f"| lazyjit (record only) | {tc['lazyjit_us_per_op']:.2f} |")
            L.append(f"| eager CPU (Python + dispatcher + runs a 16-element kernel) | "
                     f"{tc['cpu_us_per_op']:.2f} |")
            L.append(f"| lazyjit − eager (≈ recording cost beyond PyTorch's per-op overhead) | "
                     f"{tc['lazyjit_minus_eager_us_per_op']:.2f} |")
            L.append("")
            L.append(f"Sync of the recorded chain: first (compile) "
                     f"{tc['lazyjit_first_sync_ms']:.1f} ms, cached {tc['lazyjit_sync_ms']:.2f} ms.")
        L.append("")

    errs = []
    for key, r in results["workloads"].items():
        for x, sr in r.get("systems", {}).items():
            if sr.get("error"):
                errs.append(f"- `{key}` / {x}: `{sr['error'][:600]}`"
                            + (f" (at {sr['error_where']})" if sr.get("error_where") else ""))
            elif sr.get("correct") is False:
                errs.append(f"- `{key}` / {x}: output mismatch: `{(sr.get('correct_error') or '')[:600]}`")
            if sr.get("failed"):
                errs.append(f"- `{key}` / {x}: failed: `{sr['failed'][:600]}`")
    if errs:
        L.append("## Errors and mismatches")
        L.append("")
        L.extend(e.replace("\n", " ") for e in errs)
        L.append("")
    return "\n".join(L)


SCALES = {  # scale -> (warmup, runs, min_time_s, triad elems, triad reps, trace ops, trace reps)
    "full": (3, 10, 2.0, 64 * MiB, 20, 400, 10),
    "quick": (1, 5, 0.0, 8 * MiB, 5, 100, 3),
}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true",
                    help="smoke test: small sizes, 1 warm-up + 5 runs")
    ap.add_argument("--only", default="",
                    help="comma-separated workload keys or prefixes (e.g. a,b1,d)")
    ap.add_argument("--systems", default=",".join(SYSTEMS),
                    help="comma-separated subset of " + ",".join(SYSTEMS) + " (eager is the "
                         "reference for correctness; lazyjit_compile = "
                         "torch.compile(backend=\"lazyjit\") on CPU tensors)")
    ap.add_argument("--warmup", type=int, default=None)
    ap.add_argument("--runs", type=int, default=None)
    ap.add_argument("--min-time", type=float, default=None,
                    help="keep timing past --runs until this many seconds were measured "
                         "(up to --max-runs); more samples for short steps")
    ap.add_argument("--max-runs", type=int, default=50)
    ap.add_argument("--threads", type=int, default=None,
                    help="torch.set_num_threads in the workers (default: torch's default)")
    ap.add_argument("--timeout", type=int, default=900, help="seconds per workload process")
    ap.add_argument("--out", default=None,
                    help="output path stem (default bench/results/latest, or "
                         "bench/results/quick with --quick)")
    ap.add_argument("--render", default=None, metavar="JSON",
                    help="only re-render the markdown next to an existing results JSON")
    ap.add_argument("--no-triad", action="store_true")
    ap.add_argument("--no-tracing", action="store_true")
    # internal
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--worker-out", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--worker-ref", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--rounds", type=int, default=1,
                    help="passes over the systems, each system in its own process every pass, "
                         "alternating; timed samples pooled (default 1)")
    ap.add_argument("--load", action="store_true",
                    help="a competing load: one process spinning on one core during the "
                         "workloads (not during the triad and tracing measurements)")
    ap.add_argument("--scale", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    args.scale = args.scale or ("quick" if args.quick else "full")
    warmup, runs, min_time, triad_n, triad_reps, trace_ops, trace_reps = SCALES[args.scale]
    args.min_time = min_time if args.min_time is None else args.min_time
    args.warmup = warmup if args.warmup is None else args.warmup
    args.runs = runs if args.runs is None else args.runs
    args.systems = [s for s in args.systems.split(",") if s]
    for s in args.systems:
        if s not in SYSTEMS:
            ap.error(f"unknown system {s!r}")

    if args.render:
        jp = Path(args.render)
        jp.with_suffix(".md").write_text(render_markdown(json.loads(jp.read_text())) + "\n")
        return 0
    if args.worker:
        worker(args.worker, args.scale, args.warmup, args.runs, args.systems,
               Path(args.worker_out), args.threads, args.min_time, args.max_runs,
               Path(args.worker_ref) if args.worker_ref else None)
        return 0

    keys = list(WORKLOADS)
    if args.only:
        want = [w.strip() for w in args.only.split(",") if w.strip()]
        keys = [k for k in keys if any(k == w or k.startswith(w) for w in want)]
        if not keys:
            ap.error(f"--only {args.only!r} matches no workload; have {list(WORKLOADS)}")

    t_start = time.perf_counter()
    results = {"machine": machine_info(),
               "config": {"scale": args.scale, "warmup": args.warmup, "runs": args.runs,
                          "systems": args.systems, "workloads": keys,
                          "min_time_s": args.min_time, "max_runs": args.max_runs,
                          "llama_attn": LLAMA_ATTN, "threads": args.threads,
                          "competing_load": "one process spinning on one core" if args.load else None},
               "workloads": {}}
    if args.threads:
        torch.set_num_threads(args.threads)
    if not args.no_triad:
        print("[bench] triad bandwidth ...", file=sys.stderr, flush=True)
        results["triad"] = triad_bandwidth(triad_n, triad_reps)
        print(f"[bench] triad: {results['triad']['gbps_best']:.1f} GB/s", file=sys.stderr,
              flush=True)
    if not args.no_tracing and "lazyjit" in args.systems:
        print("[bench] lazyjit tracing cost ...", file=sys.stderr, flush=True)
        try:
            results["tracing"] = tracing_cost(trace_ops, trace_reps)
        except Exception as e:
            results["tracing"] = {"error": _short_error(e)}
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if args.load else None
    try:
        with tempfile.TemporaryDirectory(prefix="lazyjit-bench-") as tmp:
            for key in keys:
                results["workloads"][key] = run_workload(key, args, Path(tmp))
    finally:
        if spinner is not None:
            spinner.kill()
            spinner.wait()
    results["total_wall_s"] = time.perf_counter() - t_start
    results["machine"]["loadavg_end"] = os.getloadavg()
    summarize(results)

    stem = Path(args.out) if args.out else RESULTS_DIR / ("quick" if args.quick else "latest")
    stem.parent.mkdir(parents=True, exist_ok=True)
    json_path, md_path = stem.with_suffix(".json"), stem.with_suffix(".md")
    json_path.write_text(json.dumps(results, indent=1, default=str) + "\n")
    md = render_markdown(results)
    md_path.write_text(md + "\n")
    print(md)
    print(f"\n[bench] wrote {json_path.relative_to(REPO) if json_path.is_relative_to(REPO) else json_path}"
          f" and {md_path.name} in {results['total_wall_s']:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
