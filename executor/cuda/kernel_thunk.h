// A fused kernel the CUDA target compiled and loaded (lowering/device_kernel.h),
// launched on PyTorch's current CUDA stream (device_launch.h).
#pragma once
#include <cstddef>
#include <memory>

#include "executor/thunk.h"
#include "lowering/program.h"

namespace lazyjit::executor {

// The thunk of kernel step `step` of `p` on the GPU. A kernel with no device
// kernel (none loaded) gets the CPU's thunk, whose run fails saying it has no
// code to run. Throws std::invalid_argument for a kernel of the cuda-sim
// target (simulated_kernel_thunk runs those).
std::unique_ptr<Thunk> cuda_kernel_thunk(const lowering::Program& p, size_t step);

}  // namespace lazyjit::executor
