// A fused kernel the CUDA target compiled (targets/cuda/device_kernel.h), loaded
// into a device's context at its first run there (module_loads.h) and
// launched on PyTorch's current CUDA stream (device_launch.h).
#pragma once
#include <cstddef>
#include <memory>

#include "executor/thunk.h"
#include "lowering/program.h"

namespace lazyjit::executor {

// The thunk of kernel step `step` of `p` on the GPU; it loads nothing until it
// runs. A kernel with no device kernel fails its step when run, saying it has
// no code to run. Throws std::invalid_argument for a kernel of
// another target (cuda-sim's: targets/cuda_sim/kernel_thunk.h runs those).
std::unique_ptr<Thunk> cuda_kernel_thunk(const lowering::Program& p, size_t step);

}  // namespace lazyjit::executor
