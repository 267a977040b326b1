#include "lowering/cpu/codegen.h"

#include <cmath>
#include <functional>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>

#include <llvm/Analysis/TargetLibraryInfo.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Transforms/Utils/ModuleUtils.h>

namespace lazyjit::lowering::cpu {
namespace {

using ir::OpKind;
using llvm::Value;

[[noreturn]] void unsupported(const std::string& what) { throw std::runtime_error(what); }

bool is_unsigned(DType t) { return t == DType::UInt8 || t == DType::Bool; }

// Half and bf16 arithmetic runs in float, like ATen's opmath; results are rounded
// when converted to the node's output dtype.
DType opmath(DType t) {
  return t == DType::Float16 || t == DType::BFloat16 ? DType::Float32 : t;
}

int64_t attr_i64(const ir::Node& n, size_t i) {
  if (i < n.attrs.size())
    if (auto* v = std::get_if<int64_t>(&n.attrs[i].value)) return *v;
  unsupported(std::string(ir::op_name(n.kind)) + ": attr " + std::to_string(i) + " is not an int64");
}

// A value in registers: the LLVM value and the dtype it represents. Registers
// hold i1 for bool, `half` for float16 and a float holding an exact bf16 for
// bfloat16; memory holds one byte per bool and i16 per bf16.
struct TV {
  Value* v;
  DType t;
};

class KernelEmitter {
 public:
  KernelEmitter(llvm::Module& m, const ir::Graph& g, const FusedKernel& k, const CodegenConfig& cfg,
                const llvm::TargetMachine& tm)
      : m_(m), ctx_(m.getContext()), b_(ctx_), g_(g), k_(k), cfg_(cfg), tm_(tm),
        name_(k.name + cfg.symbol_suffix) {
    std::string f = tm.getTargetFeatureString().str();
    avx2_ = f.find("+avx2") != std::string::npos;
    avx512_ = f.find("+avx512f") != std::string::npos;
  }

  void emit() {
    sizes_ = k_.sizes;
    if (sizes_.empty()) sizes_ = {1};  // a 0-d kernel runs its one element as dim 0
    auto* i64 = b_.getInt64Ty();
    auto* ptr = b_.getPtrTy();

    // The body lives in an internal function whose buffer parameters are noalias;
    // once inlined into the ABI wrapper the aliasing facts stay as scoped metadata.
    for (const Access& a : k_.loads) {
      buffer_of_.push_back(a.scalar_index < 0 ? static_cast<int>(nbuf_) : -1);
      if (a.scalar_index < 0) ++nbuf_;
    }
    size_t nloads = nbuf_;
    nbuf_ += k_.stores.size();
    std::vector<llvm::Type*> params(nbuf_ + 1, ptr);
    params.push_back(i64);
    params.push_back(i64);
    auto* impl = llvm::Function::Create(llvm::FunctionType::get(b_.getVoidTy(), params, false),
                                        llvm::Function::InternalLinkage, name_ + ".impl", m_);
    impl->addFnAttr(llvm::Attribute::AlwaysInline);
    set_target_attrs(impl);
    for (size_t i = 0; i <= nbuf_; ++i) {
      impl->addParamAttr(i, llvm::Attribute::NoAlias);
      impl->addParamAttr(i, llvm::Attribute::NoCapture);
      if (i < nloads || i == nbuf_) impl->addParamAttr(i, llvm::Attribute::ReadOnly);
    }
    fn_ = impl;
    emit_impl();

    auto* abi = llvm::FunctionType::get(b_.getVoidTy(), {ptr, ptr, i64, i64}, false);
    auto* wrapper = llvm::Function::Create(abi, llvm::Function::ExternalLinkage, name_, m_);
    set_target_attrs(wrapper);
    b_.SetInsertPoint(llvm::BasicBlock::Create(ctx_, "entry", wrapper));
    std::vector<Value*> args;
    for (size_t i = 0; i < nbuf_; ++i)
      args.push_back(b_.CreateLoad(ptr, b_.CreateConstInBoundsGEP1_64(ptr, wrapper->getArg(0), i)));
    for (unsigned i = 1; i < 4; ++i) args.push_back(wrapper->getArg(i));
    b_.CreateCall(impl, args);
    b_.CreateRetVoid();
  }

 private:
  void set_target_attrs(llvm::Function* f) {
    f->addFnAttr("target-cpu", tm_.getTargetCPU());
    f->addFnAttr("target-features", tm_.getTargetFeatureString());
    f->addFnAttr(llvm::Attribute::NoUnwind);
    // LLVM defaults to 256-bit vectors on AVX-512 server parts; our kernels are
    // long vectorizable loops, where 512 bits measure faster (bench/).
    if (avx512_ && cfg_.opts.vector_bits >= 512) f->addFnAttr("prefer-vector-width", "512");
  }

  void emit_impl() {
    b_.SetInsertPoint(llvm::BasicBlock::Create(ctx_, "entry", fn_));
    llvm::BasicBlock* exit = llvm::BasicBlock::Create(ctx_, "exit", fn_);
    // Scalars are loop-invariant: read them once.
    for (size_t i = 0; i < k_.loads.size(); ++i)
      if (k_.loads[i].scalar_index >= 0) loaded_[i] = load_scalar(k_.loads[i]);
    if (k_.row) return emit_row_impl(exit);
    bool empty = false;
    for (size_t d = 1; d < sizes_.size(); ++d) empty |= sizes_[d] <= 0;
    if (empty) {
      b_.CreateBr(exit);
    } else {
      Value* begin = fn_->getArg(nbuf_ + 1);
      Value* end = fn_->getArg(nbuf_ + 2);
      llvm::BasicBlock* outer = llvm::BasicBlock::Create(ctx_, "outer", fn_);
      b_.CreateCondBr(b_.CreateICmpSLT(begin, end), outer, exit);
      b_.SetInsertPoint(outer);
      idx_.assign(sizes_.size(), nullptr);
      emit_loop(0, begin, end);
      b_.CreateBr(exit);
    }
    b_.SetInsertPoint(exit);
    b_.CreateRetVoid();
  }

