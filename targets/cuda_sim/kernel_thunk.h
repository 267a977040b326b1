// A kernel of the cuda-sim target: the CUDA target's kernel run on a simulated
// GPU over CPU tensors (sim_launch.h), with the GPU's grid, block and parameters.
#pragma once
#include <cstddef>
#include <memory>

#include "executor/thunk.h"
#include "lowering/program.h"

namespace lazyjit::executor {

// The thunk of kernel step `step` of `p` on the simulated GPU. A kernel with
// no SimKernel gets the CPU's thunk (a CPU program's kernel runs as on the
// CPU; one with no code fails its step saying so). Throws std::invalid_argument for another target's kernel (one
// compiled for a real GPU: targets/cuda/kernel_thunk.h runs those).
std::unique_ptr<Thunk> simulated_kernel_thunk(const lowering::Program& p, size_t step);

}  // namespace lazyjit::executor
