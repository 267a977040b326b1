// Row kernels: the loops of a row kernel as its RowSchedule (plan) lists them;
// per row, the col loops that feed each reduction, the row-space values, then
// the loop writing the full-size outputs.
#include "lowering/cpu/loop_emitter.h"

#include <algorithm>

namespace lazyjit::lowering::cpu::emit {

void LoopEmitter::emit_row_impl(llvm::BasicBlock* exit) {
  ncol_ = static_cast<size_t>(k_.reduce_rank);
  if (k_.row_space.size() != k_.nodes.size() || ncol_ < 1 || ncol_ >= sizes_.size())
    unsupported("malformed row kernel (reduce_rank " + std::to_string(k_.reduce_rank) + ", rank " +
                std::to_string(sizes_.size()) + ")");
  if (k_.schedule.steps.empty()) unsupported("row kernel without a row schedule");
  nrow_ = sizes_.size() - ncol_;
  alloc_scratch();
  emit_outer_loops(exit, nrow_, [&] { emit_row_body(); });
}

llvm::MDNode* LoopEmitter::row_loop_md() {
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

void LoopEmitter::alloc_scratch() {
  if (k_.schedule.scratch.empty()) return;
  int64_t cols = 1;
  for (size_t d = nrow_; d < sizes_.size(); ++d) cols *= sizes_[d];
  llvm::IRBuilder<> eb(&fn_->getEntryBlock(), fn_->getEntryBlock().begin());
  for (int32_t p : k_.schedule.scratch) {
    DType t = g_.value(g_.nodes().at(k_.nodes.at(p)).outputs[0]).type.dtype;
    llvm::AllocaInst* a = eb.CreateAlloca(llvm::ArrayType::get(scratch_type(t), cols), nullptr, "scratch");
    a->setAlignment(llvm::Align(64));
    scratch_[p] = a;
  }
}

void LoopEmitter::emit_col_loop(const ColLoop& w, const std::function<void()>& body) {
  auto saved_values = values_;
  auto saved_loaded = loaded_;
  emit_loops(nrow_, sizes_.size(), b_.getInt64(0), b_.getInt64(sizes_[nrow_]), [&] {
    Value* col = scratch_.empty() ? nullptr : contiguous_index(nrow_, sizes_.size());
    for (int32_t i : w.reload) {
      ValueId v = g_.nodes().at(k_.nodes[i]).outputs[0];
      DType t = g_.value(v).type.dtype;
      llvm::Type* st = scratch_type(t);
      Value* x = b_.CreateLoad(st, b_.CreateInBoundsGEP(st, scratch_.at(i), col));
      if (t == DType::Bool) x = b_.CreateICmpNE(x, b_.getInt8(0));
      values_[v] = {x, t};
    }
    for (int32_t i : w.compute) {
      const ir::Node& n = g_.nodes().at(k_.nodes[i]);
      emit_kernel_node(n);
      if (std::find(w.keep.begin(), w.keep.end(), i) != w.keep.end()) {
        DType t = g_.value(n.outputs[0]).type.dtype;
        Value* x = values_.at(n.outputs[0]).v;
        if (t == DType::Bool) x = b_.CreateZExt(x, b_.getInt8Ty());
        b_.CreateStore(x, b_.CreateInBoundsGEP(scratch_type(t), scratch_.at(i), col));
      }
    }
    body();
  });
  values_ = std::move(saved_values);
  loaded_ = std::move(saved_loaded);
}

void LoopEmitter::emit_row_body() {
  for (const RowStep& st : k_.schedule.steps) {
    switch (st.kind) {
      case RowStep::Kind::Node: emit_kernel_node(g_.nodes().at(k_.nodes.at(st.node))); break;
      case RowStep::Kind::Reduce: emit_reduction(g_.nodes().at(k_.nodes.at(st.node)), st.cols); break;
      case RowStep::Kind::StoreRows:
        for (int32_t s : st.stores) store(s, contiguous_index(0, nrow_));
        break;
      case RowStep::Kind::StoreCols:
        if (!st.cols) break;
        emit_col_loop(*st.cols, [&] {
          Value* off = contiguous_index(0, sizes_.size());
          for (int32_t s : st.stores) store(s, off);
        });
        break;
    }
  }
}

void LoopEmitter::emit_reduction(const ir::Node& n, const std::optional<ColLoop>& cols) {
  DType at = ir::opmath_dtype(static_cast<DType>(attr_i64(n, 0)));
  llvm::Type* T = reg_type(b_, at);
  Value* init = reduction_identity(b_, n.kind, at);
  llvm::IRBuilder<> eb(&fn_->getEntryBlock(), fn_->getEntryBlock().begin());
  llvm::AllocaInst* acc = eb.CreateAlloca(T, nullptr, "acc");
  b_.CreateStore(init, acc);
  if (cols) {
    emit_col_loop(*cols, [&] {
      Value* x = convert(b_, operand(n.operands[0]), at);
      Value* cur = b_.CreateLoad(T, acc);
      b_.CreateStore(reduction_step(b_, n.kind, cur, x, at), acc);
    });
  }
  DType out = g_.value(n.outputs[0]).type.dtype;
  values_[n.outputs[0]] = {convert(b_, {b_.CreateLoad(T, acc), at}, out), out};
}

}  // namespace lazyjit::lowering::cpu::emit
