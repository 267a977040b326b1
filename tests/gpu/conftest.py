"""GPU tests: lazyjit's CUDA target against CUDA eager, on a machine with an
NVIDIA GPU and a CUDA build of PyTorch (bash scripts/gpu_check.sh runs them;
docs/gpu.md). Without a GPU every test here is skipped: the CPU
suite (tests/python, ctest) covers everything up to the PTX and ptxas.

The process runs with LAZYJIT_TARGET=cuda, set before lazyjit is imported.
"""
import os
import sys

import pytest
import torch

os.environ.setdefault("LAZYJIT_TARGET", "cuda")
os.environ.setdefault("LAZYJIT_CACHE", "off")
os.environ.setdefault("LAZYJIT_BACKGROUND_COMPILE", "off")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))

from gpu_shared import assert_close  # noqa: E402,F401  (tests import it from here or from gpu_shared)

HAS_GPU = torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    if HAS_GPU:
        return
    skip = pytest.mark.skip(reason="no CUDA GPU here (torch.cuda.is_available() is False): "
                                   "GPU tests run on the device machine, docs/gpu.md")
    for item in items:
        if "tests/gpu" in str(item.fspath).replace(os.sep, "/"):
            item.add_marker(skip)


@pytest.fixture(scope="session")
def lazyjit():
    import lazyjit as lj
    return lj

