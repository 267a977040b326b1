// The CUDA target's kernel emitter: one FusedKernel as one PTX kernel in LLVM IR
// for the NVPTX back end (triple nvptx64-nvidia-cuda), with the parameter ABI of
// targets/cuda/device_kernel.h. What to compute per element comes from the shared
// element emitters (lowering/element/); how a row kernel's row goes, from its
// RowSchedule (lowering/row_schedule.h).
//
// Plain kernels (Grid::Elements, kernel_emitter.cpp): a grid-stride loop over
// the flat element index [0, total); each thread splits its index into per-dim
// indices (innermost fastest), evaluates the nodes in order and stores
// contiguously at the flat index. A Cat kernel picks the piece of its cat dim
// the index falls in (an if-chain over cat_ends) and emits the body once per
// piece, each Cat node being that piece's operand.
//
// Launch shapes: the kernel follows its LaunchShape (lowering/launch_shape.h;
// KernelConfig::shape, by default FusedKernel::launch): its block is the
// kernel's maxntidx; plain kernels take the vector width and elements per
// thread where the rules below allow, else fewer (the DeviceKernel says what
// was emitted); row kernels take its row mode.
//
// Vectorized plain kernels: when every buffer load of a non-cat plain kernel
// is contiguous over the flat index (element offset + flat) or reads one
// element for the whole space (every stride of a dim wider than 1 is 0), the
// kernel takes the shape's vector width V (capped at 16 bytes over the size of
// the widest element it loads or stores as vectors: 4 for float32, 8 for
// float16, 2 for float64) and each thread takes chunks of E = the shape's
// elements per thread consecutive elements (DeviceKernel::elements_per_thread
// = E, a multiple of V). Exact code decides on the real strides; shape-generic
// code only where the stride classes guarantee it (rank 1, stride 1 or 0). Once
// per thread the kernel tests that every vector-accessed address (buffer +
// offset) is aligned to V elements; when so, a grid-stride loop over the full
// chunks [c*E, c*E+E) loads each contiguous operand as E / V `<V x T>` loads
// (!invariant.load, align V*size: ld.global.nc.v4.f32 and the like), computes
// the nodes lane by lane (the scalar element code, E times) and stores each
// output as E / V `<V x T>` stores; broadcast operands are one scalar load per
// chunk. The elements after the last full chunk (or all of them, when an
// address is misaligned) run the scalar grid-stride loop, which is correct
// for any grid.
//
// Row kernels (Grid::Rows, row_kernel.cpp), by the shape's row mode:
//  - Block rows: one block per row (grid-stride over rows), the block's
//    threads striding over the row's flattened cols; each reduction ends in a
//    block reduction (warp butterfly shuffles, then one partial per warp
//    through shared memory, between barriers) whose result every thread holds.
//  - Warp rows: one warp per row, block / 32 rows a block (row = ctaid *
//    warps + warp, grid-stride over rows by nctaid * warps), the warp's lanes
//    striding over the row's cols; each reduction is one warp butterfly
//    (shfl.sync.bfly only: no shared memory, no barriers), its result in
//    every lane. A warp's lanes run the same rows, so its shuffles are uniform.
// The schedule's steps run in order; a col loop computes the full-space nodes it
// needs on first use (recomputed in every col loop: the GPU keeps no scratch).
// Float sums accumulate in their accumulate dtype (float32 for float32, as
// CUDA eager does): SumBlocks' float64 blocks are a CPU scheme, ignored here.
//
// Index arithmetic is 32-bit when the code is for exact sizes and every index
// it forms (the element count and each load's furthest element) is below 2^31,
// else 64-bit.
//
// Math is emitted as on the CPU (MathContext without libmvec), so the module can
// hold LLVM intrinsics and libm calls that NVPTX cannot lower by itself; the
// caller maps them onto libdevice (__nv_*) before codegen. The element emitters
// (lowering/element/math_emitter.cpp, op_emitter.cpp) can produce:
//   intrinsics: llvm.exp, llvm.log, llvm.sin, llvm.cos, llvm.pow (f32/f64)
//               -- not lowerable by NVPTX without libdevice/approx flags;
//               llvm.sqrt, llvm.fabs, llvm.floor, llvm.trunc, llvm.copysign,
//               llvm.minnum, llvm.maxnum, llvm.fma, llvm.fmuladd,
//               llvm.maximum, llvm.minimum (reductions), llvm.abs, llvm.smax,
//               llvm.smin, llvm.umax, llvm.umin -- lowered natively;
//   libm calls fmodf/fmod: the element emitters' `frem` (DivFloor, Remainder
//               on floats), rewritten by emit_kernel, as NVPTX would expand
//               frem as x - trunc(x/y)*y, not fmod;
//   libm calls (name + "f" for float32): tanh (float64 only; float32 tanh is an
//               inline polynomial), erf/erff (Erf, Gelu), log1p/log1pf,
//               expm1/expm1f; with CodegenOptions vector math on AVX-512
//               only (never here: avx512 = false) also exp/log/sin/cos by name.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Module.h>

