"""Kernels compiled once per kind, not per shape.

Generated kernels are cached by a key of their own IR (lowering/kernel_key.h).
With LAZYJIT_DYNAMIC=auto (the default) every kernel is compiled shape-generic
(sizes read at run time) and serves every later size; =off compiles exact code
per shape. lazyjit.mark_dynamic / mark_static choose per graph; LAZYJIT_DYNAMIC
chooses per process; LAZYJIT_ON_RECOMPILE_LIMIT=op_by_op runs a site's misses op
by op past LAZYJIT_RECOMPILE_LIMIT.

Eager PyTorch on the CPU is the oracle. The switches are read once per process,
so tests that need one run their code in a fresh interpreter (run() below)."""
import copy
import json
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import DEV, PYTHON_DIR, ROOT

# ----------------------------------------------------------------------------- helpers

SWEEP = settings(max_examples=25, deadline=None, derandomize=True, database=None,
                 suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
DIM = st.sampled_from([0, 1, 7, 13, 31, 97])      # rows / cols of 2-D tensors
LEN = st.sampled_from([0, 1, 7, 13, 31, 97, 4099])  # 1-D lengths
LONG = st.one_of(st.sampled_from([0, 1, 4099, 65537, 100000]), st.integers(0, 100000))
TOL = {"rtol": 1e-5, "atol": 1e-6}


def _seeded(seed):
    return torch.Generator().manual_seed(seed)


def randn(*shape, seed=0):
    return torch.randn(*shape, generator=_seeded(seed + 1000 * len(shape) + sum(shape)))


def to_cpu(out):
    if isinstance(out, (tuple, list)):
        return type(out)(to_cpu(o) for o in out)
    return out.cpu()


def to_lazy(t):
    return t.to(DEV) if isinstance(t, torch.Tensor) else t


def check(fn, *inputs, **tol):
    """fn on lazyjit equals fn in eager (or raises where eager raises)."""
    try:
        want = fn(*inputs)
    except Exception:
        with pytest.raises(Exception):
            to_cpu(fn(*[to_lazy(t) for t in inputs]))
        return
    got = to_cpu(fn(*[to_lazy(t) for t in inputs]))
    torch.testing.assert_close(got, want, **tol)


def run(code, *argv, timeout=180, **env_extra):
    """Runs `code` in a fresh interpreter (cwd: the repo root, no on-disk cache);
    returns (the JSON its stdout's last line holds, its stderr)."""
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": PYTHON_DIR, "LAZYJIT_CACHE": "off", "LAZYJIT_BACKGROUND_COMPILE": "off",
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", **env_extra}
    p = subprocess.run([sys.executable, "-c", code, *argv], env=env, cwd=ROOT, capture_output=True, text=True,
                       timeout=timeout)
    assert p.returncode == 0, f"rc={p.returncode}\nstdout:\n{p.stdout[-2000:]}\nstderr:\n{p.stderr[-4000:]}"
    return json.loads(p.stdout.strip().splitlines()[-1]), p.stderr


def line_of(code, marker):
    """The 1-based line of `code` holding `marker` (a subprocess's sync call site is "<string>:LINE")."""
    lines = [i + 1 for i, l in enumerate(code.splitlines()) if marker in l]
    assert len(lines) == 1, (marker, lines)
    return lines[0]


# ----------------------------------------------------------------------------- the programs swept
# Plain functions of (n, m) inputs; the in-process hypothesis sweeps and the
# LAZYJIT_DYNAMIC=all/off subprocess (which imports this module) share them.

def bias_chain(x, b):
    return torch.tanh((x + b) * 0.5) - b


def col_scale(x, y):
    return x * y - torch.sigmoid(x)


def sum_last(x):
    return x.sum(-1), x.sum(-1, keepdim=True) * 2


def mean_last(x):
    return x.mean(-1), x.mean(-1, keepdim=True) + 1


def amax_last(x):
    return x.amax(-1), x.amax(-1, keepdim=True) - x


def softmax_last(x):
    return torch.softmax(x, -1)


def layer_norm(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b)


def transpose_add(x, y):
    return x.t() * 2 + y


def cat_rows(x, y):
    return torch.relu(torch.cat([x, y], 0)) * 3


def cat_cols(x, y):
    return torch.cat([x, y], 1) - 1


def long_sum(v):
    return v.sum()


def inputs_for(name, n, m):
    """The inputs each program above is swept with, at sizes (n, m)."""
    return {
        "bias_chain": lambda: (randn(n, m), randn(m, seed=1)),
        "col_scale": lambda: (randn(n, m), randn(n, 1, seed=1)),
        "sum_last": lambda: (randn(n, m),),
        "mean_last": lambda: (randn(n, m),),
        "amax_last": lambda: (randn(n, m),),
        "softmax_last": lambda: (randn(n, m),),
        "layer_norm": lambda: (randn(n, m), randn(m, seed=1), randn(m, seed=2)),
        "transpose_add": lambda: (randn(n, m), randn(m, n, seed=1)),
        "cat_rows": lambda: (randn(n, m), randn(m, m, seed=1)),
        "cat_cols": lambda: (randn(n, m), randn(n, 2 * m + 1, seed=1)),
    }[name]()


PROGRAMS = {"bias_chain": bias_chain, "col_scale": col_scale, "sum_last": sum_last, "mean_last": mean_last,
            "amax_last": amax_last, "softmax_last": softmax_last, "layer_norm": layer_norm,
            "transpose_add": transpose_add, "cat_rows": cat_rows, "cat_cols": cat_cols}


# ----------------------------------------------------------------------------- 1. size sweeps, in process

@SWEEP
@given(n=DIM, m=DIM)
def test_sweep_broadcast_bias(n, m):
    check(bias_chain, *inputs_for("bias_chain", n, m))


@SWEEP
@given(n=DIM, m=DIM)
def test_sweep_broadcast_column(n, m):
    check(col_scale, *inputs_for("col_scale", n, m))


@SWEEP
@given(n=LEN)
def test_sweep_1d_elementwise(n):
    check(lambda a, b: torch.sin(a) * b + a / (1 + b * b), randn(n), randn(n, seed=1))


@SWEEP
@given(n=DIM, m=DIM)
def test_sweep_reductions_last_dim(n, m):
    x = randn(n, m)
    check(sum_last, x)
    check(mean_last, x, equal_nan=True, **TOL)  # the mean of no elements is nan
    check(amax_last, x)  # eager raises on an empty last dim: so must lazyjit


@SWEEP
@given(n=DIM, m=DIM)
def test_sweep_softmax_and_layer_norm(n, m):
    check(softmax_last, *inputs_for("softmax_last", n, m), **TOL)
    check(layer_norm, *inputs_for("layer_norm", n, m), **TOL)


@SWEEP
@given(n=DIM, m=DIM, data=st.data())
def test_sweep_slices_and_narrow(n, m, data):
    k = data.draw(st.integers(min(1, m), m), label="k")
    start = data.draw(st.integers(0, m), label="start")
    length = data.draw(st.integers(0, m - start), label="length")
    x = randn(n, m)
    check(lambda t: torch.exp(t[:, 1:k]) + t[:, :1], x)
    check(lambda t: t.narrow(1, start, length) * 2 - 1, x)


@SWEEP
@given(n=DIM, m=DIM)
def test_sweep_transposed_operands(n, m):
    check(transpose_add, *inputs_for("transpose_add", n, m))
    check(lambda t: t.t().sum(-1, keepdim=True) + t.t(), randn(n, m))  # a sum: float32's default tolerances


@SWEEP
@given(n=DIM, m=DIM)
def test_sweep_cat(n, m):
    check(cat_rows, *inputs_for("cat_rows", n, m))
    check(cat_cols, *inputs_for("cat_cols", n, m))


@SWEEP
@given(n=LONG)
def test_sweep_long_1d_sum(n):
    check(long_sum, randn(n))


# ----------------------------------------------------------------------------- 1b. LAZYJIT_DYNAMIC=all / off

FIXED_SWEEP = """
import json, sys, torch, lazyjit
sys.path.insert(0, "tests/python")
import test_dynamic_shapes as T
bad = []
sizes = [(7, 13), (13, 7), (1, 31), (31, 1), (0, 7), (7, 0), (97, 97), (2, 3)]
for name, fn in T.PROGRAMS.items():
    for n, m in sizes:
        inputs = T.inputs_for(name, n, m)
        try:
            T.check(fn, *inputs, equal_nan=True)
        except BaseException as e:  # AssertionError or a lazyjit error
            bad.append([name, n, m, type(e).__name__ + ": " + str(e)[:400]])
for n in (0, 1, 4099, 65537, 100000):
    try:
        T.check(T.long_sum, T.randn(n))
    except BaseException as e:
        bad.append(["long_sum", n, None, type(e).__name__ + ": " + str(e)[:400]])
m = lazyjit.metrics()
print(json.dumps({"bad": bad, "llvm_compiles": m["llvm_compiles"], "generic_compiles": m["generic_compiles"],
                  "kernel_hits": m["kernel_hits"]}))
"""


@pytest.mark.parametrize("mode", ["all", "off"])
def test_fixed_sweep_matches_eager_under_dynamic_all_and_off(mode):
    out, _ = run(FIXED_SWEEP, LAZYJIT_DYNAMIC=mode, LAZYJIT_RECOMPILE_LIMIT="100000")
    assert out["bad"] == [], out["bad"]
    assert out["llvm_compiles"] > 0, out
    if mode == "all":  # every kernel shape-generic from its first compile
        assert out["generic_compiles"] == out["llvm_compiles"], out
    else:              # never
        assert out["generic_compiles"] == 0, out


# ----------------------------------------------------------------------------- 2. guards: stride classes

def test_generic_kernel_is_not_reused_across_stride_classes(fresh):
    lazyjit = fresh

    def f(x, y):
        return x * y + x.sum(-1, keepdim=True)

    # Two sizes at one call site: the kernel goes generic for [n, m] * [n, 1].
    for n in (7, 8):
        x, y = randn(n, 13), randn(n, 1, seed=1)
        torch.testing.assert_close(f(x.to(DEV), y.to(DEV)).cpu(), f(x, y), **TOL)
    assert lazyjit.metrics()["generic_compiles"] >= 1, lazyjit.metrics()

    cases = [
        ("y's broadcast dim becomes real", lambda: (randn(9, 13), randn(9, 13, seed=1))),
        ("one row", lambda: (randn(1, 13), randn(1, 1, seed=1))),
        ("one column", lambda: (randn(9, 1), randn(9, 1, seed=1))),
        ("1x1", lambda: (randn(1, 1), randn(1, 1, seed=1))),
        ("row vector y", lambda: (randn(9, 13), randn(1, 13, seed=1))),
        ("back to the generic case", lambda: (randn(11, 13), randn(11, 1, seed=1))),
    ]
    for what, make in cases:
        x, y = make()
        got = f(x.to(DEV), y.to(DEV)).cpu()
        torch.testing.assert_close(got, f(x, y), **TOL, msg=lambda m, what=what: f"{what}: {m}")

    # Views with other strides than the generic kernel was compiled for.
    for what, make in [
        ("transposed x", lambda d: (randn(13, 10).to(d).t(), randn(10, 1, seed=1).to(d))),
        ("strided columns of x", lambda d: (randn(10, 26).to(d)[:, ::2], randn(10, 1, seed=1).to(d))),
        ("offset rows of x", lambda d: (randn(12, 13).to(d)[2:], randn(10, 1, seed=1).to(d))),
        ("transposed y", lambda d: (randn(10, 13).to(d), randn(1, 10, seed=1).to(d).t())),
        ("expanded x", lambda d: (randn(1, 13).to(d).expand(10, 13), randn(10, 1, seed=1).to(d))),
    ]:
        got = f(*make(DEV)).cpu()
        torch.testing.assert_close(got, f(*make("cpu")), **TOL, msg=lambda m, what=what: f"{what}: {m}")


def test_generic_row_kernel_then_other_strides(fresh):
    # softmax/layer_norm row kernels made generic, then fed one row, one column
    # and a transposed (non-contiguous rows) input.
    w, b = randn(16, seed=3), randn(16, seed=4)

    def f(x):
        return torch.softmax(x, -1) + F.layer_norm(x, (16,), w.to(x.device), b.to(x.device))

    for n in (5, 6, 1, 9):
        x = randn(n, 16)
        torch.testing.assert_close(f(x.to(DEV)).cpu(), f(x), **TOL)
    xt = randn(16, 9)
    torch.testing.assert_close(f(xt.to(DEV).t()).cpu(), f(xt.t()), **TOL)
    xs = randn(9, 32)
    torch.testing.assert_close(f(xs.to(DEV)[:, 1::2]).cpu(), f(xs[:, 1::2]), **TOL)


# ----------------------------------------------------------------------------- 3. counters: MLP over 20 batch sizes

MLP = """
import copy, json, torch, lazyjit
import torch.nn as nn
import torch.nn.functional as F
class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.ln = nn.Linear(64, 256), nn.Linear(256, 64), nn.LayerNorm(64)
    def forward(self, x):
        return self.ln(x + self.fc2(F.gelu(self.fc1(x), approximate="tanh")))
torch.manual_seed(0)
ref = Block().eval()
model = copy.deepcopy(ref).to("lazyjit")
sizes = [7, 13, 1, 2, 3, 5, 8, 11, 16, 17, 19, 23, 29, 31, 32, 33, 64, 97, 100, 128]
bad, after_two = [], None
with torch.no_grad():
    for i, b in enumerate(sizes):
        x = torch.randn(b, 64, generator=torch.Generator().manual_seed(b))
        got = model(x.to("lazyjit")).cpu()
        try:
            torch.testing.assert_close(got, ref(x), rtol=1e-5, atol=1e-5)
        except AssertionError as e:
            bad.append([b, str(e)[:300]])
        if i == 1:
            after_two = dict(lazyjit.metrics())
m = lazyjit.metrics()
keys = ("compiles", "llvm_compiles", "kernel_hits", "generic_compiles", "dynamic_dims", "shape_binds")
print(json.dumps({"bad": bad, "after_two": {k: after_two[k] for k in keys}, "after_all": {k: m[k] for k in keys}}))
"""


def test_mlp_over_20_batch_sizes_compiles_kernels_for_two():
    out, _ = run(MLP)
    assert out["bad"] == [], out["bad"]
    two, all_ = out["after_two"], out["after_all"]
    assert two["llvm_compiles"] > 0, out
    assert all_["llvm_compiles"] == two["llvm_compiles"], out
    # One program, compiled for the first size; every other size binds to it.
    assert all_["compiles"] == 1 and all_["shape_binds"] == 19, out
    assert all_["generic_compiles"] >= 1, out


# ----------------------------------------------------------------------------- 4. identical layers share kernels

def _layers_llvm_compiles(lazyjit, n_layers):
    import torch.nn as nn
    torch.manual_seed(n_layers)
    layers = [nn.Sequential(nn.LayerNorm(32), nn.GELU(), nn.Linear(32, 32)) for _ in range(n_layers)]
    ref = [copy.deepcopy(l) for l in layers]
    lazy = [l.to(DEV) for l in layers]
    x = randn(6, 32, seed=n_layers)
    lazyjit.sync()
    lazyjit.clear_cache()
    lazyjit.reset_metrics()
    with torch.no_grad():
        h, r = x.to(DEV), x
        for l, lr in zip(lazy, ref):
            h, r = l(h), lr(r)
        got = h.cpu()  # one graph: all layers
    torch.testing.assert_close(got, r, **TOL)
    m = lazyjit.metrics()
    assert m["compiles"] == 1, m
    return m["llvm_compiles"], m["kernel_hits"]


def test_four_identical_layers_compile_as_many_kernels_as_one(fresh):
    one, _ = _layers_llvm_compiles(fresh, 1)
    four, hits = _layers_llvm_compiles(fresh, 4)
    assert one > 0
    assert four == one, {"1 layer": one, "4 layers": four, "kernel_hits (4 layers)": hits}
    assert hits > 0


# ----------------------------------------------------------------------------- 5. GPT-2 generation

GPT2 = """
import copy, json, sys, torch, lazyjit
from transformers import GPT2Config, GPT2LMHeadModel
from transformers.utils import logging
logging.set_verbosity_error()
torch.manual_seed(0)
cfg = GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=100, n_positions=128)
ref = GPT2LMHeadModel(cfg).eval()
model = copy.deepcopy(ref).to("lazyjit")
out = []
for plen, new in json.loads(sys.argv[1]):
    ids = torch.randint(1, 100, (1, plen), generator=torch.Generator().manual_seed(plen))
    with torch.no_grad():
        want = ref.generate(ids, max_new_tokens=new, do_sample=False, pad_token_id=0)[0].tolist()
        before = lazyjit.metrics()["llvm_compiles"]
        before_compiles = lazyjit.metrics()["compiles"]
        got = model.generate(ids.to("lazyjit"), max_new_tokens=new, do_sample=False, pad_token_id=0).cpu()[0].tolist()
    m = lazyjit.metrics()
    out.append({"want": want, "got": got, "llvm_before": before, "llvm_after": m["llvm_compiles"],
                "compiles": m["compiles"], "generic_compiles": m["generic_compiles"],
                "compiles_before": before_compiles, "shape_binds": m["shape_binds"]})
print(json.dumps(out))
"""


def _generate(*gens):
    out, _ = run(GPT2, json.dumps(gens), timeout=300, LAZYJIT_RECOMPILE_LIMIT="100000")
    for g, (plen, new) in zip(out, gens):
        assert g["got"] == g["want"], (plen, new, g)
        assert len(g["got"]) == plen + new, g
    return out


def test_gpt2_generate_16_and_48_tokens_compile_the_same_kernels():
    (short,), (long_,) = _generate([8, 16]), _generate([8, 48])
    assert short["llvm_after"] > 0
    assert long_["llvm_after"] == short["llvm_after"], {"16 tokens": short, "48 tokens": long_}
    # Programs do not grow with the tokens either: each decode step binds the
    # decode program to its KV length.
    assert long_["compiles"] == short["compiles"], {"16 tokens": short, "48 tokens": long_}
    assert long_["shape_binds"] > short["shape_binds"] > 0, {"16 tokens": short, "48 tokens": long_}


def test_gpt2_second_generate_with_another_prompt_length_compiles_nothing():
    first, second = _generate([8, 16], [11, 20])
    added = second["llvm_after"] - second["llvm_before"]
    assert added == 0, {"first generate llvm_compiles": first["llvm_after"], "second generate added": added}
    # Not even a plan: the prefill at 11 tokens and every decode step bind.
    assert second["compiles"] == second["compiles_before"] == first["compiles"], (first, second)
    assert second["shape_binds"] > first["shape_binds"], (first, second)


# ----------------------------------------------------------------------------- 6. explanations

def test_a_second_size_binds_without_a_compile(fresh):
    lazyjit = fresh
    for n in (7, 8, 1, 300):
        x = randn(n, 16)
        torch.testing.assert_close((torch.tanh(x.to(DEV)) * 3 + 1).cpu(), torch.tanh(x) * 3 + 1)
    rs = lazyjit.explain_recompiles()
    assert [r["kind"] for r in rs] == ["first at this site"], rs
    m = lazyjit.metrics()
    assert m["compiles"] == 1 and m["shape_binds"] == 3 and m["generic_compiles"] >= 1, m


def test_a_size_the_program_does_not_hold_for_is_explained_and_now_dynamic(fresh):
    # y's dim 0 goes 7 -> 8 (binds), then 1: y broadcasts over x's rows, which
    # the code compiled for a y read row by row does not do: a compile, explained.
    lazyjit = fresh
    for xn, yn in ((7, 7), (8, 8), (8, 1)):
        x, y = randn(xn, 16), randn(yn, 16, seed=1)
        torch.testing.assert_close((torch.tanh(x.to(DEV)) * y.to(DEV)).cpu(), torch.tanh(x) * y)
    rs = lazyjit.explain_recompiles()
    assert [r["kind"] for r in rs] == ["first at this site", "new shapes"], rs
    assert "input 1 dim 0: 7 → 1" in rs[1]["detail"] and "now dynamic" in rs[1]["detail"], rs[1]
    assert "now dynamic" not in rs[0]["detail"], rs
    m = lazyjit.metrics()
    assert m["compiles"] == 2 and m["shape_binds"] == 1 and m["dynamic_dims"] >= 1, m


def test_changed_op_is_named_with_where_it_was_recorded(fresh):
    # An attribute of a library op changes (gather's dim): the explanation names
    # the op, the user's line that recorded it, and the old and new value.
    import inspect
    x = torch.randn(4, 4)
    idx = torch.tensor([[0, 1, 2, 3]] * 4)
    xl, il = x.to(DEV), idx.to(DEV)
    lines = []
    for d in (0, 1):
        lines.append(inspect.currentframe().f_lineno + 1)
        y = torch.gather(xl, d, il) * 2
        torch.testing.assert_close(y.cpu(), torch.gather(x, d, idx) * 2)
    r = fresh.explain_recompiles()[-1]
    assert r["kind"] == "new graph", r
    assert f"aten::gather (" in r["detail"] and f"test_dynamic_shapes.py:{lines[1]}): attr 2: 0 → 1" in r["detail"], r


EXPLAIN_OFF = """
import json, torch, lazyjit
for n in (7, 8, 9):
    x = torch.randn(n, 16)
    got = (torch.tanh(x.to("lazyjit")) * 3 + 1).cpu()
    torch.testing.assert_close(got, torch.tanh(x) * 3 + 1)
m = lazyjit.metrics()
print(json.dumps({"rs": lazyjit.explain_recompiles(), "dynamic_dims": m["dynamic_dims"],
                  "generic_compiles": m["generic_compiles"], "llvm_compiles": m["llvm_compiles"]}))
"""


def test_dynamic_off_never_says_now_dynamic():
    out, _ = run(EXPLAIN_OFF, LAZYJIT_DYNAMIC="off")
    rs = out["rs"]
    assert len(rs) == 3 and "input 0 dim 0: 7 → 8" in rs[1]["detail"], rs
    assert not any("now dynamic" in r["detail"] for r in rs), rs
    assert out["dynamic_dims"] == 0 and out["generic_compiles"] == 0, out
    assert out["llvm_compiles"] == 3, out  # exact code per size


# ----------------------------------------------------------------------------- 7. recompile budget stances

BUDGET = """
import json, torch, lazyjit
sizes = [3, 4, 5, 6, 7, 8, 9, 10]
done, bad, error = [], [], None
for n in sizes:
    x = torch.randn(n, 5, generator=torch.Generator().manual_seed(n))
    want = torch.tanh(x) * 2 + x.sum(-1, keepdim=True)
    try:
        got = (torch.tanh(x.to("lazyjit")) * 2 + x.to("lazyjit").sum(-1, keepdim=True)).cpu()  # SITE
    except RuntimeError as e:
        error = {"n": n, "type": type(e).__name__, "msg": str(e)}
        break
    try:
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    except AssertionError as e:
        bad.append([n, str(e)[:300]])
    done.append(n)
    if n == 5:
        at_limit = dict(lazyjit.metrics())
m = lazyjit.metrics()
keys = ("compiles", "llvm_compiles", "op_by_op_syncs", "shape_binds")
print(json.dumps({"done": done, "bad": bad, "error": error, "at_limit": {k: at_limit[k] for k in keys},
                  "end": {k: m[k] for k in keys}, "n_explained": len(lazyjit.explain_recompiles())}))
"""
SITE = f"<string>:{line_of(BUDGET, '# SITE')}"


def _warnings(stderr):
    return [l for l in stderr.splitlines() if "warning" in l.lower() and "lazyjit" in l]


def test_budget_warn_warns_once_and_stays_correct():
    out, err = run(BUDGET, LAZYJIT_RECOMPILE_LIMIT="3", LAZYJIT_ON_RECOMPILE_LIMIT="warn", LAZYJIT_DYNAMIC="off")
    assert out["done"] == [3, 4, 5, 6, 7, 8, 9, 10] and out["bad"] == [], out
    warns = _warnings(err)
    assert len(warns) == 1, err
    assert SITE in warns[0] and "LAZYJIT_RECOMPILE_LIMIT=3" in warns[0] and "5 → 6" in warns[0], warns
    assert out["end"]["compiles"] == 8 and out["end"]["op_by_op_syncs"] == 0, out


def test_budget_error_raises_on_the_fourth_size():
    out, err = run(BUDGET, LAZYJIT_RECOMPILE_LIMIT="3", LAZYJIT_ON_RECOMPILE_LIMIT="error", LAZYJIT_DYNAMIC="off")
    assert out["done"] == [3, 4, 5] and out["bad"] == [], out
    e = out["error"]
    assert e is not None and e["n"] == 6 and e["type"] == "RuntimeError", out
    assert "recompile limit" in e["msg"] and SITE in e["msg"], e
    assert "input 0 dim 0: 5 → 6" in e["msg"], e  # the explanation


def test_budget_eager_runs_past_the_limit_op_by_op():
    out, err = run(BUDGET, LAZYJIT_RECOMPILE_LIMIT="3", LAZYJIT_ON_RECOMPILE_LIMIT="op_by_op", LAZYJIT_DYNAMIC="off")
    assert out["done"] == [3, 4, 5, 6, 7, 8, 9, 10] and out["bad"] == [], out
    assert out["end"]["op_by_op_syncs"] == 5, out
    assert out["end"]["compiles"] == 3 == out["at_limit"]["compiles"], out
    assert out["end"]["llvm_compiles"] == out["at_limit"]["llvm_compiles"], out  # uncompiled
    warns = _warnings(err)
    assert len(warns) == 1 and SITE in warns[0] and "op by op" in warns[0], err


def test_new_sizes_do_not_count_against_the_budget():
    # By default (LAZYJIT_DYNAMIC=auto) a new size binds the program compiled
    # for the first: no compile, nothing to explain or count against
    # LAZYJIT_RECOMPILE_LIMIT, so a sweep (or generate's growing KV length)
    # neither warns nor raises, whatever the stance.
    for stance in ("error", "op_by_op", "eager"):  # "eager": op_by_op's older name
        out, err = run(BUDGET, LAZYJIT_RECOMPILE_LIMIT="3", LAZYJIT_ON_RECOMPILE_LIMIT=stance)
        assert out["done"] == [3, 4, 5, 6, 7, 8, 9, 10] and out["bad"] == [] and out["error"] is None, out
        assert out["end"]["compiles"] == 1 and out["end"]["op_by_op_syncs"] == 0, out
        assert out["end"]["shape_binds"] == 7, out
        assert out["end"]["llvm_compiles"] == out["at_limit"]["llvm_compiles"], out
        assert out["n_explained"] == 1 and _warnings(err) == [], err


BUDGET_GRAPHS = """
import json, torch, lazyjit
for n, extra in ((3, 0), (4, 0), (5, 0), (6, 0), (6, 1), (6, 2), (6, 3)):
    y = torch.ones(n, 5).to("lazyjit")
    for _ in range(extra):  # another graph each time: one more op
        y = y * 2
    y = (y.tanh() + 1).cpu()  # SITE
print(json.dumps({"compiles": lazyjit.metrics()["compiles"], "shape_binds": lazyjit.metrics()["shape_binds"]}))
"""


def test_new_graphs_still_count_while_new_sizes_bind():
    # 3: first (counts); 4, 5, 6: new sizes, bound (no compile); then new
    # graphs at the same site compile and count: the 4th counted is (6, 3).
    out, err = run(BUDGET_GRAPHS, LAZYJIT_RECOMPILE_LIMIT="3", LAZYJIT_ON_RECOMPILE_LIMIT="warn")
    assert out["compiles"] == 4 and out["shape_binds"] == 3, out
    warns = _warnings(err)
    site = f"<string>:{line_of(BUDGET_GRAPHS, '# SITE')}"
    assert len(warns) == 1 and f"4 compiles at {site} (LAZYJIT_RECOMPILE_LIMIT=3)" in warns[0], err
    assert "new graph" in warns[0] or "first op that differs" in warns[0], warns


# ----------------------------------------------------------------------------- 8. mark_dynamic / mark_static

MARKS = """
import json, torch, lazyjit
def f(x):
    return torch.softmax(x * 2, -1) + x.mean(-1, keepdim=True)
snaps, bad = [], []
def step(n, mark):
    x = torch.randn(n, 24, generator=torch.Generator().manual_seed(n))
    lx = x.to("lazyjit")
    if mark:
        getattr(lazyjit, mark)(lx, 0)
    got = f(lx).cpu()
    try:
        torch.testing.assert_close(got, f(x), rtol=1e-5, atol=1e-6)
    except AssertionError as e:
        bad.append([n, str(e)[:300]])
    m = lazyjit.metrics()
    snaps.append({k: m[k] for k in ("llvm_compiles", "generic_compiles", "kernel_hits", "compiles")})
for n, mark in MARK_PLAN:
    step(n, mark)
print(json.dumps({"snaps": snaps, "bad": bad}))
"""


def test_mark_dynamic_compiles_generic_from_the_first_call():
    plan = [(7, "mark_dynamic"), (9, None), (12, "mark_dynamic")]
    out, _ = run(MARKS.replace("MARK_PLAN", repr(plan)))
    assert out["bad"] == [], out
    first, second, third = out["snaps"]
    assert first["llvm_compiles"] > 0 and first["generic_compiles"] == first["llvm_compiles"], out
    assert second["llvm_compiles"] == first["llvm_compiles"], out  # a second size (unmarked): no kernel
    assert third["llvm_compiles"] == first["llvm_compiles"], out   # a third (marked): none either


def test_mark_static_keeps_exact_kernels():
    plan = [(7, "mark_static"), (9, "mark_static"), (12, "mark_static")]
    out, _ = run(MARKS.replace("MARK_PLAN", repr(plan)))
    assert out["bad"] == [], out
    assert [s["generic_compiles"] for s in out["snaps"]] == [0, 0, 0], out
    # exact code per size: each size compiles its kernels again
    l = [s["llvm_compiles"] for s in out["snaps"]]
    assert l[0] > 0 and l[0] < l[1] < l[2], out


@pytest.mark.parametrize("mark", ["mark_dynamic", "mark_static"])
def test_mark_rejects_bad_dims_and_cpu_tensors(mark):
    import lazyjit
    fn = getattr(lazyjit, mark)
    x = torch.randn(3, 4).to(DEV)
    for bad in (5, 2, -3, [0, 5]):
        with pytest.raises(ValueError, match=r"out of range for a tensor of 2 dims"):
            fn(x, bad)
    with pytest.raises(ValueError, match=r"expected a lazyjit tensor, got cpu"):
        fn(torch.randn(3, 4), 0)
    with pytest.raises(ValueError, match="out of range"):
        fn(torch.tensor(1.0).to(DEV), 0)  # a 0-dim tensor has no dim 0
    fn(x, -1)  # in range: accepted
    fn(x, [0, 1])
    torch.testing.assert_close((x * 2).cpu(), x.cpu() * 2)


# ----------------------------------------------------------------------------- 9. binding new sizes

def test_a_fold_or_merge_that_no_longer_holds_is_not_replayed(fresh):
    # At the first sizes x[:a] reads all of x (the view folds away) and x[:b]
    # equals x[:a] (the two merge); at later sizes neither holds. The binder
    # replays the graph passes' decisions only where they still hold.
    lazyjit = fresh
    for n, a, b in ((6, 6, 6), (9, 9, 9), (9, 4, 9), (9, 5, 3), (12, 12, 12), (12, 7, 7)):
        x = randn(n, 8)
        xl = x.to(DEV)
        got = ((xl[:a] * 2).sum(0) + (xl[:b] + 1).sum(0)).cpu()
        torch.testing.assert_close(got, (x[:a] * 2).sum(0) + (x[:b] + 1).sum(0), **TOL)
    m = lazyjit.metrics()
    assert m["compiles"] + m["shape_binds"] == 6 and m["shape_binds"] >= 2, m


def test_bound_programs_agree_with_eager_over_a_size_sweep(fresh):
    # softmax, layer norm, a broadcast bias, a transposed read and a cat over
    # 1..40 rows: one program, bound to each size; some sizes (1: rows that
    # broadcast) may compile.
    lazyjit = fresh
    w, bias = randn(16, 16, seed=3), randn(16, seed=4)
    wl, bl = w.to(DEV), bias.to(DEV)
    for n in [1, 2, 3, 5, 8, 13, 21, 34, 40, 7, 1, 39]:
        x = randn(n, 16, seed=n)
        def f(x, w, b):
            h = torch.nn.functional.layer_norm(x @ w + b, (16,))
            return torch.cat([torch.softmax(h, -1), h.t().contiguous().t() * 2], 0).sum(-1)
        torch.testing.assert_close(f(x.to(DEV), wl, bl).cpu(), f(x, w, bias), rtol=1e-4, atol=1e-5)
    m = lazyjit.metrics()
    assert m["shape_binds"] >= 8 and m["compiles"] <= 4, m