  // Rotated (do-while) loops: the trip count of every dim but the outermost is a
  // nonzero constant, and the outermost is guarded by begin < end.
  void emit_loop(size_t d, Value* start, Value* stop) {
    llvm::BasicBlock* pre = b_.GetInsertBlock();
    llvm::BasicBlock* head = llvm::BasicBlock::Create(ctx_, "d" + std::to_string(d), fn_);
    b_.CreateBr(head);
    b_.SetInsertPoint(head);
    llvm::PHINode* i = b_.CreatePHI(b_.getInt64Ty(), 2, "i" + std::to_string(d));
    i->addIncoming(start, pre);
    idx_[d] = i;
    if (d + 1 < sizes_.size())
      emit_loop(d + 1, b_.getInt64(0), b_.getInt64(sizes_[d + 1]));
    else
      emit_body();
    Value* next = b_.CreateAdd(i, b_.getInt64(1), "", /*NUW=*/true, /*NSW=*/true);
    i->addIncoming(next, b_.GetInsertBlock());
    llvm::BasicBlock* after = llvm::BasicBlock::Create(ctx_, "d" + std::to_string(d) + ".end", fn_);
    b_.CreateCondBr(b_.CreateICmpSLT(next, stop), head, after);
    b_.SetInsertPoint(after);
  }

  void emit_body() {
    for (uint32_t ni : k_.nodes) {
      const ir::Node& n = g_.nodes().at(ni);
      DType out = g_.value(n.outputs[0]).type.dtype;
      TV r = emit_node(n);
      values_[n.outputs[0]] = {convert(r, out), out};
    }
    std::vector<int64_t> cstrides(sizes_.size(), 1);
    for (size_t d = sizes_.size() - 1; d > 0; --d) cstrides[d - 1] = cstrides[d] * sizes_[d];
    for (size_t s = 0; s < k_.stores.size(); ++s) {
      DType t = g_.value(k_.stores[s]).type.dtype;
      Value* v = to_memory(convert(operand(k_.stores[s]), t), t);
      Value* p = b_.CreateInBoundsGEP(mem_type(t), fn_->getArg(nbuf_ - k_.stores.size() + s),
                                      index(cstrides, 0));
      b_.CreateAlignedStore(v, p, llvm::Align(ir::element_size(t)));
    }
  }

  // --- row kernels ----------------------------------------------------------
  // Per row: the row-space nodes in order, each reduction with its own loop over
  // the cols that recomputes the full-space nodes feeding it; then the row-space
  // stores; then one loop over the cols for the full-space stores.
  void emit_row_impl(llvm::BasicBlock* exit) {
    ncol_ = static_cast<size_t>(k_.reduce_rank);
    if (k_.row_space.size() != k_.nodes.size() || ncol_ < 1 || ncol_ >= sizes_.size())
      unsupported("malformed row kernel (reduce_rank " + std::to_string(k_.reduce_rank) + ", rank " +
                  std::to_string(sizes_.size()) + ")");
    nrow_ = sizes_.size() - ncol_;
    for (size_t i = 0; i < k_.nodes.size(); ++i) {
      const ir::Node& n = g_.nodes().at(k_.nodes[i]);
      pos_of_[n.outputs[0]] = i;
      if (ir::is_reduction(n.kind) && !k_.row_space[i])
        unsupported("reduction node " + std::to_string(k_.nodes[i]) + " outside the row space");
    }
    for (ValueId v : k_.stores)
      if (!pos_of_.count(v)) unsupported("store %" + std::to_string(v) + " is not computed in the kernel");
    cols_empty_ = false;
    for (size_t d = nrow_; d < sizes_.size(); ++d) cols_empty_ |= sizes_[d] <= 0;
    bool empty = false;
    for (size_t d = 1; d < nrow_; ++d) empty |= sizes_[d] <= 0;
    if (empty) {
      b_.CreateBr(exit);
    } else {
      Value* begin = fn_->getArg(nbuf_ + 1);
      Value* end = fn_->getArg(nbuf_ + 2);
      llvm::BasicBlock* outer = llvm::BasicBlock::Create(ctx_, "rows", fn_);
      b_.CreateCondBr(b_.CreateICmpSLT(begin, end), outer, exit);
      b_.SetInsertPoint(outer);
      idx_.assign(sizes_.size(), nullptr);
      plan_row_scratch();
      emit_loops(0, nrow_, begin, end, [&] { emit_row_body(); });
      b_.CreateBr(exit);
    }
    b_.SetInsertPoint(exit);
    b_.CreateRetVoid();
  }

  // Rotated loops over dims [d, last), the first from start to stop (start <
  // stop known), the others over their constant nonzero sizes.
  void emit_loops(size_t d, size_t last, Value* start, Value* stop, const std::function<void()>& body) {
    llvm::BasicBlock* pre = b_.GetInsertBlock();
    llvm::BasicBlock* head = llvm::BasicBlock::Create(ctx_, "d" + std::to_string(d), fn_);
    b_.CreateBr(head);
    b_.SetInsertPoint(head);
    llvm::PHINode* i = b_.CreatePHI(b_.getInt64Ty(), 2, "i" + std::to_string(d));
    i->addIncoming(start, pre);
    idx_[d] = i;
    if (d + 1 < last)
      emit_loops(d + 1, last, b_.getInt64(0), b_.getInt64(sizes_[d + 1]), body);
    else
      body();
    Value* next = b_.CreateAdd(i, b_.getInt64(1), "", /*NUW=*/true, /*NSW=*/true);
    i->addIncoming(next, b_.GetInsertBlock());
    llvm::BasicBlock* after = llvm::BasicBlock::Create(ctx_, "d" + std::to_string(d) + ".end", fn_);
    llvm::BranchInst* latch = b_.CreateCondBr(b_.CreateICmpSLT(next, stop), head, after);
    if (d < nrow_) latch->setMetadata(llvm::LLVMContext::MD_loop, row_loop_md());
    b_.SetInsertPoint(after);
    idx_[d] = nullptr;
  }

  // Row loops are neither vectorized nor unrolled: with short rows LLVM would
  // otherwise vectorize across rows once the col loops are fully unrolled, and
  // a row's (reassociated) sum would then depend on whether it fell in the
  // vector body or the remainder, i.e. on how [begin, end) was split.
  llvm::MDNode* row_loop_md() {
    auto flag = [&](const char* name, int32_t v) -> llvm::Metadata* {
      return llvm::MDNode::get(ctx_, {llvm::MDString::get(ctx_, name),
                                      llvm::ConstantAsMetadata::get(b_.getInt32(v))});
    };
    llvm::Metadata* ops[] = {nullptr, flag("llvm.loop.vectorize.width", 1),
                             flag("llvm.loop.interleave.count", 1),
                             llvm::MDNode::get(ctx_, {llvm::MDString::get(ctx_, "llvm.loop.unroll.disable")})};
    llvm::MDNode* md = llvm::MDNode::getDistinct(ctx_, ops);
    md->replaceOperandWith(0, md);
    return md;
  }

  bool is_row_value(ValueId v) const {
    auto it = pos_of_.find(v);
    return it != pos_of_.end() && k_.row_space[it->second];
  }

