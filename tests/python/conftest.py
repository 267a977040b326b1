"""Shared fixtures for lazyjit's Python tests.

Eager PyTorch on the CPU is the oracle everywhere: each test runs the same
program on CPU tensors and on "lazyjit" tensors and compares.
"""
import os
import subprocess
import sys
import time

import pytest
import torch

# Tests count compiles, so by default no process of the suite reads or writes
# an on-disk cache (a warm ~/.cache/lazyjit would turn compiles into loads);
# the disk tier's tests (test_disk_cache.py) turn it on with their own dirs.
os.environ.setdefault("LAZYJIT_CACHE", "off")
# Likewise compiles happen in the foreground, where a test can count them at the
# sync that caused them; test_background_compile.py turns the worker on.
os.environ.setdefault("LAZYJIT_BACKGROUND_COMPILE", "off")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PYTHON_DIR = os.path.join(ROOT, "python")
if PYTHON_DIR not in sys.path:
    sys.path.insert(0, PYTHON_DIR)


def _import_lazyjit():
    # The extension may be relinked while the suite starts; retry briefly.
    for attempt in range(4):
        try:
            import lazyjit  # noqa: F401
            return lazyjit
        except ImportError:
            if attempt == 3:
                raise
            time.sleep(10)


lazyjit = _import_lazyjit()

DEV = "lazyjit"


def caller_line():
    """The caller's current line number (use on the same line as the op under test)."""
    import inspect
    return inspect.currentframe().f_back.f_lineno


def eager_error(fn):
    """The exception eager PyTorch raises running fn."""
    with pytest.raises(Exception) as info:
        fn()
    return info.value


@pytest.fixture(autouse=True)
def _lazy_mode():
    """Every test starts and ends in lazy mode with nothing pending."""
    lazyjit.set_mode("lazy")
    yield
    lazyjit.set_mode("lazy")
    lazyjit.sync()


@pytest.fixture
def fresh():
    """Empty compile cache and zeroed metrics, for tests that count compiles."""
    lazyjit.sync()
    lazyjit.clear_cache()
    lazyjit.reset_metrics()
    yield lazyjit
    lazyjit.sync()


@pytest.fixture
def fresh_dynamo():
    """Dynamo's caches and lazyjit.dynamo's counters empty before and after, for the
    torch.compile(backend="lazyjit") test files (`pytestmark = pytest.mark.usefixtures(...)`)."""
    import lazyjit.dynamo

    torch._dynamo.reset()
    lazyjit.dynamo.reset_stats()
    yield
    torch._dynamo.reset()


def run_python(code: str, env_extra=None, timeout=120) -> subprocess.CompletedProcess:
    """Runs `code` in a fresh interpreter that imports lazyjit from this checkout."""
    env = dict(os.environ)
    env.pop("LAZYJIT_DUMP", None)
    env.pop("LAZYJIT_MODE", None)
    env["PYTHONPATH"] = PYTHON_DIR + os.pathsep + env.get("PYTHONPATH", "")
    env.update(env_extra or {})
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT)
    assert proc.returncode == 0, f"subprocess failed:\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return proc


def cpu_has(*flags: str) -> bool:
    """Whether the CPU reports any of `flags` in /proc/cpuinfo (e.g. "avx512_bf16")."""
    try:
        have = set(open("/proc/cpuinfo").read().split())
    except OSError:
        return False
    return any(f in have for f in flags)
