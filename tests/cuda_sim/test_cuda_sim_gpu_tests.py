"""The tests of tests/gpu that need only the CUDA target's kernels (marked
kernels_only there: tests/gpu/gpu_shared.py) under cuda-sim: the same test
functions, collected here with their module's DEV set to "cpu", so CPU eager is
the oracle and what they move to lazyjit (or compile with torch.compile) runs
the CUDA target's kernels on the simulated GPU. The tests that need CUDA itself
(streams, the caching allocator, CUDA graphs, cuBLAS, CUDA's generator and
profiler) stay GPU-only. Each test here must launch kernels on the simulated
GPU (device_kernel_launches grows): one that ran none would pass against CPU
eager without testing a kernel."""
import functools
import os
import sys

import pytest
from _pytest.fixtures import getfixturemarker

import lazyjit as _lazyjit
from conftest import ROOT, launches

sys.path.insert(0, os.path.join(ROOT, "tests", "gpu"))
import test_cuda_backend  # noqa: E402
import test_device_route  # noqa: E402
import test_launch_shapes  # noqa: E402
import test_transformers_cuda  # noqa: E402

MODULES = [test_launch_shapes, test_cuda_backend, test_device_route, test_transformers_cuda]


@pytest.fixture(name="lazyjit")
def _lazyjit_module():
    """tests/gpu's fixture of that name: the lazyjit module."""
    return _lazyjit


def _on_the_simulated_gpu(test):
    @functools.wraps(test)
    def run(*args, **kwargs):
        before = launches()
        test(*args, **kwargs)
        assert launches() > before, f"{test.__name__} launched no kernel on the simulated GPU"
    return run


def _kernels_only_tests():
    """The marked tests of MODULES, and the fixtures those modules define."""
    tests, fixtures = {}, {}
    for mod in MODULES:
        mod.DEV = "cpu"
        for name, obj in vars(mod).items():
            if getattr(obj, "kernels_only", False):
                assert name not in tests, f"two kernels_only tests named {name}"
                tests[name] = _on_the_simulated_gpu(obj)
            elif getfixturemarker(obj) is not None:
                assert name not in fixtures, f"two fixtures named {name}"
                fixtures[name] = obj
    return tests, fixtures


SHARED, FIXTURES = _kernels_only_tests()
globals().update(FIXTURES)
globals().update(SHARED)


def test_every_gpu_module_with_kernels_only_tests_is_collected_here():
    """A tests/gpu module that marks a test kernels_only must be in MODULES."""
    gpu = os.path.join(ROOT, "tests", "gpu")
    marking = sorted(f[:-3] for f in os.listdir(gpu) if f.startswith("test_") and f.endswith(".py")
                     and "@kernels_only" in open(os.path.join(gpu, f)).read())
    assert marking == sorted(m.__name__ for m in MODULES)
    assert len(SHARED) >= 18