  // What one col loop does with the full-space nodes: computes `compute` (in
  // node order) and reads `reuse` back from the row's scratch.
  struct ColWork {
    std::vector<size_t> compute, reuse;
  };

  // The full-space nodes `targets` need, by position: `need` those to compute,
  // `stop` those `stop_at` marks (they are not entered: their value comes from
  // elsewhere).
  struct Walk {
    std::vector<bool> need, stop;
  };
  Walk walk_full(const std::vector<ValueId>& targets, const std::vector<bool>& stop_at) const {
    Walk w{std::vector<bool>(k_.nodes.size(), false), std::vector<bool>(k_.nodes.size(), false)};
    std::vector<ValueId> work(targets);
    while (!work.empty()) {
      ValueId v = work.back();
      work.pop_back();
      auto it = pos_of_.find(v);
      if (it == pos_of_.end() || k_.row_space[it->second] || w.need[it->second] || w.stop[it->second]) continue;
      size_t p = it->second;
      if (stop_at[p]) {
        w.stop[p] = true;
        continue;
      }
      w.need[p] = true;
      for (ValueId o : g_.nodes().at(k_.nodes[p]).operands) work.push_back(o);
    }
    return w;
  }

  // What a col loop computes; a node an earlier col loop of the row computed
  // and kept in scratch is read back, not recomputed.
  ColWork full_nodes_for(const std::vector<ValueId>& targets) const {
    std::vector<bool> kept(k_.nodes.size(), false);
    for (size_t p = 0; p < kept.size(); ++p) kept[p] = computed_[p] && scratch_.count(p);
    Walk w = walk_full(targets, kept);
    ColWork out;
    for (size_t i = 0; i < w.need.size(); ++i) {
      if (w.need[i]) out.compute.push_back(i);
      if (w.stop[i]) out.reuse.push_back(i);
    }
    return out;
  }

  // Which full-space nodes to keep in a per-row scratch array: those a later
  // col loop of the row needs again after an earlier one computed them (a
  // softmax's exp(x - max) is computed for the sum and read back for the
  // output, not computed twice). Rows are short enough to stay in L1/L2; when
  // the scratch would pass kScratchBytes, everything is recomputed instead.
  void plan_row_scratch() {
    constexpr int64_t kScratchBytes = 64 << 10;
    std::vector<std::vector<ValueId>> loops;  // each col loop's targets, in order
    for (size_t i = 0; i < k_.nodes.size(); ++i) {
      const ir::Node& n = g_.nodes().at(k_.nodes[i]);
      if (k_.row_space[i] && ir::is_reduction(n.kind)) loops.push_back({n.operands.at(0)});
    }
    std::vector<ValueId> full_stores;
    for (ValueId v : k_.stores)
      if (!is_row_value(v)) full_stores.push_back(v);
    if (!full_stores.empty()) loops.push_back(full_stores);
    std::vector<bool> computed(k_.nodes.size(), false), keep(k_.nodes.size(), false);
    for (const auto& targets : loops) {
      Walk w = walk_full(targets, computed);
      for (size_t i = 0; i < computed.size(); ++i) {
        keep[i] = keep[i] || w.stop[i];
        computed[i] = computed[i] || w.need[i];
      }
    }
    computed_.assign(k_.nodes.size(), false);
    int64_t cols = 1, bytes = 0;
    for (size_t d = nrow_; d < sizes_.size(); ++d) cols *= sizes_[d];
    for (size_t i = 0; i < keep.size(); ++i)
      if (keep[i]) bytes += cols * 8;
    if (cols_empty_ || bytes == 0 || bytes > kScratchBytes) return;
    llvm::IRBuilder<> eb(&fn_->getEntryBlock(), fn_->getEntryBlock().begin());
    for (size_t i = 0; i < keep.size(); ++i) {
      if (!keep[i]) continue;
      DType t = g_.value(g_.nodes().at(k_.nodes[i]).outputs[0]).type.dtype;
      llvm::AllocaInst* a = eb.CreateAlloca(llvm::ArrayType::get(scratch_type(t), cols), nullptr, "scratch");
      a->setAlignment(llvm::Align(64));
      scratch_[i] = a;
    }
  }
  llvm::Type* scratch_type(DType t) { return t == DType::Bool ? b_.getInt8Ty() : reg_type(t); }

  // One loop over the cols computing the full-space nodes of `w`, then `body`.
  // Values made inside the loop are forgotten after it.
  void emit_col_loop(const ColWork& w, const std::function<void()>& body) {
    auto saved_values = values_;
    auto saved_loaded = loaded_;
    emit_loops(nrow_, sizes_.size(), b_.getInt64(0), b_.getInt64(sizes_[nrow_]), [&] {
      Value* col = scratch_.empty() ? nullptr : contiguous_index(nrow_, sizes_.size());
      for (size_t i : w.reuse) {
        ValueId v = g_.nodes().at(k_.nodes[i]).outputs[0];
        DType t = g_.value(v).type.dtype;
        llvm::Type* st = scratch_type(t);
        Value* x = b_.CreateLoad(st, b_.CreateInBoundsGEP(st, scratch_.at(i), col));
        if (t == DType::Bool) x = b_.CreateICmpNE(x, b_.getInt8(0));
        values_[v] = {x, t};
      }
      for (size_t i : w.compute) {
        const ir::Node& n = g_.nodes().at(k_.nodes[i]);
        emit_kernel_node(n);
        if (auto it = scratch_.find(i); it != scratch_.end()) {
          DType t = g_.value(n.outputs[0]).type.dtype;
          Value* x = values_.at(n.outputs[0]).v;
          if (t == DType::Bool) x = b_.CreateZExt(x, b_.getInt8Ty());
          b_.CreateStore(x, b_.CreateInBoundsGEP(scratch_type(t), it->second, col));
        }
      }
      body();
    });
    for (size_t i : w.compute) computed_[i] = true;
    values_ = std::move(saved_values);
    loaded_ = std::move(saved_loaded);
  }

  void emit_kernel_node(const ir::Node& n) {
    DType out = g_.value(n.outputs[0]).type.dtype;
    TV r = emit_node(n);
    values_[n.outputs[0]] = {convert(r, out), out};
  }

  // Contiguous offset over dims [first, last) of the iteration space.
  Value* contiguous_index(size_t first, size_t last) {
    std::vector<int64_t> st(sizes_.size(), 0);
    int64_t acc = 1;
    for (size_t d = last; d-- > first;) {
      st[d] = acc;
      acc *= sizes_[d];
    }
    return index(st, 0);
  }

