// Runs one fused kernel the CUDA target compiled (targets/cuda/device_kernel.h) on
// PyTorch's current CUDA stream: the GPU counterpart of launch_kernel
// (targets/cpu/kernel_launch.h). Nothing here links CUDA: tensors come through ATen's
// dispatch (PyTorch's CUDA caching allocator), streams through c10's device
// guard interface, the launch through the driver API (targets/cuda/driver.h).
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "targets/cuda/module_loads.h"
#include "targets/cuda/device_kernel.h"
#include "lowering/plan.h"

namespace lazyjit::executor {

// The kernel runs on the device of its first buffer load that is a CUDA tensor
// (the current CUDA device when none is); a load elsewhere (a CPU tensor) is
// copied there first. Its stores are new tensors on that device (a store listed
// in `into` goes into that tensor when it is on that device, contiguous and of
// the value's type). `dims` is lowering::kernel_dims(k). With `check_stores`
// (Plan::check_stores) the kernel gets a NaN/Inf flag, read back after it ran
// (a stream sync): returns whether it stored a NaN or Inf; false otherwise.
// The launch is asynchronous on the stream, as PyTorch's own kernels are.
// `modules` (dk's image) gives the kernel's function on that device: loaded
// there at the kernel's first launch on it.
bool launch_device_kernel(const lowering::FusedKernel& k, const lowering::DeviceKernel& dk, ModuleLoads& modules,
                          const std::vector<int64_t>& dims, const ir::Graph& g, std::vector<at::Tensor>& env,
                          const std::vector<int64_t>& scalars,
                          const std::vector<std::pair<ir::ValueId, at::Tensor>>& into, bool check_stores);

// How many blocks a launch of `dk` over `total` work items (elements, or rows)
// gets; 0: no launch. Kernels loop grid-stride, so a cap only bounds the grid.
// Elements: one thread per dk.elements_per_thread elements; Rows: one block per
// dk.rows_per_block rows.
uint32_t device_grid(const lowering::DeviceKernel& dk, int64_t total);

// The work items of `k` on a GPU (device_kernel.h's `total`): its elements
// (Grid::Elements) or its rows (Grid::Rows).
int64_t device_total(const lowering::FusedKernel& k, lowering::DeviceKernel::Grid grid);

// `dims` (kernel_dims(k)) with each scalar load's slot holding the scalar's own
// 64 bits instead of its index into `scalars`: the GPU reads scalars there.
std::vector<int64_t> device_dims(const lowering::FusedKernel& k, const std::vector<int64_t>& dims,
                                 const std::vector<int64_t>& scalars);

}  // namespace lazyjit::executor
