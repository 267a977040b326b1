// What a simulated GPU thread of the cuda-sim target (LAZYJIT_TARGET=cuda-sim)
// sees: the CUDA target's kernels, rewritten for the host (host_kernel.h), read
// their special registers, shared memory and meeting points (warp shuffles,
// block barriers) through a SimThread the grid runner (sim_grid.h) passes to
// every call. Its layout is fixed: the rewritten IR reads it by byte offset.
#pragma once
#include <cstddef>
#include <cstdint>

namespace lazyjit::lowering::cuda_sim {

struct SimBlock;  // sim_grid.cpp: one block's fibers and warps
struct SimThread;

// shfl.sync: mode (0 up, 1 down, 2 bfly, 3 idx), the 32 bits this lane gives,
// b (lane offset, mask or index), c (clamp and segment mask), member mask.
using ShuffleFn = uint32_t (*)(SimThread*, uint32_t mode, uint32_t value, uint32_t b, uint32_t c, uint32_t mask);
using BarrierFn = void (*)(SimThread*);

struct SimThread {
  // tid.x, ntid.x, ctaid.x, nctaid.x, laneid: at byte 4 * kReg*.
  uint32_t regs[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  void* shared = nullptr;  // this block's shared memory (addrspace(3))
  SimBlock* block = nullptr;
  ShuffleFn shuffle = nullptr;
  BarrierFn barrier = nullptr;
};

enum : int { kRegTid = 0, kRegNtid = 1, kRegCtaid = 2, kRegNctaid = 3, kRegLane = 4 };
inline constexpr size_t kSharedOffset = 32;
inline constexpr size_t kShuffleOffset = 48;
inline constexpr size_t kBarrierOffset = 56;
static_assert(offsetof(SimThread, shared) == kSharedOffset);
static_assert(offsetof(SimThread, shuffle) == kShuffleOffset);
static_assert(offsetof(SimThread, barrier) == kBarrierOffset);

// A kernel's host entry, made by rewrite_for_host: `bufs` holds the kernel's
// pointer parameters in device_kernel.h's order (buffer loads, stores, the
// NaN/Inf flag when it has one), then device_kernel.h's total and dims.
using SimEntry = void (*)(void* const* bufs, int64_t total, const int64_t* dims, SimThread* t);

}  // namespace lazyjit::lowering::cuda_sim
