// Runs one kernel of the cuda-sim target (targets/cuda_sim/sim_target.h) on
// its simulated GPU (targets/cuda_sim/sim_grid.h) over CPU tensors: the
// cuda-sim counterpart of launch_device_kernel (device_launch.h), for a
// SimKernel (kernel_thunk.h runs it). The launch is the GPU's: the same
// grid (device_grid), block and parameters (targets/cuda/device_kernel.h).
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "targets/cuda_sim/sim_grid.h"
#include "lowering/plan.h"

namespace lazyjit::executor {

// As launch_device_kernel: stores are new CPU tensors, filled with 0xff bytes
// first (NaN as floats: an element the kernel does not write shows), or
// `into`'s, when contiguous and of the value's type; returns whether the kernel
// stored a NaN or Inf when `check_stores`. Blocks run on ATen's threads.
bool launch_simulated_kernel(const lowering::FusedKernel& k, const lowering::cuda_sim::SimKernel& sim,
                             const std::vector<int64_t>& dims, const ir::Graph& g, std::vector<at::Tensor>& env,
                             const std::vector<int64_t>& scalars,
                             const std::vector<std::pair<ir::ValueId, at::Tensor>>& into, bool check_stores);

}  // namespace lazyjit::executor