#include "targets/cuda/device_kernel.h"
#include "lowering/element/op_emitter.h"
#include "lowering/kernel_key.h"
#include "lowering/plan.h"
#include "lowering/target.h"

namespace lazyjit::lowering::cuda {

struct KernelConfig {
  CodegenOptions opts;        // fault injection (opts.fault) through element::inject_fault
  // Shape-generic code: sizes, strides other than 0 and 1, offsets and cat ends
  // are read from the dims parameter (kernel_key.h's runtime_stride), as on the CPU.
  bool generic = false;
  // Plan::check_stores: an extra `ptr addrspace(1)` parameter (after the stores)
  // to an int32 the kernel sets to 1 when a float32/float64 value it stores is NaN or Inf.
  bool check_stores = false;
  // The launch to emit for (launch_shape.h); unset: the kernel's own
  // (FusedKernel::launch). Its block is the kernel's maxntidx, and what block
  // rows size their shared memory by.
  std::optional<LaunchShape> shape;
};

// Emits FusedKernel `k` into `m` (an nvptx64 module whose triple and data layout
// the caller set) as one PTX kernel (an `!nvvm.annotations` "kernel" entry and a
// "maxntidx" of the shape's block; external linkage) named `symbol`, with the parameter
// ABI of targets/cuda/device_kernel.h. Returns its launch shape (function left null:
// the caller loads it). Throws std::runtime_error "kernel <k.name>: ..." naming
// the op or dtype on anything unsupported, or on IR that does not verify.
DeviceKernel emit_kernel(llvm::Module& m, const ir::Graph& g, const FusedKernel& k, const std::string& symbol,
                         const KernelConfig& cfg);

namespace emit {

using namespace lazyjit::lowering::element;  // NOLINT: the element emitters

// Internal to emit_kernel (kernel_emitter.cpp: plain kernels and shared parts;
// row_kernel.cpp: row kernels).
class KernelEmitter {
 public:
  KernelEmitter(llvm::Module& m, const ir::Graph& g, const FusedKernel& k, const std::string& symbol,
                const KernelConfig& cfg)
      : m_(m), ctx_(m.getContext()), b_(ctx_), g_(g), k_(k), symbol_(symbol), cfg_(cfg),
        shape_(cfg.shape ? *cfg.shape : k.launch) {}

  DeviceKernel emit();
  llvm::Function* function() const { return fn_; }

 private:
  void create_function();
  // Sizes, strides, offsets and cat ends as values (constants, or read from the
  // dims parameter for shape-generic code), and the scalars, in the entry block.
  void load_shape();
  // Whether every index this kernel forms fits 32 bits (exact code only).
  bool fits_i32() const;
  Value* dim_entry(size_t i);  // the i64 at position i of the dims parameter
  Value* sreg(llvm::Intrinsic::ID id);  // a special register as an i64
  Value* ival(int64_t v) { return llvm::ConstantInt::get(it_, v); }

  // A grid-stride loop `for (i = start; i < end; i += step)` in i64 (start,
  // step: per thread/block; uniform or not), `body` given i.
  void emit_stride_loop(Value* start, Value* end, Value* step, const char* name,
                        const std::function<void(Value* i)>& body, llvm::Type* ty = nullptr);
  // Sets idx_[first, last) from `flat` (in it_), the contiguous index over those dims.
  void decompose(Value* flat, size_t first, size_t last);

