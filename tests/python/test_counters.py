"""The counters say what happened (issue 41): with background compiles, the
sync that takes the finished program is not a cache miss, the miss is
explained once and as what it was, and compiles still running are reported as
such rather than as `compiles: 0`. Values are checked against eager."""
import json
import os
import subprocess
import sys

from conftest import PYTHON_DIR, ROOT

LOOP = r"""
import json, os, torch, lazyjit
torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 32))
x = torch.randn(16, 32)
with torch.no_grad():
    want = m(x)
    lm, lx = m.to("lazyjit"), x.to("lazyjit")
    for step in range(3):
        torch.testing.assert_close(lm(lx).cpu(), want)
        if step == 0:
            lazyjit.wait_for_compiles()  # the program is ready for step 1
mt = lazyjit.metrics()
print(json.dumps({k: mt[k] for k in ("cache_misses", "cache_hits", "background_taken", "background_syncs",
                                     "background_compiles", "background_finished", "compiles")}
                 | {"reasons": mt["compile_reasons"]}))
"""

PENDING = r"""
import os, sys, torch, lazyjit
x = torch.randn(16, 32)
torch.testing.assert_close((x.to("lazyjit").sin() * 2).cpu(), x.sin() * 2)
sys.stdout.write(lazyjit.metrics_report())
sys.stdout.flush()
os._exit(0)  # not waiting for the compile, which sleeps in its disk write
"""


def run(code, **extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAZYJIT_")}
    env.update(PYTHONPATH=PYTHON_DIR, LAZYJIT_BACKGROUND_COMPILE="on", LAZYJIT_CACHE="off")
    env.update({k: str(v) for k, v in extra.items()})
    p = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return p.stdout


def test_taking_a_background_program_is_not_a_miss():
    m = json.loads(run(LOOP).strip().splitlines()[-1])
    # Step 0 misses and starts the compile (running op by op); step 1 takes
    # the program; step 2 hits it.
    assert m["cache_misses"] == 1 and m["background_taken"] == 1 and m["cache_hits"] == 1, m
    assert m["background_compiles"] == m["background_finished"] == m["compiles"] == 1, m
    assert m["background_syncs"] == 1, m
    # One miss, explained as what it was: a graph never seen.
    assert m["reasons"] == {"new graph": 1}, m


def test_a_compile_still_running_is_reported_as_such(tmp_path):
    # The disk write of the compiled program sleeps 30 s (a test hook), so the
    # compile is still running when the report is read.
    report = run(PENDING, LAZYJIT_CACHE="on", LAZYJIT_CACHE_DIR=tmp_path, LAZYJIT_TEST_PAUSE_IN_WRITE="*")
    counters = dict(l.strip().split(": ") for l in report.splitlines() if l.startswith("  ") and ": " in l)
    assert counters["background_compiles"] == "1" and counters["background_finished"] == "0", report
    assert counters["disk_writes"] == "0", report  # the program is compiled (or compiling), not yet written
    assert "1 compile is still queued or running in the background" in report, report
