"""What the bench scripts that time fresh processes (first_op.py, warm_start.py) share
about the host: its load, which build of lazyjit a process ran, and running a process
while no build rewrites the library under it.

Other people may rebuild lazyjit while a bench runs. A process that imports the
extension while the linker writes it fails ("file too short"), and results taken
across a rebuild mix two builds. run_built() holds a shared flock on the lock file
the builders hold (`flock /tmp/lazyjit-build.lock ninja -C build`) while its process
runs, retries a process whose `import lazyjit` failed, and build_stamp() names the
library each sample ran (its mtime), so a report can say how many builds it saw.
"""
from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LIBRARY = REPO / "python" / "lazyjit" / "lib" / "liblazyjit.so"
BUILD_LOCK = os.environ.get("LAZYJIT_BENCH_BUILD_LOCK", "/tmp/lazyjit-build.lock")


def loadavg() -> str:
    """The first three fields of /proc/loadavg (1, 5, 15 minutes)."""
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def build_stamp() -> str:
    """The lazyjit library's modification time (UTC), or "?" without one."""
    try:
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(LIBRARY.stat().st_mtime))
    except OSError:
        return "?"


def _import_failed(p: subprocess.CompletedProcess) -> bool:
    err = p.stderr or ""
    return p.returncode != 0 and "lazyjit" in err and ("ImportError" in err or "OSError" in err)


def run_built(cmd: list, retries: int = 5, wait_s: float = 20.0, **kw) -> tuple[subprocess.CompletedProcess, str]:
    """subprocess.run(cmd, capture_output=True, text=True, **kw) under a shared lock on
    BUILD_LOCK (a build holding it exclusively waits, and we wait for one); a run whose
    `import lazyjit` failed is retried. Returns (the process, build_stamp() it ran)."""
    for i in range(retries):
        with open(BUILD_LOCK, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_SH)
            stamp = build_stamp()
            p = subprocess.run(cmd, capture_output=True, text=True, **kw)
        if not _import_failed(p) or i + 1 == retries:
            return p, stamp
        print(f"[bench] import lazyjit failed (a rebuild?); retrying in {wait_s:.0f} s: "
              f"{p.stderr.strip().splitlines()[-1][:200]}", file=sys.stderr, flush=True)
        time.sleep(wait_s)
    raise AssertionError("unreachable")