  // --- plain kernels ---------------------------------------------------------
  void emit_elements();
  void emit_body(Value* flat);  // every node, then every store at `flat`
  // Vectorized plain kernels: sets lanes_ (V, 1: the scalar path only),
  // chunk_ (E) and vec_load_; the chunk loop; one chunk at element `base` (it_).
  void choose_vectors();
  // Returns the first element of the thread's scalar loop after the chunks.
  Value* emit_vector_elements(Value* start, Value* step);
  void emit_chunk(Value* base);
  // Forgets the values of the last element (scalar arguments are kept).
  void clear_element_values();

  // --- row kernels (row_kernel.cpp) -------------------------------------------
  void emit_rows();
  void emit_row_step(const RowStep& st);
  // Block-strided loop over the row's cols: sets the col indices, then `body`;
  // values made inside are forgotten after it.
  void emit_col_loop(const std::function<void()>& body);
  void emit_reduction(const ir::Node& n, const RowStep& st);
  // `v` (register type of `at`) reduced with `k` over the block; every thread gets it.
  // Warp rows: over the warp only.
  Value* block_reduce(Value* v, OpKind k, DType at);
  bool warp_rows() const { return shape_.rows == LaunchShape::Rows::Warp; }
  Value* warp_reduce(Value* v, OpKind k, DType at);
  Value* shuffle_xor(Value* v, int lane_mask);
  llvm::GlobalVariable* shared_partials();

  // --- elements ---------------------------------------------------------------
  void emit_kernel_node(const ir::Node& n);
  MathContext math() { return {b_, m_, cfg_.opts, /*libmvec=*/false, /*avx2=*/false, /*avx512=*/false, declared_}; }
  OperandSource operands();
  TV operand(ValueId v);
  TV load(int32_t li);
  bool is_scalar_argument(ValueId v) const;
  // offset + sum_d idx_d * strides[d] in it_; null strides/offset are zero.
  Value* index(const std::vector<Value*>& strides, Value* offset);
  // Store `s`'s value in memory form (with the NaN/Inf check) / at `offset`.
  Value* store_value(size_t s);
  void store_at(size_t s, Value* v, Value* offset);

  llvm::Module& m_;
  llvm::LLVMContext& ctx_;
  llvm::IRBuilder<> b_;
  const ir::Graph& g_;
  const FusedKernel& k_;
  std::string symbol_;
  const KernelConfig& cfg_;
  LaunchShape shape_;
  llvm::Function* fn_ = nullptr;
  llvm::IntegerType* it_ = nullptr;  // index type: i32 or i64
  std::vector<int64_t> sizes_;       // k_.sizes, {1} for a 0-d kernel
  size_t nbuf_ = 0;                  // buffer parameters: loads, then stores
  std::vector<int> buffer_of_;       // per load: its parameter, -1 for scalars
  std::vector<bool> vec_load_;       // vectorized kernels, per load: read as <V x T> (contiguous)
  int32_t lanes_ = 1;                // plain kernels: elements per vector access (V)
  int32_t chunk_ = 1;                // plain kernels: elements per thread per chunk (E, a multiple of V)
  llvm::Argument* flag_ = nullptr;   // check_stores: the int32 flag
  llvm::Argument* total_ = nullptr;
  llvm::Argument* dims_ = nullptr;
  std::vector<Value*> size_v_;                 // per dim, in it_
  std::vector<std::vector<Value*>> stride_v_;  // per load, per dim (it_); null: 0
  std::vector<Value*> offset_v_;               // per load (it_); null: 0
  std::vector<Value*> cat_end_v_;              // per cat piece (it_)
  size_t cat_piece_ = 0;
  std::vector<Value*> idx_;                    // per dim, in it_; null: not iterated here
  size_t nrow_ = 0;                            // row kernels: leading row dims
  Value* ncols_ = nullptr;                     // row kernels: cols per row (it_)
  Value* row_flat_ = nullptr;                  // row kernels: the row (it_)
  Value* col_flat_ = nullptr;                  // row kernels: the col in a col loop (it_)
  llvm::AllocaInst* nonfinite_ = nullptr;      // check_stores: i8, a stored value was NaN/Inf
  llvm::GlobalVariable* partials_ = nullptr;   // row kernels: one i64 per warp
  std::unordered_map<ValueId, int32_t> position_of_;  // full-space node outputs -> position
  std::unordered_map<ValueId, TV> values_;
  std::unordered_map<int32_t, TV> loaded_;
  std::unordered_set<std::string> declared_;
};

}  // namespace emit
}  // namespace lazyjit::lowering::cuda
