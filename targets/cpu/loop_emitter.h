// The loop-nest emitter of one fused kernel (internal to the CPU target): the
// kernel function and its ABI wrapper, the loops over the iteration space with
// their guards, operand loads, indexing and stores. What to compute per element
// comes from op_emitter.h; how a row kernel's loops go, from its RowSchedule
// (lowering/row_schedule.h), followed without deciding anything.
//
// Plain kernels are in loop_emitter.cpp, row kernels in row_kernel.cpp.
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <llvm/IR/IRBuilder.h>
#include <llvm/Target/TargetMachine.h>

#include "targets/cpu/codegen.h"
#include "lowering/element/op_emitter.h"
#include "lowering/kernel_key.h"

namespace lazyjit::lowering::cpu::emit {

using namespace lazyjit::lowering::element;  // NOLINT: the element emitters

class LoopEmitter {
 public:
  LoopEmitter(llvm::Module& m, const ir::Graph& g, const FusedKernel& k, const CodegenConfig& cfg,
              const llvm::TargetMachine& tm)
      : m_(m), ctx_(m.getContext()), b_(ctx_), g_(g), k_(k), cfg_(cfg), tm_(tm),
        name_(k.name + cfg.symbol_suffix) {
    std::string f = tm.getTargetFeatureString().str();
    avx2_ = f.find("+avx2") != std::string::npos;
    avx512_ = f.find("+avx512f") != std::string::npos;
  }

  // Adds the kernel's function (named k.name + cfg.symbol_suffix, KernelFn ABI)
  // and its internal body to the module.
  void emit();

 private:
  void set_target_attrs(llvm::Function* f);
  void emit_impl();

  // Guards begin < end and the emptiness of dims [1, last), then rotated loops
  // over dims [0, last) around `body`, then returns.
  void emit_outer_loops(llvm::BasicBlock* exit, size_t last, const std::function<void()>& body);
  // The sizes, strides and offsets as values, in the entry block: constants,
  // or (shape-generic code) read from KernelFn's `dims` (kernel_dims order).
  void load_shape();
  // Rotated (do-while) loops over dims [d, last), the first from start to stop
  // (start < stop known), the others over their nonzero sizes. Row
  // dims (d < nrow_) get row_loop_md(). The cat dim (k_.cat_dim) is one loop
  // per piece, over the part of [start, stop) in it, with cat_piece_ set.
  void emit_loops(size_t d, size_t last, Value* start, Value* stop, const std::function<void()>& body);
  void emit_loop(size_t d, size_t last, Value* start, Value* stop, const std::function<void()>& body);
  // A plain kernel's loop body: every node, then every store. Emitted once per
  // cat piece, each time with nothing computed or loaded yet but the scalars.
  void emit_body();

  // --- row kernels (row_kernel.cpp) ----------------------------------------
  // Follows k_.schedule per row.
  void emit_row_impl(llvm::BasicBlock* exit);
  // Row loops are neither vectorized nor unrolled: with short rows LLVM would
  // otherwise vectorize across rows once the col loops are fully unrolled, and
  // a row's (reassociated) sum would then depend on whether it fell in the
  // vector body or the remainder, i.e. on how [begin, end) was split.
  llvm::MDNode* row_loop_md();
  // One entry-block array of one element per col for each scheduled scratch node.
  void alloc_scratch();
  llvm::Type* scratch_type(DType t) { return t == DType::Bool ? b_.getInt8Ty() : reg_type(b_, t); }
  // One loop over the cols: reads back `w.reload`, computes `w.compute` (keeping
  // `w.keep` in scratch), then `body`. Values made inside it are forgotten after it.
  // With `blocks`, the cols run block by block, with `begin_block` before each
  // block's loop and `end_block` after it.
  struct BlockHooks {
    const SumBlocks& blocks;
    std::function<void()> begin_block, end_block;
  };
  void emit_col_loop(const ColLoop& w, const std::function<void()>& body,
                     const BlockHooks* blocks = nullptr);
  // A do-while loop of `n` >= 1 iterations, `body` given the index (0, 1, ...).
  void emit_counted_loop(Value* n, const std::function<void(Value* i)>& body);
  void emit_row_body();
  // The accumulator lives in an entry-block alloca that SROA turns into the
  // loop's reduction phi. No cols (empty rows): the reduction is its identity.
  // With SumBlocks, the accumulator restarts per block and each block's sum is
  // added to a compensated float64 sum (row_schedule.h).
  void emit_reduction(const ir::Node& n, const RowStep& st);

  // --- elements -------------------------------------------------------------
  // Computes node `n` into values_, in its output dtype.
  void emit_kernel_node(const ir::Node& n);
  MathContext math() { return {b_, m_, cfg_.opts, cfg_.libmvec, avx2_, avx512_, declared_}; }
  OperandSource operands();
  // offset + sum_d idx_d * strides[d]; a null stride or offset is zero.
  Value* index(const std::vector<Value*>& strides, Value* offset);
  // Contiguous offset over dims [first, last) of the iteration space.
  Value* contiguous_index(size_t first, size_t last);
  TV load_scalar(size_t load);
  // A computed value, else the load's value (loaded on first use in the loop body).
  TV operand(ValueId v);
  // Load `li`'s element at the current index (once per loop body).
  TV load(int32_t li);
  bool is_scalar_argument(ValueId v) const;
  // Store `s` of k_.stores at element `offset` of its buffer.
  void store(size_t s, Value* offset);

  llvm::Module& m_;
  llvm::LLVMContext& ctx_;
  llvm::IRBuilder<> b_;
  const ir::Graph& g_;
  const FusedKernel& k_;
  const CodegenConfig& cfg_;
  const llvm::TargetMachine& tm_;
  std::string name_;
  bool avx2_ = false, avx512_ = false;
  std::vector<int64_t> sizes_;
  std::vector<Value*> size_v_;                  // per dim
  std::vector<std::vector<Value*>> stride_v_;   // per load, per dim; null: 0
  std::vector<Value*> offset_v_;                // per load; null: 0
  std::vector<Value*> slot_v_;                  // per load: a scalar's slot; null for buffers
  std::vector<Value*> cat_end_v_;               // per cat piece: where it ends
  size_t cat_piece_ = 0;                        // the piece being emitted (Cat nodes read its operand)
  llvm::Function* fn_ = nullptr;
  size_t nbuf_ = 0;                  // buffer parameters: loads, then stores
  llvm::AllocaInst* nonfinite_ = nullptr;  // cfg_.check_stores: i8, a stored value was NaN/Inf
  std::vector<int> buffer_of_;       // per load: its buffer parameter, -1 for scalars
  std::vector<Value*> idx_;          // per dim: the induction variable
  size_t nrow_ = 0, ncol_ = 0;       // row kernels: leading row dims, trailing col dims
  std::unordered_map<int32_t, llvm::AllocaInst*> scratch_;  // row kernels: by node position
  std::unordered_map<ValueId, TV> values_;  // computed in the kernel
  std::unordered_map<int32_t, TV> loaded_;  // per load index
  std::unordered_set<std::string> declared_;  // vector variants declared (MathContext)
};

}  // namespace lazyjit::lowering::cpu::emit
