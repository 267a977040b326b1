// A kernel compiled for a GPU (the CUDA target, targets/cuda/): what a launch
// needs, without LLVM or CUDA headers: its launch data, the image of its
// module and its function's name. Nothing here is loaded: the executor loads
// the image into the context of each device the kernel runs on, at its first
// run there (targets/cuda/module_loads.h), and launches it through the driver
// API (targets/cuda/driver.h) on PyTorch's current stream.
//
// The kernel's parameters, in order:
//  1. one `ptr addrspace(1)` per buffer load of the FusedKernel (loads with
//     scalar_index < 0, in `loads` order), then one per store (in `stores` order);
//  2. when Plan::check_stores: one `ptr addrspace(1)` to a device int32 that the
//     kernel sets to 1 when a float32/float64 value it stores is NaN or Inf;
//  3. `i64 total`: Grid::Elements: the product of the kernel's sizes; Grid::Rows:
//     the number of rows (the product of its row dims);
//  4. the kernel's dims (lowering::kernel_dims(k), D int64s) passed by value as
//     one `.param` array (`ptr byval([D x i64]) align 8` in LLVM IR), with each
//     scalar's slot entry replaced by the scalar's own 64 bits (a double's bits
//     for a floating scalar, an int64 otherwise): the GPU reads scalars there.
// A kernel never reads past `total` and is correct for any grid size (it loops
// over its work grid-stride), so a launch picks the grid freely; a plain kernel
// needs no more than ceil(total / elements_per_thread) threads, a row kernel no
// more than ceil(rows / rows_per_block) blocks.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include "lowering/target.h"

namespace lazyjit::lowering {

struct DeviceKernel : KernelLaunch {
  enum class Grid {
    Elements,  // plain kernels: one thread per element of the iteration space
    Rows,      // row kernels: rows_per_block rows a block (one block, or one warp, a row)
  };
  // The CUDA target: the kernel's module image, a cubin (PTX when no ptxas was
  // found: the driver JIT-compiles it at load), owned by the CompiledCode that
  // hands this out; and the kernel's function in it (a PTX identifier).
  std::string_view image;
  std::string symbol;
  Grid grid = Grid::Elements;
  int32_t block = 256;       // threads per block (a multiple of 32)
  int32_t shared_bytes = 0;  // dynamic shared memory per block
  // Grid::Elements: consecutive elements one thread takes per step of its
  // grid-stride loop (vectorized kernels, targets/cuda/kernel_emitter.h: 4 for
  // float32, 8 for float16). A launch needs only ceil(total / this) threads
  // (more are harmless: they find no work). Always 1 for Grid::Rows.
  int32_t elements_per_thread = 1;
  // Grid::Rows: rows a block runs at once: block / 32 for warp rows (one warp
  // a row, LaunchShape::Rows::Warp), 1 for block rows. Always 1 for Elements.
  int32_t rows_per_block = 1;
};

// Plan kernel `i`'s launch in `code` when it is the CUDA target's; null
// otherwise (another target's code, or a kernel with no launch).
inline const DeviceKernel* device_kernel(const CompiledCode& code, size_t i) {
  return dynamic_cast<const DeviceKernel*>(code.kernel(i));
}

}  // namespace lazyjit::lowering
