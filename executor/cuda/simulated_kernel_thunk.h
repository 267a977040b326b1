// A kernel of the cuda-sim target: the CUDA target's kernel run on a simulated
// GPU over CPU tensors (sim_launch.h), with the GPU's grid, block and parameters.
#pragma once
#include <cstddef>
#include <memory>

#include "executor/thunk.h"
#include "lowering/program.h"

namespace lazyjit::executor {

// The thunk of kernel step `step` of `p` on the simulated GPU. A kernel with
// no device kernel gets the CPU's thunk, whose run fails saying it has no code
// to run. Throws std::invalid_argument for a kernel loaded for a real GPU
// (cuda_kernel_thunk runs those).
std::unique_ptr<Thunk> simulated_kernel_thunk(const lowering::Program& p, size_t step);

}  // namespace lazyjit::executor
