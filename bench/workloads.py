"""The bench's workloads (``WORKLOADS``, ``make_workload``), the issue's targets
(``TARGETS``) and the output comparison every system is checked with (``to_cpu``,
``compare``): importable without running anything. bench/run.py is the command
line; tests/python/test_bench_workloads.py uses these at tiny sizes.
"""
from __future__ import annotations

import contextlib
import math
import os
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

REPO = Path(__file__).resolve().parents[1]
RESULTS_DIR = REPO / "bench" / "results"
# lazyjit = the device (.to("lazyjit") + lazyjit.sync()); lazyjit_compile =
# torch.compile(fn, backend="lazyjit") on CPU tensors (python/lazyjit/dynamo.py);
# lazyjit_device_compile = torch.compile(fn, backend="lazyjit") on the device: the
# workload built for device "lazyjit" as the lazyjit system's, then compiled (g_decode:
# model.forward), each call followed by lazyjit.sync() (issue 57).
SYSTEMS = ("eager", "lazyjit", "inductor", "lazyjit_compile", "lazyjit_device_compile")
COMPILE_BACKENDS = {"inductor": "inductor", "lazyjit_compile": "lazyjit",
                    "lazyjit_device_compile": "lazyjit"}
# The systems whose workload runs on the lazyjit device (built for "lazyjit", each call
# followed by lazyjit.sync()), and those that use torch.compile(backend="lazyjit").
DEVICE_SYSTEMS = ("lazyjit", "lazyjit_device_compile")
LAZYJIT_BACKEND_SYSTEMS = ("lazyjit_compile", "lazyjit_device_compile")
LAZYJIT_SYSTEMS = ("lazyjit",) + LAZYJIT_BACKEND_SYSTEMS
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


def small_ops_40(x):
    """small_ops and 10 more elementwise ops: the "40 small ops" of issue 57's target."""
    y = small_ops(x)                     # 1-30
    y = torch.erf(y * 0.7)               # 31 mul, 32 erf
    y = y + torch.reciprocal(x.abs() + 2.0)  # 33 abs, 34 add, 35 reciprocal, 36 add
    y = torch.floor(y * 4.0) / 4.0       # 37 mul, 38 floor, 39 div
    return torch.square(y)               # 40 square (pow)


SMALL_OPS_40_COUNT = 40


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


class SmallOps40(SmallOps):
    key = "f40_small_ops"
    title = "40 small ops on 8×8"

    def build(self, device):
        fn, args = super().build(device)
        return small_ops_40, args

    def describe(self):
        return (f"{self.title}: small_ops and 10 more elementwise ops ({SMALL_OPS_40_COUNT} "
                f"in all) on [{self.size[0]}, {self.size[1]}] float32, per call "
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

    def build(self, device, compile_backend: str | None = None, compile_fn=None):
        """compile_backend: torch.compile's backend for the model's forward; or
        compile_fn, a function that compiles it (the GPU bench's systems)."""
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
            compile_fn = lambda f: torch.compile(f, backend=compile_backend)  # noqa: E731
        if compile_fn:
            model.forward = compile_fn(model.forward)
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
                                LlamaLayerBF16Matmul, MLPTrain, SmallOps, SmallOps40, LlamaDecode)}

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


# Issue 57's bench targets for torch.compile(backend="lazyjit") on the device
# (lazyjit_device_compile), checked in their own table: a decode step through generate
# at least as fast as the backend on CPU tensors (lazyjit_compile); "40 small ops" at
# least 5x eager, checked on f40_small_ops (40 ops); f_small_ops (30, unchanged so that
# its history compares) is held to the same ratio.
DEVICE_COMPILE_TARGETS = {
    "g_decode": {"vs_lazyjit_compile": 1.0},
    "f40_small_ops": {"vs_eager": 5.0},
    "f_small_ops": {"vs_eager": 5.0},
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


def select_workloads(ap, only: str | None, names) -> list:
    """The workload keys --only names (comma-separated keys or key prefixes), in
    `names`' order; all of them without --only. ap.error()s when it names none."""
    keys = list(names)
    if only:
        want = [w.strip() for w in only.split(",") if w.strip()]
        keys = [k for k in keys if any(k == w or k.startswith(w) for w in want)]
        if not keys:
            ap.error(f"--only {only!r} matches no workload; have {list(names)}")
    return keys


def compare(got, want, rtol=None, atol=None, device=None, tolerance=None) -> dict:
    """assert_close with PyTorch's default tolerances for the dtype (or rtol/atol, or
    `tolerance(dtype)` -> {"rtol", "atol"}), each tensor pair moved to `device` first
    when given; never raises. -> {"ok", "max_abs_diff", "error"}."""
    res = {"ok": True, "max_abs_diff": 0.0, "error": None}
    try:
        g, w = dict(_flatten(got)), dict(_flatten(want))
        if g.keys() != w.keys():
            raise AssertionError(f"output structure differs: {sorted(g)} vs {sorted(w)}")
        for k in w:
            gk, wk = (g[k].to(device), w[k].to(device)) if device else (g[k], w[k])
            if gk.shape == wk.shape and gk.numel():
                d = (gk.double() - wk.double()).abs().max().item()
                res["max_abs_diff"] = max(res["max_abs_diff"], d)
            tol = tolerance(wk.dtype) if tolerance else {"rtol": rtol, "atol": atol}
            torch.testing.assert_close(gk, wk, **tol, msg=lambda m, k=k: f"{k}: {m}")
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
