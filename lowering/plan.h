// Lowering, target-independent half: splits a graph into program steps and
// fuses elementwise chains into loop nests. No LLVM here; a Target (target.h)
// turns each FusedKernel into machine code.
//
// Before: graph verified (and, in the pipeline, dead code removed by the "dce"
// graph pass). After: every node no output needs is skipped, every other one is
// covered by exactly one step or is a source (Input/Scalar); steps are in
// dependency order.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "graph_ir/graph.h"
#include "lowering/launch_shape.h"
#include "lowering/op_by_op_groups.h"
#include "lowering/row_schedule.h"

namespace lazyjit::lowering {

using ir::DType;
using ir::ValueId;

// How a kernel reads one external value: element (i0..ik) of the iteration
// space lives at `offset + sum_d i_d * strides[d]` elements from the buffer's
// start. Broadcast dims have stride 0. A scalar argument has no buffer: it is
// slot `scalar_index` of the scalar array (a double for floating dtypes, an
// int64 otherwise).
struct Access {
  ValueId operand;      // the value id node operands refer to
  ValueId value;        // the buffer read (for a folded AsStrided: its source)
  DType dtype;          // element type in memory
  std::vector<int64_t> strides;  // one per iteration dim
  int64_t offset = 0;
  int32_t scalar_index = -1;     // >= 0: a scalar argument, no buffer
  // >= 0: operand `piece` of the kernel's Cat nodes, read only in that piece of
  // the cat dim (FusedKernel::cat_dim), with `offset` shifted back by the
  // piece's start, so that the kernel's own index reads the operand's element.
  int32_t piece = -1;
};

// A fused loop nest. Buffer arguments of the compiled function, in order: one
// per load with scalar_index < 0, then one per store.
//
// A row kernel (`row`) also holds trailing-dim reductions. Its iteration space
// `sizes` is [rows..., cols...] where the last `reduce_rank` dims (the cols) are
// the dims its reductions reduce; the "row space" is `sizes` with the cols set
// to 1. Its nodes are, per `row_space`:
//  - full-space nodes (false): elementwise nodes whose output has `sizes`; they
//    may read row-space values (broadcast over the cols);
//  - row-space nodes (true): the reductions (ReduceSum/Max/Min from the full
//    space to the row space, all over the same cols) and elementwise nodes whose
//    output has the row-space sizes.
// Rows are independent, and the outermost dim is a row dim, so KernelFn's
// [begin, end) splits rows. After coalescing a row kernel has >= 1 row dim and
// exactly `reduce_rank` >= 1 col dims (usually sizes = [R, C]). Loads read by
// row-space nodes have stride 0 over the cols. Stores of row-space values are
// contiguous buffers of the row-space sizes (one element per row). How a row
// is computed (its col loops and scratch) is `schedule`, which a target follows.
struct FusedKernel {
  std::vector<int64_t> sizes;      // iteration space after coalescing (rank >= 1)
  std::vector<uint32_t> nodes;     // nodes in evaluation (graph) order
  std::vector<Access> loads;       // external operands, any order
  std::vector<ValueId> stores;     // values written out, contiguous, sized like the
                                   // group (row kernels: full or row space)
  bool row = false;                // a row kernel (holds reductions)
  int32_t reduce_rank = 0;         // row kernels: number of trailing (col) dims of sizes
  std::vector<bool> row_space;     // row kernels: per entry of `nodes`; empty otherwise
  RowSchedule schedule;            // row kernels: one row's loops (row_schedule.h)
  // Plain kernels holding Cat nodes: the dim of `sizes` they join along (-1:
  // none) and where each piece of it ends (one per Cat operand; the last is
  // that dim's size). Every Cat of a kernel joins along the same dim with the
  // same pieces; the loops over that dim run piece by piece, and in piece j
  // each Cat is its operand j.
  int32_t cat_dim = -1;
  std::vector<int64_t> cat_ends;
  // How a GPU target launches it (launch_shape.h): chosen by plan_graph from the
  // traced sizes, kept by bind_plan (a hint: correct for any sizes). The CPU
  // target ignores it.
  LaunchShape launch;
  // Index into loads of a node operand (by the id the node refers to), -1 when
  // the operand is computed inside this kernel. Cat operands: load_of(v, piece).
  int32_t load_of(ValueId operand, int32_t piece = -1) const;
  std::string name;                // "fused_<n>", unique within a program
};

// The compiled entry point of a FusedKernel: computes iterations
// [begin, end) of the outermost dim. Safe to call on disjoint ranges in parallel.
// `dims` is kernel_dims(k): every kernel reads its scalars' slots there; a
// shape-generic kernel also reads its sizes, strides and offsets.
using KernelFn = void (*)(void* const* buffers, const int64_t* scalars, int64_t begin,
                          int64_t end, const int64_t* dims);

// KernelFn's `dims` for `k`: its sizes (one per dim), then per load, in order:
// a scalar's slot in `scalars` (scalar_index), or a buffer's strides (one per
// dim) and offset, then its cat_ends (when cat_dim >= 0). Every kernel reads its scalars' slots there, so kernels that
// differ only in which scalars they read (identical layers) share code.
std::vector<int64_t> kernel_dims(const FusedKernel& k);

struct Step {
  // OpByOp: an elementwise, reduction or Full node run by ATen's own operators,
  // no generated code (plan_op_by_op; never stored: plan_io refuses it).
  enum class Kind { Kernel, Aten, AsStrided, AsStridedScatter, OpByOp };
  Kind kind;
  uint32_t node = 0;    // Aten / AsStrided / AsStridedScatter / OpByOp: the node run
  int32_t kernel = -1;  // Kernel: index into Plan::kernels
  int32_t group = -1;   // OpByOp: >= 0, the layer norm Plan::layer_norms[group] (from `node` on)
};

struct Plan {
  std::vector<Step> steps;
  std::vector<FusedKernel> kernels;
  std::vector<KernelFn> kernel_fns;  // filled by Target::compile, one per kernel
  // Buffer plan: per step, the values made by earlier steps whose last reader
  // it is (graph outputs never). The executor releases them after the step, so
  // their memory is reused by later steps of the same run (through the buffer
  // pool, which also carries it into the next run). Empty: nothing is released
  // before the run ends.
  std::vector<std::vector<ValueId>> frees;
  // NaN/Inf checks in the kernels (LAZYJIT_DEBUG_NANS): every float32/float64
  // value a kernel stores is tested as it is stored, and a kernel that stored a
  // NaN or Inf sets the int64 one past its kernel_dims (the executor passes a
  // `dims` with that slot; Executable::run says whether any was set).
  bool check_stores = false;
  // Op by op (PlanOptions::op_by_op_groups): decomposed layer norms run as one ATen op.
  std::vector<OpByOpLayerNorm> layer_norms;
  // Made by plan_op_by_op: every step runs as eager runs it (no oneDNN GEMMs either).
  bool op_by_op = false;
  int64_t planned_peak_bytes = 0;  // most bytes of step results alive at once
  int64_t result_bytes = 0;        // bytes of all step results (the peak without frees)
  std::string str(const ir::Graph& g) const;
};

struct PlanOptions {
  bool fuse = true;     // false: one kernel per elementwise node (for tests and bisecting)
  bool buffers = true;  // false: no buffer plan (every result lives to the end of the run)
  bool op_by_op_groups = false;  // plan_op_by_op: layer norms as one step (op_by_op_groups.h)
  // Most nodes one kernel holds. LLVM's optimizer is superlinear in the size of
  // one function, so without a bound a long elementwise chain fused into one
  // kernel compiles in time quadratic in its length (design.md, "Compile time").
  int32_t max_kernel_nodes = 64;
  // Most bytes of kernel parameters (targets/cuda/device_kernel.h) a kernel may
  // need, bounded from above as nodes join it; 0: no bound. A GPU target's own
  // limit (Target::max_kernel_param_bytes: 4 KB before PTX 8.1).
  int64_t max_kernel_param_bytes = 0;
  // Pass names to skip ("dce", "fold", "cse", "fuse", "buffers"); the runtime
  // fills it from its Config (LAZYJIT_DISABLE_PASSES).
  std::vector<std::string> disabled;
  bool check_stores = false;  // Plan::check_stores
};

// Elementwise nodes whose dtypes the CPU codegen handles (others become Aten steps
// in the tracer, so this is a check, not a choice).
bool lowerable_dtype(DType t);

// Fusion (the "fuse" pass), coalescing, row schedules, then buffer planning
// ("buffers").
Plan plan_graph(const ir::Graph& g, const PlanOptions& opts = {});

// A plan without kernels: every node a step of its own, elementwise and
// reduction nodes as OpByOp steps (run op by op, nothing to compile), then the
// buffer plan unless opts.buffers is false.
Plan plan_op_by_op(const ir::Graph& g, const PlanOptions& opts = {});

// The buffer plan of a built plan: fills frees and the byte counts.
void plan_buffers(const ir::Graph& g, Plan& plan);

}  // namespace lazyjit::lowering
