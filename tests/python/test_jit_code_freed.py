"""The code of evicted programs is freed (issue 48, defect 7).

With LAZYJIT_MAX_PROGRAMS small, a few hundred distinct graphs must not leave
their machine code mapped: each kernel's code lives in executable pages of its
own (a JITDylib), which go when the last program using the kernel is dropped.
Before, every kernel stayed mapped (and at vm.max_map_count compiles failed
with "Failed to materialize symbols").
"""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SCRIPT = r"""
import json, sys, torch, lazyjit

OPS = [torch.sin, torch.cos, torch.sigmoid, torch.tanh]  # no error grows along a chain

def chain(i, x):
    # Graph i: six unary ops picked by i's base-4 digits, so each i is a graph
    # (and a fused kernel) of its own.
    for _ in range(6):
        x = OPS[i % 4](x)
        i //= 4
    return x

def exec_pages():
    # Executable anonymous mappings (where JIT code lives), in 4 KiB pages:
    # adjacent ones merge, so pages count what a mapping count would miss.
    pages = maps = 0
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split()
            if "x" in parts[1] and len(parts) < 6:
                lo, hi = (int(v, 16) for v in parts[0].split("-"))
                pages += (hi - lo) // 4096
                maps += 1
    return pages, maps

x = torch.randn(64, dtype=torch.float64)
lx = x.to("lazyjit")
bad = []
def run(i):
    got = chain(i, lx).cpu()
    if not torch.allclose(got, chain(i, x), rtol=1e-7, atol=1e-9):
        bad.append(i)

N = int(sys.argv[1])
for i in range(20):  # LLVM, the allocator and the JIT's own pages settle
    run(i)
before = exec_pages()
for i in range(20, 20 + N):
    run(i)
after = exec_pages()
for i in range(20):  # evicted long ago: compiled again, still right
    run(i)
m = lazyjit.metrics()
print(json.dumps({"before": before, "after": after, "bad": bad, "misses": m["cache_misses"],
                  "llvm_compiles": m["llvm_compiles"]}))
"""

MAX_PROGRAMS = 4
GRAPHS = 300


def test_evicted_programs_free_their_code():
    env = dict(os.environ, LAZYJIT_MAX_PROGRAMS=str(MAX_PROGRAMS), LAZYJIT_CACHE="off",
               LAZYJIT_BACKGROUND_COMPILE="off", LAZYJIT_RECOMPILE_LIMIT="100000",
               PYTHONPATH=os.path.join(ROOT, "python"))
    p = subprocess.run([sys.executable, "-c", SCRIPT, str(GRAPHS)], env=env, cwd=ROOT, capture_output=True,
                       text=True, timeout=240)
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["bad"] == [], out
    # Every graph compiled (none found in a cache), the first 20 twice.
    assert out["misses"] >= GRAPHS + 40, out
    assert out["llvm_compiles"] >= GRAPHS + 40, out
    grew_pages = out["after"][0] - out["before"][0]
    grew_maps = out["after"][1] - out["before"][1]
    # At most MAX_PROGRAMS programs (one kernel each) are alive: a few pages
    # each. Kept code would be at least a page per graph (GRAPHS pages).
    limit = 8 * MAX_PROGRAMS
    assert grew_pages < limit and grew_maps < limit, (
        f"{GRAPHS} distinct graphs with LAZYJIT_MAX_PROGRAMS={MAX_PROGRAMS} left {grew_pages} more executable "
        f"pages in {grew_maps} more mappings (limit {limit}): {out}")
