"""What tests/gpu shares with tests/cuda_sim.

A test marked kernels_only needs the CUDA target's kernels (with ATen's steps)
and nothing of CUDA itself: no stream, caching allocator, CUDA graph, cuBLAS
epilogue, CUDA generator or profiler. tests/cuda_sim/test_cuda_sim_gpu_tests.py
runs each such test under LAZYJIT_TARGET=cuda-sim as well, with its module's DEV
set to "cpu": CPU eager is the oracle there and the kernels run on the simulated
GPU. Here, under LAZYJIT_TARGET=cuda, the mark changes nothing. A marked test
reads the device from its module's DEV at run time (not at import).
"""
import os

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def kernels_only(test):
    test.kernels_only = True
    return test


# CUDA-vs-CUDA tolerances: both sides run float32 on the same GPU, but with
# other reduction orders and libdevice against CUDA's math library.
def assert_close(actual, expected, rtol=1e-5, atol=1e-5):
    assert actual.device == expected.device, (actual.device, expected.device)
    torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol)