  void store(size_t s, Value* offset) {
    DType t = g_.value(k_.stores[s]).type.dtype;
    Value* v = to_memory(convert(operand(k_.stores[s]), t), t);
    Value* p = b_.CreateInBoundsGEP(mem_type(t), fn_->getArg(nbuf_ - k_.stores.size() + s), offset);
    b_.CreateAlignedStore(v, p, llvm::Align(ir::element_size(t)));
  }

  void emit_row_body() {
    computed_.assign(k_.nodes.size(), false);
    for (size_t i = 0; i < k_.nodes.size(); ++i) {
      if (!k_.row_space[i]) continue;
      const ir::Node& n = g_.nodes().at(k_.nodes[i]);
      if (ir::is_reduction(n.kind))
        emit_reduction(n);
      else
        emit_kernel_node(n);
    }
    std::vector<ValueId> full_stores;
    for (size_t s = 0; s < k_.stores.size(); ++s) {
      if (is_row_value(k_.stores[s]))
        store(s, contiguous_index(0, nrow_));
      else
        full_stores.push_back(k_.stores[s]);
    }
    if (full_stores.empty() || cols_empty_) return;
    emit_col_loop(full_nodes_for(full_stores), [&] {
      Value* off = contiguous_index(0, sizes_.size());
      for (size_t s = 0; s < k_.stores.size(); ++s)
        if (!is_row_value(k_.stores[s])) store(s, off);
    });
  }

  // The accumulator lives in an entry-block alloca that SROA turns into the
  // loop's reduction phi. Only the float sum is reassociable (so that it
  // vectorizes); max/min use llvm.maximum/minimum, which propagate NaN.
  void emit_reduction(const ir::Node& n) {
    DType at = opmath(static_cast<DType>(attr_i64(n, 0)));
    llvm::Type* T = reg_type(at);
    bool fl = ir::is_floating(at), u = is_unsigned(at);
    Value* init = nullptr;
    switch (n.kind) {
      case OpKind::ReduceSum: init = llvm::Constant::getNullValue(T); break;
      case OpKind::ReduceMax:
        init = fl ? llvm::ConstantFP::getInfinity(T, /*Negative=*/true)
                  : llvm::ConstantInt::get(T, u ? llvm::APInt::getMinValue(T->getIntegerBitWidth())
                                                : llvm::APInt::getSignedMinValue(T->getIntegerBitWidth()));
        break;
      case OpKind::ReduceMin:
        init = fl ? llvm::ConstantFP::getInfinity(T, /*Negative=*/false)
                  : llvm::ConstantInt::get(T, u ? llvm::APInt::getMaxValue(T->getIntegerBitWidth())
                                                : llvm::APInt::getSignedMaxValue(T->getIntegerBitWidth()));
        break;
      default: unsupported(std::string(ir::op_name(n.kind)) + " is not a reduction");
    }
    llvm::IRBuilder<> eb(&fn_->getEntryBlock(), fn_->getEntryBlock().begin());
    llvm::AllocaInst* acc = eb.CreateAlloca(T, nullptr, "acc");
    b_.CreateStore(init, acc);
    if (!cols_empty_) {
      emit_col_loop(full_nodes_for({n.operands.at(0)}), [&] {
        Value* x = convert(operand(n.operands[0]), at);
        Value* cur = b_.CreateLoad(T, acc);
        Value* r = nullptr;
        switch (n.kind) {
          case OpKind::ReduceSum:
            if (fl) {
              r = b_.CreateFAdd(cur, x);
              if (auto* I = llvm::dyn_cast<llvm::Instruction>(r)) {
                llvm::FastMathFlags fmf;
                fmf.setAllowReassoc();
                fmf.setNoSignedZeros();
                I->setFastMathFlags(fmf);
              }
            } else {
              r = binary_int(OpKind::Add, cur, x, at);
            }
            break;
          case OpKind::ReduceMax:
            r = b_.CreateBinaryIntrinsic(fl ? llvm::Intrinsic::maximum
                                         : u ? llvm::Intrinsic::umax : llvm::Intrinsic::smax, cur, x);
            break;
          default:
            r = b_.CreateBinaryIntrinsic(fl ? llvm::Intrinsic::minimum
                                         : u ? llvm::Intrinsic::umin : llvm::Intrinsic::smin, cur, x);
        }
        b_.CreateStore(r, acc);
      });
    }
    DType out = g_.value(n.outputs[0]).type.dtype;
    values_[n.outputs[0]] = {convert({b_.CreateLoad(T, acc), at}, out), out};
  }

  Value* index(const std::vector<int64_t>& strides, int64_t offset) {
    Value* off = b_.getInt64(offset);
    for (size_t d = 0; d < sizes_.size(); ++d) {
      int64_t st = d < strides.size() ? strides[d] : 0;
      if (st != 0 && !idx_[d]) unsupported("an access varies over a dim it is not read in");
      if (st != 0)
        off = b_.CreateAdd(off, b_.CreateMul(idx_[d], b_.getInt64(st), "", false, true), "", false,
                           true);
    }
    return off;
  }

  // --- types and conversions ------------------------------------------------
  llvm::Type* reg_type(DType t) {
    switch (t) {
      case DType::Bool: return b_.getInt1Ty();
      case DType::UInt8: case DType::Int8: return b_.getInt8Ty();
      case DType::Int16: return b_.getInt16Ty();
      case DType::Int32: return b_.getInt32Ty();
      case DType::Int64: return b_.getInt64Ty();
      case DType::Float16: return b_.getHalfTy();
      case DType::BFloat16: case DType::Float32: return b_.getFloatTy();
      case DType::Float64: return b_.getDoubleTy();
      default: unsupported("dtype " + std::string(ir::dtype_name(t)) + " is not lowerable");
    }
  }
  llvm::Type* mem_type(DType t) {
    if (t == DType::Bool) return b_.getInt8Ty();
    if (t == DType::BFloat16) return b_.getInt16Ty();
    return reg_type(t);
  }

  // Round a float to the nearest-even bf16, kept as a float (ATen's round_to_nearest_even).
  Value* round_bf16(Value* f) {
    auto* i32 = b_.getInt32Ty();
    Value* u = b_.CreateBitCast(f, i32);
    Value* lsb = b_.CreateAnd(b_.CreateLShr(u, 16), 1);
    Value* r = b_.CreateAnd(b_.CreateAdd(b_.CreateAdd(u, b_.getInt32(0x7fff)), lsb),
                            b_.getInt32(0xffff0000u));
    r = b_.CreateSelect(b_.CreateFCmpUNO(f, f), b_.getInt32(0x7fc00000), r);
    return b_.CreateBitCast(r, b_.getFloatTy());
  }

