// The cuda-sim target's GPU: runs a kernel rewritten for the host
// (host_kernel.h) over a grid of blocks, one simulated thread per call of its
// entry. A kernel that never meets (no shuffle, no barrier: element kernels)
// runs its threads one after another. A kernel that meets runs each block's
// threads as fibers (ucontext) on the calling host thread, round robin: a
// thread runs until it reaches a shuffle or a barrier, then the next; a warp's
// shuffle completes when its 32 lanes have arrived, a barrier when the block's
// threads have. A barrier or shuffle some threads never reach is an error
// naming the kernel and block, never a hang. Shared memory is the block's own,
// filled with 0xff bytes (NaN as floats) before the block starts, so a read
// before its write shows in the results.
#pragma once
#include <cstdint>
#include <string>

#include "lowering/target.h"
#include "targets/cuda/device_kernel.h"
#include "targets/cuda_sim/sim_thread.h"

namespace lazyjit::lowering::cuda_sim {

// A kernel of the cuda-sim target (CompiledCode::kernel(i) there): the CUDA
// target's launch of it, and its host code.
struct SimKernel : KernelLaunch {
  DeviceKernel launch;  // the GPU's grid, block and shared memory (image empty)
  SimEntry entry = nullptr;
  bool meets = false;        // shuffles or barriers: fibers
  int32_t shared_bytes = 0;  // per block
  std::string name;          // for errors
};

// Runs blocks [first, last) of a grid of `grid` blocks of `block` threads.
// `bufs`, `total`, `dims`: SimEntry's. Blocks are independent: callers may run
// disjoint ranges on several host threads at once. Throws std::runtime_error
// on threads that do not meet, a shuffle over part of a warp, or a kernel that
// meets with a block that is not whole warps.
void run_blocks(const SimKernel& k, void* const* bufs, int64_t total, const int64_t* dims, uint32_t grid,
                uint32_t block, uint32_t first, uint32_t last);

// Plan kernel `i`'s SimKernel in `code` when it is cuda-sim's; null otherwise.
inline const SimKernel* sim_kernel(const CompiledCode& code, size_t i) {
  return dynamic_cast<const SimKernel*>(code.kernel(i));
}

}  // namespace lazyjit::lowering::cuda_sim
