// How a GPU launches one FusedKernel: threads per block, elements a thread takes
// per step, the width of its vector accesses, and for row kernels whether a
// row is one warp's or one block's. Chosen once per kernel by the planner
// (plan.cpp) from the kernel's sizes at trace time, kept in the plan (plan_io,
// Plan::str) and followed by a GPU target (targets/cuda/). The CPU target
// ignores it: its code and its cache keys never depend on it.
//
// Sizes at trace time are a hint: whatever is chosen stays correct for any
// sizes at run time (kernels loop grid-stride over elements and rows, lanes
// and threads stride over a row's cols), only perhaps slower.
//
// The rule (choose_launch_shape), after what CUDA eager and Inductor do:
//  - Plain kernels: vector_width is what one 16-byte access holds of the
//    widest element the kernel loads (non-broadcast) or stores: 4 for
//    float32, 8 for float16/bfloat16, 2 for float64; 1 when a load is not
//    contiguous over the flat index at the traced strides (broadcast loads
//    are fine), for Cat kernels, and when fewer elements than one vector.
//    It is halved while vector_width copies of the kernel's nodes would pass
//    kMaxLaneNodes (code size). elements_per_thread = vector_width (one
//    16-byte access per operand per step, as ATen's vectorized elementwise
//    kernels). block: by the threads the kernel needs (elements /
//    elements_per_thread): under 2^15 threads 128 (small kernels spread over
//    more SMs), from 2^22 on 512, else 256. Tiny kernels keep 128 (not their
//    thread count rounded to a warp): the block is code (maxntid, so part of
//    the kernel's key), and equal kernels at nearby sizes should share it.
//  - Row kernels, with cols = the product of the col dims and rows = the
//    product of the row dims: Warp rows (one warp a row, kWarpRowsPerBlock
//    rows a block, reductions by warp shuffles only: no shared memory, no
//    barriers) when cols <= kWarpRowMaxCols, unless there are fewer rows
//    than kWarpRowsPerBlock and cols > kFewRowsMaxCols (a few long rows
//    would leave most of the GPU idle: one block a row spreads each over
//    more threads); ATen's softmax takes a warp per row up to 1024 cols,
//    Inductor's persistent reductions likewise keep a short row in registers.
//    Otherwise Block rows (one block a row, warp shuffles then shared memory
//    across warps), block = the power of two >= cols / kBlockRowColsPerThread,
//    clamped to [32, 1024] (ATen's SoftMax_getBlockSize). Warp rows: block =
//    32 x min(rows, kWarpRowsPerBlock) warps. Row kernels are not vectorized:
//    vector_width = elements_per_thread = 1.
#pragma once
#include <cstdint>
#include <string>

#include "graph_ir/graph.h"

namespace lazyjit::lowering {

struct FusedKernel;

struct LaunchShape {
  enum class Rows : uint8_t {
    Block,  // one block a row (grid-stride over rows); plain kernels say Block too
    Warp,   // one warp a row, block / 32 rows a block
  };
  int32_t block = 256;              // threads per block: a multiple of 32 in [32, 1024]
  int32_t elements_per_thread = 1;  // consecutive elements a thread takes per step: a multiple of vector_width
  int32_t vector_width = 1;         // elements per vector access (16 bytes at most); 1: scalar accesses
  Rows rows = Rows::Block;          // row kernels only

  // Row kernels in Warp mode: rows one block runs at once.
  int32_t rows_per_block() const { return rows == Rows::Warp ? block / 32 : 1; }
  // "block=128 ept=4 vec=4", row kernels "block=128 rows=warp".
  std::string str(bool row) const;
  // Empty when valid, else what is wrong ("block of 100 threads ...").
  std::string invalid(bool row) const;
  bool operator==(const LaunchShape& o) const {
    return block == o.block && elements_per_thread == o.elements_per_thread && vector_width == o.vector_width &&
           rows == o.rows;
  }
  bool operator!=(const LaunchShape& o) const { return !(*this == o); }
};

constexpr int32_t kWarpRowMaxCols = 1024;
constexpr int32_t kWarpRowsPerBlock = 4;
constexpr int32_t kFewRowsMaxCols = 256;
constexpr int32_t kBlockRowColsPerThread = 4;
constexpr size_t kMaxLaneNodes = 256;

// The rule above, for a kernel whose sizes, loads, stores and nodes are final
// (after coalescing).
LaunchShape choose_launch_shape(const ir::Graph& g, const FusedKernel& k);

}  // namespace lazyjit::lowering