  Value* convert(TV x, DType to) {
    if (x.t == to) return x.v;
    llvm::Type* T = reg_type(to);
    bool fx = ir::is_floating(x.t), ft = ir::is_floating(to);
    if (to == DType::Bool)
      return fx ? b_.CreateFCmpUNE(x.v, llvm::ConstantFP::get(x.v->getType(), 0.0))
                : b_.CreateICmpNE(x.v, llvm::ConstantInt::get(x.v->getType(), 0));
    if (!fx && !ft) return b_.CreateIntCast(x.v, T, !is_unsigned(x.t));
    if (!fx) {
      Value* f = is_unsigned(x.t) ? b_.CreateUIToFP(x.v, T) : b_.CreateSIToFP(x.v, T);
      return to == DType::BFloat16 ? round_bf16(f) : f;
    }
    if (!ft) {
      // Like c10's conversions: narrow ints via a wider int, and uint8 via int64
      // so that negative floats wrap instead of being undefined.
      llvm::Type* wide = to == DType::Int64 || to == DType::UInt8 ? b_.getInt64Ty() : b_.getInt32Ty();
      return b_.CreateIntCast(b_.CreateFPToSI(x.v, wide), T, true);
    }
    Value* v = x.v;
    if (v->getType() != T) v = b_.CreateFPCast(v, T);
    return to == DType::BFloat16 ? round_bf16(v) : v;
  }

  Value* to_memory(Value* v, DType t) {
    if (t == DType::Bool) return b_.CreateZExt(v, b_.getInt8Ty());
    if (t == DType::BFloat16)
      return b_.CreateTrunc(b_.CreateLShr(b_.CreateBitCast(v, b_.getInt32Ty()), 16), b_.getInt16Ty());
    return v;
  }
  Value* from_memory(Value* v, DType t) {
    if (t == DType::Bool) return b_.CreateICmpNE(v, b_.getInt8(0));
    if (t == DType::BFloat16)
      return b_.CreateBitCast(b_.CreateShl(b_.CreateZExt(v, b_.getInt32Ty()), 16), b_.getFloatTy());
    return v;
  }

  // --- operands -------------------------------------------------------------
  TV load_scalar(const Access& a) {
    Value* p = b_.CreateConstInBoundsGEP1_64(b_.getInt64Ty(), fn_->getArg(nbuf_), a.scalar_index);
    if (ir::is_floating(a.dtype)) return {b_.CreateLoad(b_.getDoubleTy(), p), DType::Float64};
    Value* i = b_.CreateLoad(b_.getInt64Ty(), p);
    if (a.dtype == DType::Bool) return {b_.CreateICmpNE(i, b_.getInt64(0)), DType::Bool};
    return {i, DType::Int64};
  }

  TV operand(ValueId v) {
    if (auto it = values_.find(v); it != values_.end()) return it->second;
    int32_t li = k_.load_of(v);
    if (li < 0 || li >= static_cast<int32_t>(k_.loads.size()))
      unsupported("operand %" + std::to_string(v) + " is neither computed in the kernel nor loaded");
    if (auto it = loaded_.find(li); it != loaded_.end()) return it->second;
    const Access& a = k_.loads[li];
    llvm::Type* mt = mem_type(a.dtype);
    Value* p = b_.CreateInBoundsGEP(mt, fn_->getArg(buffer_of_[li]), index(a.strides, a.offset));
    TV r{from_memory(b_.CreateAlignedLoad(mt, p, llvm::Align(ir::element_size(a.dtype))), a.dtype),
         a.dtype};
    return loaded_[li] = r;
  }

  // --- ops ------------------------------------------------------------------
  TV emit_node(const ir::Node& n) {
    DType ct = opmath(static_cast<DType>(attr_i64(n, 0)));
    reg_type(ct);  // rejects non-lowerable compute dtypes
    auto arg = [&](size_t i, DType t) {
      if (i >= n.operands.size()) unsupported(std::string(ir::op_name(n.kind)) + ": missing operand");
      return convert(operand(n.operands[i]), t);
    };
    switch (n.kind) {
      case OpKind::Cast:
      case OpKind::Full: return {arg(0, ct), ct};
      case OpKind::Where: return {b_.CreateSelect(arg(0, DType::Bool), arg(1, ct), arg(2, ct)), ct};
      case OpKind::Clamp: return {clamp(n, arg(0, ct), ct), ct};
      case OpKind::LogicalNot: return {b_.CreateNot(arg(0, DType::Bool)), DType::Bool};
      case OpKind::LogicalAnd: return {b_.CreateAnd(arg(0, DType::Bool), arg(1, DType::Bool)), DType::Bool};
      case OpKind::LogicalOr: return {b_.CreateOr(arg(0, DType::Bool), arg(1, DType::Bool)), DType::Bool};
      default: break;
    }
    if (ir::is_unary(n.kind)) {
      Value* x = arg(0, ct);
      return {ir::is_floating(ct) ? unary_float(n.kind, x) : unary_int(n.kind, x, ct), ct};
    }
    if (n.kind == OpKind::Pow && ir::is_floating(ct) && is_scalar_argument(n.operands[1]))
      return {pow_by_scalar(arg(0, ct), arg(1, ct)), ct};
    if (ir::is_binary(n.kind)) {
      Value* x = arg(0, ct);
      Value* y = arg(1, ct);
      Value* r = ir::is_floating(ct) ? binary_float(n.kind, x, y) : binary_int(n.kind, x, y, ct);
      return {r, ir::is_predicate(n.kind) ? DType::Bool : ct};
    }
    unsupported(std::string(ir::op_name(n.kind)) + " is not an elementwise op");
  }

  bool is_scalar_argument(ValueId v) const {
    if (values_.count(v)) return false;
    int32_t li = k_.load_of(v);
    return li >= 0 && k_.loads[li].scalar_index >= 0;
  }

