"""lazyjit benchmark: eager PyTorch vs lazyjit vs torch.compile(backend="inductor").

    bash bench/run.sh            # full run, writes bench/results/latest.{json,md}
    bash bench/run.sh --quick    # smoke test: small sizes, few runs

Each workload runs in its own subprocess (``--worker NAME``), which runs the three
systems one after another (eager, lazyjit, inductor) on identical, seeded inputs
and weights, checks lazyjit's and Inductor's outputs against eager's with
``torch.testing.assert_close``, and measures each system's peak resident memory
separately (the kernel's peak-RSS counter is reset between systems). The parent
process measures the machine's memory bandwidth (a STREAM-like triad) and
lazyjit's per-op tracing cost, collects everything and writes the JSON and the
markdown table. See bench/README.md for what each number means.

The workload definitions (``WORKLOADS``, ``make_workload``) are importable without
running anything; tests/python/test_bench_workloads.py uses them at tiny sizes.
"""
from __future__ import annotations

import argparse
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
SYSTEMS = ("eager", "lazyjit", "inductor")
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
    sizes: dict = {}

    def __init__(self, scale: str = "full"):
        self.scale = scale
        self.size = self.sizes[scale]

    # -> (fn, args); fn(*args) is one step and returns the output to compare
    def build(self, device: str):
        raise NotImplementedError

    def state_to_compare(self, built):
        """Extra tensors (e.g. parameters after training) compared at the end."""
        return None

    def bytes_moved(self) -> int | None:
        return None

    def describe(self) -> str:
        return self.title


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


class MLPTrain(Workload):
    key = "e_mlp_train"
    title = "MLP block training step (fwd+bwd+AdamW)"
    no_grad = False
    train = True
    sizes = {"full": (256, 1024), "quick": (64, 256), "tiny": (8, 32)}

    def build(self, device, compile_inductor: bool = False):
        batch, width = self.size
        torch.manual_seed(3)
        model = MLPBlock(width).train()
        g = torch.Generator().manual_seed(7)
        x = torch.randn(batch, width, generator=g)
        y = torch.randn(batch, width, generator=g)
        model = model.to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
        fwd = torch.compile(model, backend="inductor") if compile_inductor else model
        opt_step = torch.compile(opt.step, backend="inductor") if compile_inductor else opt.step

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


WORKLOADS = {w.key: w for w in (GeluPrimitive, Softmax, LayerNorm, MLPForward, LlamaLayer,
                                MLPTrain)}

