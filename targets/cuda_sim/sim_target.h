// LAZYJIT_TARGET=cuda-sim: the CUDA target's kernels (the same emitter, launch
// shapes, vector widths, warp and block rows, shuffles, barriers and shared
// memory) run on the host CPU, so that every machine runs what the CUDA target
// emits. Per kernel: LLVM IR from the CUDA kernel emitter for NVPTX
// (targets/cuda/kernel_emitter.h), rewritten for the host
// (host_kernel.h), optimized and compiled by LLVM for the host CPU, linked by
// ORC (targets/cpu/jit.h); its launches run on a simulated GPU (sim_grid.h).
// A test target: correct, not fast.
#pragma once
#include <memory>

#include "lowering/target.h"

namespace lazyjit::lowering {

// Its CompiledCode's kernel(i) is a cuda_sim::SimKernel for every kernel
// (sim_grid.h: the CUDA target's launch and the host entry).
// Thread-safe.
std::unique_ptr<Target> make_cuda_sim_target(const CodegenOptions& opts = {});

}  // namespace lazyjit::lowering