  // x ** y for a scalar argument y, with ATen's CPU special cases: 2 -> x*x,
  // 3 -> x*x*x, -2 -> 1/(x*x), -1 -> 1/x, 0.5 -> sqrt (so pow(-inf, 0.5) is
  // nan, as in eager), -0.5 -> rsqrt; else pow. y is loop-invariant, so LLVM unswitches the branches out of the
  // loop and each version vectorizes (powf costs ~20x a multiply).
  Value* pow_by_scalar(Value* x, Value* y) {
    struct Case { double e; std::function<Value*()> f; };
    Value* one = fconst(x, 1.0);
    std::vector<Case> cases{
        {2.0, [&] { return b_.CreateFMul(x, x); }},
        {3.0, [&] { return b_.CreateFMul(b_.CreateFMul(x, x), x); }},
        {-2.0, [&] { return b_.CreateFDiv(one, b_.CreateFMul(x, x)); }},
        {-1.0, [&] { return b_.CreateFDiv(one, x); }},
        {0.5, [&] { return intrinsic(llvm::Intrinsic::sqrt, x); }},
        {-0.5, [&] { return b_.CreateFDiv(one, intrinsic(llvm::Intrinsic::sqrt, x)); }},
    };
    llvm::BasicBlock* done = llvm::BasicBlock::Create(ctx_, "pow.done", fn_);
    std::vector<std::pair<Value*, llvm::BasicBlock*>> results;
    for (const Case& c : cases) {
      llvm::BasicBlock* hit = llvm::BasicBlock::Create(ctx_, "pow.case", fn_);
      llvm::BasicBlock* next = llvm::BasicBlock::Create(ctx_, "pow.next", fn_);
      b_.CreateCondBr(b_.CreateFCmpOEQ(y, fconst(y, c.e)), hit, next);
      b_.SetInsertPoint(hit);
      Value* r = c.f();
      results.emplace_back(r, b_.GetInsertBlock());
      b_.CreateBr(done);
      b_.SetInsertPoint(next);
    }
    Value* general = b_.CreateBinaryIntrinsic(llvm::Intrinsic::pow, x, y);
    results.emplace_back(general, b_.GetInsertBlock());
    b_.CreateBr(done);
    b_.SetInsertPoint(done);
    llvm::PHINode* phi = b_.CreatePHI(x->getType(), static_cast<unsigned>(results.size()));
    for (auto& [v, bb] : results) phi->addIncoming(v, bb);
    return phi;
  }

  Value* clamp(const ir::Node& n, Value* x, DType ct) {
    int64_t bits = attr_i64(n, 1);
    bool f = ir::is_floating(ct), u = is_unsigned(ct);
    // Float: a NaN x compares false and stays; a NaN bound is ignored, like ATen.
    if (bits & 1) {
      Value* lo = convert(operand(n.operands.at(1)), ct);
      x = f ? b_.CreateSelect(b_.CreateFCmpOLT(x, lo), lo, x)
            : b_.CreateBinaryIntrinsic(u ? llvm::Intrinsic::umax : llvm::Intrinsic::smax, x, lo);
    }
    if (bits & 2) {
      Value* hi = convert(operand(n.operands.at(2)), ct);
      x = f ? b_.CreateSelect(b_.CreateFCmpOGT(x, hi), hi, x)
            : b_.CreateBinaryIntrinsic(u ? llvm::Intrinsic::umin : llvm::Intrinsic::smin, x, hi);
    }
    return x;
  }

  Value* fconst(Value* like, double c) { return llvm::ConstantFP::get(like->getType(), c); }
  Value* intrinsic(llvm::Intrinsic::ID id, Value* x) { return b_.CreateUnaryIntrinsic(id, x); }

  // libm functions without an LLVM intrinsic. Declared as pure so that the loop
  // vectorizer may widen them, onto libmvec's variants when it is available.
  Value* libm(const char* name, Value* x) {
    bool f32 = x->getType()->isFloatTy();
    std::string fname = std::string(name) + (f32 ? "f" : "");
    auto callee = m_.getOrInsertFunction(fname, x->getType(), x->getType());
    auto* f = llvm::cast<llvm::Function>(callee.getCallee());
    f->setDoesNotAccessMemory();
    f->setDoesNotThrow();
    f->setWillReturn();
    llvm::CallInst* call = b_.CreateCall(callee, {x});
    if (cfg_.libmvec && cfg_.opts.vectorize_math) add_vector_variants(call, fname, f32);
    return call;
  }

  // exp/log/sin/cos: LLVM's own libmvec table maps the intrinsic onto 128- and
  // 256-bit variants only; with 512-bit vectors the call names all three.
  Value* math(const char* name, llvm::Intrinsic::ID id, Value* x) {
    if (avx512_ && cfg_.opts.vector_bits >= 512 && cfg_.libmvec && cfg_.opts.vectorize_math)
      return libm(name, x);
    return intrinsic(id, x);
  }

  // LLVM 19's libmvec table covers exp/log/sin/cos/pow only; glibc >= 2.35 also
  // has tanh, erf, log1p and expm1, which we name per call site in the vector
  // function ABI ("_ZGV<isa>N<lanes>v_<name>"). Only ISAs the host runs are listed.
  void add_vector_variants(llvm::CallInst* call, const std::string& fname, bool f32) {
    struct Isa { char code; int bits; bool ok; };
    std::string attr;
    for (Isa isa : {Isa{'b', 128, true}, Isa{'d', 256, avx2_}, Isa{'e', 512, avx512_}}) {
      if (!isa.ok) continue;
      unsigned lanes = isa.bits / (f32 ? 32 : 64);
      std::string vname = std::string("_ZGV") + isa.code + "N" + std::to_string(lanes) + "v_" + fname;
      auto* vt = llvm::FixedVectorType::get(call->getType(), lanes);
      auto* vf = llvm::cast<llvm::Function>(m_.getOrInsertFunction(vname, vt, vt).getCallee());
      vf->setDoesNotAccessMemory();
      vf->setDoesNotThrow();
      vf->setWillReturn();
      // Kept alive until the vectorizer looks for it, as InjectTLIMappings does.
      if (used_.insert(vname).second) llvm::appendToCompilerUsed(m_, {vf});
      attr += (attr.empty() ? "" : ",") + vname + "(" + vname + ")";
    }
    call->addFnAttr(llvm::Attribute::get(ctx_, "vector-function-abi-variant", attr));
  }

  // float32 tanh as the rational approximation Eigen and XLA use (13/6 odd/even
  // polynomials on [-7.9, 7.9], x itself below 4e-4): a few ulp, branch-free and
  // vectorized inline; glibc's vector tanhf costs ~15 cycles an element.
  // float64 keeps libm.
  Value* tanh(Value* x) {
    if (!x->getType()->isFloatTy()) return libm("tanh", x);
    Value* ax = intrinsic(llvm::Intrinsic::fabs, x);
    Value* c = b_.CreateBinaryIntrinsic(llvm::Intrinsic::minnum, x, fconst(x, 7.90531110763549805));
    c = b_.CreateBinaryIntrinsic(llvm::Intrinsic::maxnum, c, fconst(x, -7.90531110763549805));
    Value* x2 = b_.CreateFMul(c, c);
    auto poly = [&](std::initializer_list<double> coeffs) {  // highest degree first, in x2
      Value* acc = nullptr;
      // fmuladd: one FMA per step where the host has FMA (our own
      // approximation, so contraction changes no PyTorch rounding).
      for (double k : coeffs)
        acc = acc ? b_.CreateIntrinsic(llvm::Intrinsic::fmuladd, {x->getType()}, {acc, x2, fconst(x, k)})
                  : fconst(x, k);
      return acc;
    };
    Value* p = b_.CreateFMul(c, poly({-2.76076847742355e-16, 2.00018790482477e-13, -8.60467152213735e-11,
                                      5.12229709037114e-08, 1.48572235717979e-05, 6.37261928875436e-04,
                                      4.89352455891786e-03}));
    Value* q = poly({1.19825839466702e-06, 1.18534705686654e-04, 2.26843463243900e-03, 4.89352518554385e-03});
    Value* r = b_.CreateFDiv(p, q);
    // |x| >= 9.011: tanhf(x) rounds to +-1 exactly (so gelu(-inf) is nan, as in
    // eager); the polynomial alone stops 3e-7 short.
    r = b_.CreateSelect(b_.CreateFCmpOGE(ax, fconst(x, 9.01099967956543)),
                        b_.CreateBinaryIntrinsic(llvm::Intrinsic::copysign, fconst(x, 1.0), x), r);
    // Tiny |x|: tanh(x) = x (keeps -0.0 and subnormals exact); NaN stays NaN.
    return b_.CreateSelect(b_.CreateFCmpOLT(ax, fconst(x, 0.0004)), x,
                           b_.CreateSelect(b_.CreateFCmpUNO(x, x), x, r));
  }