# The targets (bench/README.md): min speedup over eager, over inductor, and for
# memory-bound ones the minimum fraction of measured triad bandwidth.
TARGETS = {
    "a_gelu": {"vs_eager": 3.0, "vs_inductor": 1.0, "bandwidth": 0.70},
    "b1_softmax": {"vs_eager": 3.0, "vs_inductor": 1.0},
    "b2_layer_norm": {"vs_eager": 3.0, "vs_inductor": 1.0},
    "c_mlp": {"vs_eager": 1.3, "vs_inductor": 1.0},
    "d_llama_layer": {"vs_eager": 1.3, "vs_inductor": 1.0},
    "e_mlp_train": {"vs_eager": 1.3, "vs_inductor": 1.0},
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


def run_system(wl: Workload, system: str, warmup: int, runs: int, min_time_s: float = 0.0,
               max_runs: int = 50) -> tuple[dict, object, object]:
    """Returns (result, first-call output on CPU, (last output, compare-state) on CPU)."""
    lazyjit = import_lazyjit() if system == "lazyjit" else None
    device = "lazyjit" if system == "lazyjit" else "cpu"
    res = {"system": system}
    t_build = time.perf_counter()
    if system == "inductor" and wl.train:
        built = wl.build("cpu", compile_inductor=True)
        fn, args = built
    else:
        built = wl.build(device)
        fn, args = built
        if system == "inductor":
            fn = torch.compile(fn, backend="inductor")
    if lazyjit is not None:
        lazyjit.sync()  # materialize the inputs/weights copied to the device
    res["build_s"] = time.perf_counter() - t_build

    grad_ctx = torch.no_grad if wl.no_grad else torch.enable_grad
    split = []  # lazyjit: (trace s, sync s) of the last step

    def step():
        with grad_ctx():
            if lazyjit is None:
                return fn(*args)
            t0 = time.perf_counter()
            out = fn(*args)
            t1 = time.perf_counter()
            lazyjit.sync()
            split[:] = [t1 - t0, time.perf_counter() - t1]
            return out

    m0 = lazyjit.metrics() if lazyjit else None
    t0 = time.perf_counter()
    out = step()
    res["first_call_ms"] = 1e3 * (time.perf_counter() - t0)
    first = to_cpu(out)
    del out
    m1 = lazyjit.metrics() if lazyjit else None
    warm_ms = []
    for _ in range(warmup):
        tw = time.perf_counter()
        step()
        warm_ms.append(1e3 * (time.perf_counter() - tw))
    res["warmup_ms"] = warm_ms
    m2 = lazyjit.metrics() if lazyjit else None
    # timed runs: at least `runs`, and more (up to max_runs) until min_time_s of
    # measured time, so that short steps get enough samples on a noisy machine
    times, per_step = [], []
    out = None
    while len(times) < runs or (sum(times) < min_time_s and len(times) < max_runs):
        out = None
        mb = lazyjit.metrics() if lazyjit else None  # metrics reads stay outside the timing
        t0 = time.perf_counter()
        out = step()
        times.append(time.perf_counter() - t0)
        if lazyjit:
            d = _lz_metrics_delta(mb, lazyjit.metrics())
            d["trace_ms"], d["sync_ms"] = 1e3 * split[0], 1e3 * split[1]
            per_step.append(d)
    m3 = lazyjit.metrics() if lazyjit else None
    last = to_cpu(out)
    state = to_cpu(wl.state_to_compare(built))
    res["times_ms"] = [1e3 * t for t in times]
    res["median_ms"] = 1e3 * median(times)
    res["min_ms"] = 1e3 * min(times)
    res["warmup"] = warmup
    res["runs"] = len(times)
    if lazyjit is not None:
        n = len(times)
        res["lazyjit_first"] = _lz_metrics_delta(m0, m1)
        res["lazyjit_warmup"] = _lz_metrics_delta(m1, m2)
        steady = _lz_metrics_delta(m2, m3)
        res["lazyjit_steady"] = steady
        med = lambda k: median([d[k] for d in per_step])  # noqa: E731
        ps = {
            "ops_traced": steady["ops_traced"] / n,
            "trace_ms": med("trace_ms"),
            "sync_ms": med("sync_ms"),
            "execute_ms": med("execute_ms"),
            # what a sync costs beyond running the compiled program: cache lookup,
            # binding, launch (+ any steady-state compile)
            "sync_overhead_ms": median([d["sync_ms"] - d["execute_ms"] for d in per_step]),
            "compile_ms": steady["compile_ms"] / n,
            "compiles": steady["compiles"] / n,
            "graphs_executed": steady["graphs_executed"] / n,
            "syncs": steady["syncs"] / n,
        }
        ps["trace_us_per_op"] = 1e3 * ps["trace_ms"] / ps["ops_traced"] if ps["ops_traced"] else None
        res["lazyjit_per_step"] = ps
    return res, first, (last, state)


def worker(key: str, scale: str, warmup: int, runs: int, systems: list[str], out_path: Path,
           threads: int | None, min_time_s: float = 0.0, max_runs: int = 50) -> None:
    if threads:
        torch.set_num_threads(threads)
    import_error = None
    if "lazyjit" in systems:
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
    for system in systems:
        can_reset = reset_peak_rss()
        rss_before, _ = rss_kib()
        print(f"[bench] {key}: {system} ...", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        try:
            if system == "lazyjit" and import_error:
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
            elif ref_first is not None:
                c_first = compare(first, ref_first)
                # A training step's later outputs depend on how many steps each
                # system ran (run counts adapt to speed): compare the first step.
                c_last = (compare(last, ref_last) if not getattr(wl, "train", False)
                          else {"ok": True, "max_abs_diff": 0.0, "error": None})
                res["correct"] = c_first["ok"] and c_last["ok"]
                res["max_abs_diff"] = max(c_first["max_abs_diff"], c_last["max_abs_diff"])
                res["correct_error"] = c_first["error"] or c_last["error"]
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


def run_worker_subprocess(key, args, tmpdir: Path) -> dict:
    out = tmpdir / f"{key}.json"
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", key,
           "--worker-out", str(out), "--warmup", str(args.warmup), "--runs", str(args.runs),
           "--systems", ",".join(args.systems), "--scale", args.scale,
           "--min-time", str(args.min_time), "--max-runs", str(args.max_runs)]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    env = dict(os.environ)
    # a fresh Inductor cache per workload: "first call" is a cold compile, not a
    # cache hit from an earlier bench run
    env["TORCHINDUCTOR_CACHE_DIR"] = str(tmpdir / f"inductor-cache-{key}")
    # likewise lazyjit's on-disk cache: "1st call" is a cold compile
    env["LAZYJIT_CACHE_DIR"] = str(tmpdir / f"lazyjit-cache-{key}")
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
        for s in args.systems:
            if s not in done:
                result["systems"][s] = {"system": s, "error": err,
                                        "log_tail": log[-2000:]}
                break
        result["worker_error"] = err
        result["worker_log_tail"] = log[-4000:]
    return result


def summarize(results: dict) -> None:
    """Speedups, bandwidth fractions, target checks (in place)."""
    triad = results["triad"]["gbps_best"] if results.get("triad") else None
    for key, r in results["workloads"].items():
        s = r.get("systems", {})
        lz = s.get("lazyjit", {}).get("median_ms")
        eg = s.get("eager", {}).get("median_ms")
        ind = s.get("inductor", {}).get("median_ms")
        sm = {}
        sm["speedup_vs_eager"] = eg / lz if (eg and lz) else None
        sm["speedup_vs_inductor"] = ind / lz if (ind and lz) else None
        sm["inductor_vs_eager"] = eg / ind if (eg and ind) else None
        if triad:
            for name, sr in s.items():
                if sr.get("gbps"):
                    sr["fraction_of_triad"] = sr["gbps"] / triad
        tg = TARGETS.get(key, {})
        checks = {}
        if "vs_eager" in tg:
            checks["vs_eager"] = (sm["speedup_vs_eager"] is not None
                                  and sm["speedup_vs_eager"] >= tg["vs_eager"])
        if "vs_inductor" in tg:
            checks["vs_inductor"] = (sm["speedup_vs_inductor"] is not None
                                     and sm["speedup_vs_inductor"] >= tg["vs_inductor"])
        if "bandwidth" in tg:
            f = s.get("lazyjit", {}).get("fraction_of_triad")
            checks["bandwidth"] = f is not None and f >= tg["bandwidth"]
        checks["correct"] = s.get("lazyjit", {}).get("correct") is True
        sm["targets"] = tg
        sm["target_checks"] = checks
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
    if tr:
        L.append(f"- Measured bandwidth (triad a = b + s·c, {tr['array_mib']:.0f} MiB arrays, "
                 f"best of {tr['reps']}): **{tr['gbps_best']:.1f} GB/s** "
                 f"(1 thread {tr['gbps_1_thread']:.1f}, {tr['threads_all_threads']} threads "
                 f"{tr['gbps_all_threads']:.1f})")
    L.append("")
    L.append("## Summary")
    L.append("")
    L.append("Times are medians of the timed runs (ms). Speedups are ratios of medians: "
             "`eager/lazyjit` and `inductor/lazyjit` (> 1 means lazyjit is faster). "
             "First call = first step including compilation. min = fastest timed step "
             "(eager / lazyjit / inductor), less sensitive to a busy machine.")
    L.append("")
    L.append("| workload | eager ms | lazyjit ms | inductor ms | eager/lazyjit | "
             "inductor/lazyjit | lazyjit 1st call ms | inductor 1st call ms | "
             "lazyjit correct | inductor correct | min ms e / l / i | targets |")
    L.append("|---|---:|---:|---:|---:|---:|---:|---:|:-:|:-:|---:|---|")
    for key, r in results["workloads"].items():
        s = r.get("systems", {})
        e, l, i = s.get("eager", {}), s.get("lazyjit", {}), s.get("inductor", {})
        sm = r.get("summary", {})
        chk = sm.get("target_checks", {})
        tg = sm.get("targets", {})
        parts = []
        if "vs_eager" in tg:
            parts.append(f"≥{tg['vs_eager']:g}× eager {'✓' if chk.get('vs_eager') else '✗'}")
        if "vs_inductor" in tg:
            parts.append(f"≥{tg['vs_inductor']:g}× ind. {'✓' if chk.get('vs_inductor') else '✗'}")
        if "bandwidth" in tg:
            parts.append(f"≥{100 * tg['bandwidth']:.0f}% BW {'✓' if chk.get('bandwidth') else '✗'}")
        L.append(
            f"| {key} | {_ms(e.get('median_ms'))} | "
            f"{'**error**' if l.get('error') else _ms(l.get('median_ms'))} | "
            f"{'**error**' if i.get('error') else _ms(i.get('median_ms'))} | "
            f"{_f(sm.get('speedup_vs_eager'), '{:.2f}×')} | "
            f"{_f(sm.get('speedup_vs_inductor'), '{:.2f}×')} | "
            f"{_ms(l.get('first_call_ms'))} | {_ms(i.get('first_call_ms'))} | "
            f"{_corr(l)} | {_corr(i)} | "
            f"{' / '.join(_ms(x.get('min_ms')) for x in (e, l, i))} | {'; '.join(parts)} |")
    L.append("")
    L.append("Workloads:")
    for key, r in results["workloads"].items():
        L.append(f"- `{key}`: {r.get('description', '')}")
    L.append("")

    L.append("## Bandwidth (memory-bound workloads)")
    L.append("")
    L.append("GB/s = compulsory bytes (inputs read once + output written once) / median time; "
             "% = of the measured triad bandwidth (DRAM: its arrays exceed the L3). A working "
             "set that fits in the last-level cache can exceed 100%.")
    L.append("")
    L.append("| workload | MB moved | eager GB/s | lazyjit GB/s | inductor GB/s | eager % | "
             "lazyjit % | inductor % |")
    L.append("|---|---:|---:|---:|---:|---:|---:|---:|")
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
    L.append("| workload | eager | lazyjit | inductor |")
    L.append("|---|---:|---:|---:|")
    for key, r in results["workloads"].items():
        s = r.get("systems", {})
        cells = []
        for x in SYSTEMS:
            sr = s.get(x, {})
            cells.append("–" if sr.get("peak_rss_mib") is None else
                         f"{sr['peak_rss_mib']:.0f} (+{sr['peak_rss_delta_mib']:.0f})")
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
                    help="comma-separated subset of eager,lazyjit,inductor (eager is the "
                         "reference for correctness)")
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
               Path(args.worker_out), args.threads, args.min_time, args.max_runs)
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
                          "llama_attn": LLAMA_ATTN, "threads": args.threads},
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
    with tempfile.TemporaryDirectory(prefix="lazyjit-bench-") as tmp:
        for key in keys:
            results["workloads"][key] = run_worker_subprocess(key, args, Path(tmp))
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
