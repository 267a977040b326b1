"""Graphs that run op by op (while their program compiles in the background,
or past the recompile limit with LAZYJIT_ON_RECOMPILE_LIMIT=op_by_op) run as eager
ran them: a layer norm the tracer decomposed into row nodes runs as ATen's one
native_layer_norm, and a structure run op by op again at new sizes reuses its
op-by-op plan. Eager PyTorch is the oracle, bit for bit.

Each test runs its own process with the eager stance: the first compile at the
site uses the budget (LAZYJIT_RECOMPILE_LIMIT=1), every later new shape
(LAZYJIT_DYNAMIC=off) runs op by op.
"""
import json

from conftest import run_python

EAGER_STANCE = {"LAZYJIT_BACKGROUND_COMPILE": "off", "LAZYJIT_DYNAMIC": "off", "LAZYJIT_RECOMPILE_LIMIT": "1",
                "LAZYJIT_ON_RECOMPILE_LIMIT": "op_by_op", "LAZYJIT_CACHE": "off"}

LAYER_NORMS = r"""
import json, torch, lazyjit
import torch.nn.functional as F
torch.manual_seed(0)
L = lambda t: None if t is None else t.to("lazyjit")
results = []
def one(shape, normalized, weight, bias, dtype, eps=1e-5, compiled=False):
    x = torch.randn(shape, dtype=dtype) * 3 + 1
    w = torch.randn(normalized, dtype=dtype) if weight else None
    b = torch.randn(normalized, dtype=dtype) if bias else None
    want = torch.native_layer_norm(x, normalized, w, b, eps)
    got = [t.cpu() for t in torch.native_layer_norm(L(x), normalized, L(w), L(b), eps)]
    same = all(g.dtype == e.dtype and g.shape == e.shape and torch.equal(g, e) for g, e in zip(got, want))
    fn = F.layer_norm(L(x), normalized, L(w), L(b), eps).cpu()
    same = same and torch.equal(fn, F.layer_norm(x, normalized, w, b, eps))
    if compiled:  # generated code: within float32 rounding of eager's kernel
        same = all(torch.allclose(g, e, rtol=1e-5, atol=1e-5) for g, e in zip(got, want))
    results.append([str(shape), str(dtype), same])
one((41, 7), (7,), True, True, torch.float32, compiled=True)  # the one compile
for rows in [20, 3, 1, 0, 97]:
    one((rows, 256), (256,), True, True, torch.float32)
for shape, normalized in [((3, 5, 7), (5, 7)), ((2, 4, 6), (2, 4, 6)), ((6, 1), (1,))]:
    one(shape, normalized, False, False, torch.float32)
one((4, 9), (9,), True, False, torch.float32, 1e-2)
one((4, 9), (9,), False, True, torch.float64)
one((2, 3, 8), (8,), True, True, torch.bfloat16)
one((5, 16), (16,), True, True, torch.float16)
m = lazyjit.metrics()
print(json.dumps({"results": results, "op_by_op_syncs": m["op_by_op_syncs"], "compiles": m["compiles"]}))
"""


def test_layer_norm_op_by_op_is_eagers_native_layer_norm_bit_for_bit(tmp_path):
    trace = tmp_path / "trace.json"
    proc = run_python(LAYER_NORMS, env_extra={**EAGER_STANCE, "LAZYJIT_TRACE": str(trace)})
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["op_by_op_syncs"] > 20, out  # op by op indeed, past the one compile
    wrong = [r for r in out["results"] if not r[2]]
    assert not wrong, wrong
    events = json.loads(trace.read_text())
    events = events["traceEvents"] if isinstance(events, dict) else events
    steps = [e for e in events if e.get("cat") == "execute" and e.get("ph") == "X"]
    native = [e for e in steps if e["name"] == "aten::native_layer_norm" and e.get("args", {}).get("kind") == "op_by_op"]
    assert len(native) > 20, sorted({e["name"] for e in steps})
    # Not its pieces: no op-by-op rsqrt (only a layer norm makes one here).
    assert not [e for e in steps if e["name"] == "lazyjit::rsqrt"], sorted({e["name"] for e in steps})


def test_a_hand_written_layer_norm_and_its_intermediates_run_node_by_node():
    # x - mean and the variance are read outside the normalization: nothing to
    # group, every value as the user's own ops compute it.
    proc = run_python(r"""
import json, torch, lazyjit
torch.manual_seed(0)
def norm(x):
    mu = x.mean(-1, keepdim=True)
    d = x - mu
    var = (d * d).mean(-1, keepdim=True)
    y = torch.nn.functional.layer_norm(x, (x.shape[-1],))
    return d * torch.rsqrt(var + 1e-5), y, var
same = []
for n in [41, 5, 9, 2]:
    x = torch.randn(n, 33)
    got = [t.cpu() for t in norm(x.to("lazyjit"))]
    want = norm(x)
    same.append(all(torch.allclose(g, w, rtol=1e-5, atol=1e-6) for g, w in zip(got, want)))
    if n != 41:  # op by op (41 compiled): eager's layer norm itself
        same.append(torch.equal(got[1], want[1]))
print(json.dumps({"same": same, "op_by_op_syncs": lazyjit.metrics()["op_by_op_syncs"]}))
""", env_extra=EAGER_STANCE)
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["op_by_op_syncs"] == 3 and all(out["same"]), out


def test_a_structure_run_op_by_op_again_at_new_sizes_gives_eagers_results():
    # The op-by-op plan made for the first size serves the others (its steps and
    # buffer frees follow from the structure); views, broadcasts and a matmul.
    proc = run_python(r"""
import json, torch, lazyjit
torch.manual_seed(0)
w0 = torch.randn(8, 16)
def f(x):
    w = w0.to(x.device)
    h = torch.nn.functional.gelu(x @ w.t() + 1.5, approximate="tanh")
    s = h[:, 1:5].sum(-1, keepdim=True)
    return torch.softmax(h * s, -1).transpose(0, 1).contiguous(), h.relu().mean()
same = []
for n in [50, 7, 1, 13, 0, 64, 7]:
    x = torch.randn(n, 16)
    got = [t.cpu() for t in f(x.to("lazyjit"))]
    want = f(x)
    same.append(all(g.shape == e.shape and torch.allclose(g, e, rtol=1e-5, atol=1e-6, equal_nan=True)
                    for g, e in zip(got, want)))
print(json.dumps({"same": same, "op_by_op_syncs": lazyjit.metrics()["op_by_op_syncs"]}))
""", env_extra=EAGER_STANCE)
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["op_by_op_syncs"] == 6 and all(out["same"]), out