  Value* unary_float(OpKind k, Value* x) {
    Value* one = fconst(x, 1.0);
    switch (k) {
      case OpKind::Abs: return intrinsic(llvm::Intrinsic::fabs, x);
      case OpKind::Neg: return b_.CreateFNeg(x);
      case OpKind::Exp: return math("exp", llvm::Intrinsic::exp, x);
      case OpKind::Log: return math("log", llvm::Intrinsic::log, x);
      case OpKind::Sqrt: return intrinsic(llvm::Intrinsic::sqrt, x);
      case OpKind::Rsqrt: return b_.CreateFDiv(one, intrinsic(llvm::Intrinsic::sqrt, x));
      case OpKind::Tanh: return tanh(x);
      case OpKind::Sigmoid:
        return b_.CreateFDiv(one, b_.CreateFAdd(one, math("exp", llvm::Intrinsic::exp, b_.CreateFNeg(x))));
      // ugt: NaN or positive keeps x, so NaN propagates.
      case OpKind::Relu: return b_.CreateSelect(b_.CreateFCmpUGT(x, fconst(x, 0.0)), x, fconst(x, 0.0));
      case OpKind::Gelu: {
        Value* e = libm("erf", b_.CreateFMul(x, fconst(x, M_SQRT1_2)));
        return b_.CreateFMul(b_.CreateFMul(fconst(x, 0.5), x), b_.CreateFAdd(one, e));
      }
      case OpKind::GeluTanh: {
        Value* x3 = b_.CreateFMul(b_.CreateFMul(x, x), x);
        Value* inner = b_.CreateFMul(fconst(x, std::sqrt(2.0 / M_PI)),
                                     b_.CreateFAdd(x, b_.CreateFMul(fconst(x, 0.044715), x3)));
        return b_.CreateFMul(b_.CreateFMul(fconst(x, 0.5), x), b_.CreateFAdd(one, tanh(inner)));
      }
      case OpKind::Silu:
        return b_.CreateFDiv(x, b_.CreateFAdd(one, math("exp", llvm::Intrinsic::exp, b_.CreateFNeg(x))));
      case OpKind::Reciprocal: return b_.CreateFDiv(one, x);
      case OpKind::Sin: return math("sin", llvm::Intrinsic::sin, x);
      case OpKind::Cos: return math("cos", llvm::Intrinsic::cos, x);
      case OpKind::Log1p: return libm("log1p", x);
      case OpKind::Expm1: return libm("expm1", x);
      case OpKind::Erf: return libm("erf", x);
      default: unsupported(std::string(ir::op_name(k)) + " on a floating dtype");
    }
  }

  Value* unary_int(OpKind k, Value* x, DType ct) {
    bool u = is_unsigned(ct);
    switch (k) {
      case OpKind::Abs: return u ? x : b_.CreateBinaryIntrinsic(llvm::Intrinsic::abs, x, b_.getFalse());
      case OpKind::Neg:
        if (ct == DType::Bool) break;
        return b_.CreateNeg(x);
      case OpKind::Relu:
        return u ? x : b_.CreateBinaryIntrinsic(llvm::Intrinsic::smax, x, llvm::ConstantInt::get(x->getType(), 0));
      default: break;
    }
    unsupported(std::string(ir::op_name(k)) + " on " + std::string(ir::dtype_name(ct)));
  }

  Value* binary_float(OpKind k, Value* a, Value* b) {
    switch (k) {
      case OpKind::Add: return b_.CreateFAdd(a, b);
      case OpKind::Sub: return b_.CreateFSub(a, b);
      case OpKind::Mul: return b_.CreateFMul(a, b);
      case OpKind::Div: return b_.CreateFDiv(a, b);
      case OpKind::DivTrunc: return intrinsic(llvm::Intrinsic::trunc, b_.CreateFDiv(a, b));
      case OpKind::DivFloor: return div_floor(a, b);
      case OpKind::Remainder: {
        Value* mod = b_.CreateFRem(a, b);
        return b_.CreateSelect(sign_fix(mod, b), b_.CreateFAdd(mod, b), mod);
      }
      case OpKind::Pow: return b_.CreateBinaryIntrinsic(llvm::Intrinsic::pow, a, b);
      // uno: either is NaN, and a + b is then NaN.
      case OpKind::Maximum:
        return b_.CreateSelect(b_.CreateFCmpUNO(a, b), b_.CreateFAdd(a, b),
                               b_.CreateSelect(b_.CreateFCmpOGT(a, b), a, b));
      case OpKind::Minimum:
        return b_.CreateSelect(b_.CreateFCmpUNO(a, b), b_.CreateFAdd(a, b),
                               b_.CreateSelect(b_.CreateFCmpOLT(a, b), a, b));
      case OpKind::Eq: return b_.CreateFCmpOEQ(a, b);
      case OpKind::Ne: return b_.CreateFCmpUNE(a, b);
      case OpKind::Lt: return b_.CreateFCmpOLT(a, b);
      case OpKind::Le: return b_.CreateFCmpOLE(a, b);
      case OpKind::Gt: return b_.CreateFCmpOGT(a, b);
      case OpKind::Ge: return b_.CreateFCmpOGE(a, b);
      default: unsupported(std::string(ir::op_name(k)) + " on a floating dtype");
    }
  }

