"""Compile time and memory stay bounded (issue 17, items 3 and 5).

- A runaway graph (a loop that never syncs) is cut at LAZYJIT_MAX_GRAPH_OPS and
  run; the cut is counted with its reason and the results are eager's.
- Ctrl-C during a long compile raises KeyboardInterrupt at once, compiles and
  caches nothing, and leaves every pending tensor pending: the next read
  compiles again and gives eager's values.
- Sweeping thousands of distinct shapes keeps the process's memory close to
  eager's: evicted programs give back their JIT code, the buffer pool is bounded.
Each runs in a subprocess: the switches are read once per process."""
import json
import subprocess
import sys

from conftest import PYTHON_DIR, ROOT


def run(code, timeout=600, **env_extra):
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": PYTHON_DIR, "LAZYJIT_CACHE": "off", "LAZYJIT_BACKGROUND_COMPILE": "off", **env_extra}
    p = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True,
                       timeout=timeout)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


CHAIN = """
import json, torch, lazyjit
torch.manual_seed(0)
x = torch.randn(16, 32)
def chain(t, n):
    for i in range(n):
        t = torch.tanh(t) if i % 2 == 0 else t * 0.999 + 0.0005
    return t
# The same length without repeating itself: no two of its kernels are equal, so
# none is reused from another (kernel_key.h) and the compile takes seconds.
def mixed(t, n):
    rng = __import__("random").Random(0)
    ops = [torch.tanh, torch.sigmoid, lambda u: u * 0.999 + 0.0005, lambda u: u - 0.001, torch.sin, torch.cos]
    for i in range(n):
        t = ops[rng.randrange(len(ops))](t)
    return t
"""


def test_a_graph_past_the_op_limit_is_cut_counted_and_correct():
    out = run(CHAIN + """
y = chain(x.to("lazyjit"), 1500)
pending_syncs = lazyjit.metrics()["syncs"]  # cut while recording, before any read
got = y.cpu()
torch.testing.assert_close(got, chain(x, 1500), rtol=1e-5, atol=1e-6)
m = lazyjit.metrics()
print(json.dumps({"syncs_while_recording": pending_syncs, "reasons": m["sync_reasons"]}))
""", LAZYJIT_MAX_GRAPH_OPS="500")
    # 1,500 ops (3 nodes per tanh/mul/add pair and their scalars) of at most 500 nodes each.
    cuts = {k: v for k, v in out["reasons"].items() if "LAZYJIT_MAX_GRAPH_OPS" in k}
    assert cuts and sum(cuts.values()) == out["syncs_while_recording"] >= 3, out


def test_ctrl_c_stops_a_compile_and_loses_nothing():
    out = run(CHAIN + """
import os, signal, threading, time
# Python leaves SIGINT ignored when it starts ignored (a shell's background job):
# this test is about lazyjit's answer to Ctrl-C, so it asks for Python's handler.
signal.signal(signal.SIGINT, signal.default_int_handler)
before = x.to("lazyjit") * 3          # computed before: must survive
before_cpu = before.cpu()
y = mixed(x.to("lazyjit"), 6000)      # several seconds of compile
signalled = []
def ctrl_c():
    signalled.append(time.perf_counter())
    os.kill(os.getpid(), signal.SIGINT)
threading.Timer(0.5, ctrl_c).start()
t0 = time.perf_counter()
try:
    y.cpu()
    interrupted = False
except KeyboardInterrupt:
    interrupted = True
t1 = time.perf_counter()
stopped_after = t1 - t0
latency = t1 - signalled[0] if signalled else None  # from the signal to the KeyboardInterrupt
m = lazyjit.metrics()
after_interrupt = {"compiles": m["compiles"], "llvm_compiles": m["llvm_compiles"]}
torch.testing.assert_close(before.cpu(), before_cpu)
t0 = time.perf_counter()
torch.testing.assert_close(y.cpu(), mixed(x, 6000), rtol=1e-5, atol=1e-6)
full_compile = time.perf_counter() - t0
print(json.dumps({"interrupted": interrupted, "after_interrupt": after_interrupt,
                  "compiles": lazyjit.metrics()["compiles"],
                  "stopped_after": stopped_after, "latency": latency, "full_compile": full_compile}))
""", LAZYJIT_MAX_GRAPH_OPS="100000")
    assert out["interrupted"], out
    # docs/reliability.md: KeyboardInterrupt 0.13 s after the signal (the poll runs every
    # 10 ms). Asserted with slack for a loaded 2-core machine: under 2 s, and a small
    # part of what the whole compile then took (16.5 s measured), so an interrupt
    # that only lands when the compile ends fails.
    assert out["latency"] is not None and out["latency"] < 2.0, out
    assert out["latency"] < 0.25 * out["full_compile"], out
    # The interrupted compile produced nothing (`before`'s one program of one
    # kernel is all there is); the retry built one program.
    assert out["after_interrupt"] == {"compiles": 1, "llvm_compiles": 1}, out
    assert out["compiles"] == 2, out


SWEEP = """
import json, os, sys, torch, lazyjit
dev = sys.argv[1]
def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
torch.manual_seed(0)
for b in range(1, 3001):  # 3,000 distinct shapes, up to 750 KB per tensor
    x = torch.randn(b, 64)
    got = torch.nn.functional.layer_norm(torch.tanh(x.to(dev) * 2 + 1), (64,)).sum().item()
    if b % 500 == 0:
        want = torch.nn.functional.layer_norm(torch.tanh(x * 2 + 1), (64,)).sum().item()
        assert abs(got - want) <= 1e-3 * max(1.0, abs(want)), (b, got, want)
m = lazyjit.metrics()
print(json.dumps({"rss": rss_mb(), "compiles": m["compiles"], "shape_binds": m["shape_binds"]}))
"""


def test_memory_over_3000_distinct_shapes_stays_near_eager():
    # Both processes import lazyjit; "eager" runs the same loop on CPU tensors.
    def sweep(dev):
        env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": PYTHON_DIR, "LAZYJIT_CACHE": "off", "LAZYJIT_BACKGROUND_COMPILE": "off",
               "LAZYJIT_RECOMPILE_LIMIT": "100000"}
        p = subprocess.run([sys.executable, "-c", SWEEP, dev], env=env, cwd=ROOT, capture_output=True, text=True,
                           timeout=1200)
        assert p.returncode == 0, p.stderr[-3000:]
        return json.loads(p.stdout.strip().splitlines()[-1])
    eager, lazy = sweep("cpu"), sweep("lazyjit")
    # One program per shape: compiled for the first, bound to each later size.
    assert lazy["compiles"] + lazy["shape_binds"] == 3000 and lazy["compiles"] <= 3, lazy
    # Before: 1,490 MB against eager's 276 MB (pooled blocks of every size,
    # fragmented heap, IR text kept per program, 1,024 programs in memory).
    assert lazy["rss"] <= 1.5 * eager["rss"], (lazy, eager)
