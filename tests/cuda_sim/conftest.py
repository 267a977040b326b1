"""cuda-sim tests: the CUDA target's own kernels (kernel emitter, launch shapes,
vector widths, warp and block rows, shuffles, barriers, shared memory) run on
the host (LAZYJIT_TARGET=cuda-sim, targets/cuda_sim/), against CPU eager. Every
machine runs them: scripts/test.sh runs this directory in a process of its own.

The process runs with LAZYJIT_TARGET=cuda-sim, set before lazyjit is imported.
"""
import os
import sys

import pytest

os.environ["LAZYJIT_TARGET"] = "cuda-sim"
os.environ.setdefault("LAZYJIT_CACHE", "off")
os.environ.setdefault("LAZYJIT_BACKGROUND_COMPILE", "off")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))

import lazyjit  # noqa: E402

DEV = "lazyjit"


@pytest.fixture(autouse=True)
def _under_cuda_sim():
    assert lazyjit.target() == "cuda-sim"
    lazyjit.set_mode("lazy")
    yield
    lazyjit.sync()


def launches():
    """Kernels launched on the simulated GPU so far."""
    return lazyjit.metrics()["device_kernel_launches"]