  // fmod's result has a's sign; Python's modulo wants b's.
  Value* sign_fix(Value* mod, Value* b) {
    Value* zero = fconst(b, 0.0);
    return b_.CreateAnd(b_.CreateFCmpUNE(mod, zero),
                        b_.CreateXor(b_.CreateFCmpOLT(b, zero), b_.CreateFCmpOLT(mod, zero)));
  }

  // ATen's div_floor_floating, branch-free.
  Value* div_floor(Value* a, Value* b) {
    Value* zero = fconst(a, 0.0);
    Value* q = b_.CreateFDiv(a, b);
    Value* mod = b_.CreateFRem(a, b);
    Value* div = b_.CreateFDiv(b_.CreateFSub(a, mod), b);
    div = b_.CreateSelect(sign_fix(mod, b), b_.CreateFSub(div, fconst(a, 1.0)), div);
    Value* fl = intrinsic(llvm::Intrinsic::floor, div);
    fl = b_.CreateSelect(b_.CreateFCmpOGT(b_.CreateFSub(div, fl), fconst(a, 0.5)),
                         b_.CreateFAdd(fl, fconst(a, 1.0)), fl);
    Value* r = b_.CreateSelect(b_.CreateFCmpUNE(div, zero), fl,
                               b_.CreateBinaryIntrinsic(llvm::Intrinsic::copysign, zero, q));
    return b_.CreateSelect(b_.CreateFCmpOEQ(b, zero), q, r);
  }

  Value* binary_int(OpKind k, Value* a, Value* b, DType ct) {
    bool u = is_unsigned(ct), bl = ct == DType::Bool;
    using P = llvm::CmpInst::Predicate;
    switch (k) {
      // ATen: bool add is or, bool mul is and (sub on bool is an error there).
      case OpKind::Add: return bl ? b_.CreateOr(a, b) : b_.CreateAdd(a, b);
      case OpKind::Sub:
        if (bl) break;
        return b_.CreateSub(a, b);
      case OpKind::Mul: return bl ? b_.CreateAnd(a, b) : b_.CreateMul(a, b);
      case OpKind::Maximum: return b_.CreateBinaryIntrinsic(u ? llvm::Intrinsic::umax : llvm::Intrinsic::smax, a, b);
      case OpKind::Minimum: return b_.CreateBinaryIntrinsic(u ? llvm::Intrinsic::umin : llvm::Intrinsic::smin, a, b);
      case OpKind::Eq: return b_.CreateICmp(P::ICMP_EQ, a, b);
      case OpKind::Ne: return b_.CreateICmp(P::ICMP_NE, a, b);
      case OpKind::Lt: return b_.CreateICmp(u ? P::ICMP_ULT : P::ICMP_SLT, a, b);
      case OpKind::Le: return b_.CreateICmp(u ? P::ICMP_ULE : P::ICMP_SLE, a, b);
      case OpKind::Gt: return b_.CreateICmp(u ? P::ICMP_UGT : P::ICMP_SGT, a, b);
      case OpKind::Ge: return b_.CreateICmp(u ? P::ICMP_UGE : P::ICMP_SGE, a, b);
      case OpKind::BitAnd: return b_.CreateAnd(a, b);
      case OpKind::BitOr: return b_.CreateOr(a, b);
      case OpKind::BitXor: return b_.CreateXor(a, b);
      default: break;
    }
    unsupported(std::string(ir::op_name(k)) + " on " + std::string(ir::dtype_name(ct)));
  }

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
  llvm::Function* fn_ = nullptr;
  size_t nbuf_ = 0;                  // buffer parameters: loads, then stores
  std::vector<int> buffer_of_;       // per load: its buffer parameter, -1 for scalars
  std::vector<Value*> idx_;          // per dim: the induction variable
  size_t nrow_ = 0, ncol_ = 0;       // row kernels: leading row dims, trailing col dims
  bool cols_empty_ = false;          // row kernels: no cols (empty rows)
  std::unordered_map<ValueId, size_t> pos_of_;  // row kernels: node position of each value
  std::unordered_map<size_t, llvm::AllocaInst*> scratch_;  // row kernels: kept nodes' row arrays
  std::vector<bool> computed_;       // row kernels: positions an earlier col loop of the row made
  std::unordered_map<ValueId, TV> values_;  // computed in the kernel
  std::unordered_map<int32_t, TV> loaded_;  // per load index
  std::unordered_set<std::string> used_;  // vector variants declared
};

}  // namespace

std::unique_ptr<llvm::Module> emit_module(llvm::LLVMContext& ctx, const ir::Graph& g,
                                          const Plan& plan, llvm::TargetMachine& tm,
                                          const CodegenConfig& cfg) {
  auto m = std::make_unique<llvm::Module>("lazyjit", ctx);
  m->setDataLayout(tm.createDataLayout());
  m->setTargetTriple(tm.getTargetTriple().str());
  for (const FusedKernel& k : plan.kernels) {
    try {
      KernelEmitter(*m, g, k, cfg, tm).emit();
      std::string err;
      llvm::raw_string_ostream os(err);
      for (const char* suffix : {".impl", ""})
        if (llvm::verifyFunction(*m->getFunction(k.name + cfg.symbol_suffix + suffix), &os))
          throw std::runtime_error("invalid IR: " + err);
    } catch (const std::exception& e) {
      throw std::runtime_error("kernel " + k.name + ": " + e.what());
    }
  }
  return m;
}

void optimize_module(llvm::Module& m, llvm::TargetMachine& tm, const CodegenConfig& cfg) {
  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  llvm::PipelineTuningOptions pto;
  pto.LoopVectorization = cfg.opts.opt_level >= 2;
  pto.SLPVectorization = cfg.opts.opt_level >= 2;
  llvm::PassBuilder pb(&tm, pto);

  llvm::Triple triple(m.getTargetTriple());
  llvm::TargetLibraryInfoImpl tlii(triple);
  if (cfg.libmvec && cfg.opts.vectorize_math)
    tlii.addVectorizableFunctionsFromVecLib(llvm::TargetLibraryInfoImpl::LIBMVEC_X86, triple);
  fam.registerPass([&] { return llvm::TargetLibraryAnalysis(tlii); });

  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);

  llvm::OptimizationLevel level = llvm::OptimizationLevel::O3;
  switch (cfg.opts.opt_level) {
    case 0: level = llvm::OptimizationLevel::O0; break;
    case 1: level = llvm::OptimizationLevel::O1; break;
    case 2: level = llvm::OptimizationLevel::O2; break;
    default: break;
  }
  llvm::ModulePassManager mpm = level == llvm::OptimizationLevel::O0
                                    ? pb.buildO0DefaultPipeline(level)
                                    : pb.buildPerModuleDefaultPipeline(level);
  mpm.run(m, mam);
}

}  // namespace lazyjit::lowering::cpu
