// Row kernels: the loops of a row kernel as its RowSchedule (plan) lists them;
// per row, the col loops that feed each reduction, the row-space values, then
// the loop writing the full-size outputs.
#include "lowering/cpu/emitter.h"

#include <algorithm>

namespace lazyjit::lowering::cpu::emit {

void KernelEmitter::emit_row_impl(llvm::BasicBlock* exit) {
  ncol_ = static_cast<size_t>(k_.reduce_rank);
  if (k_.row_space.size() != k_.nodes.size() || ncol_ < 1 || ncol_ >= sizes_.size())
    unsupported("malformed row kernel (reduce_rank " + std::to_string(k_.reduce_rank) + ", rank " +
                std::to_string(sizes_.size()) + ")");
  if (k_.schedule.steps.empty()) unsupported("row kernel without a row schedule");
  nrow_ = sizes_.size() - ncol_;
  alloc_scratch();
  emit_outer_loops(exit, nrow_, [&] { emit_row_body(); });
}

llvm::MDNode* KernelEmitter::row_loop_md() {
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

void KernelEmitter::alloc_scratch() {
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

void KernelEmitter::emit_col_loop(const ColLoop& w, const std::function<void()>& body) {
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

void KernelEmitter::emit_kernel_node(const ir::Node& n) {
  DType out = g_.value(n.outputs[0]).type.dtype;
  TV r = emit_node(n);
  values_[n.outputs[0]] = {convert(r, out), out};
}

Value* KernelEmitter::contiguous_index(size_t first, size_t last) {
  std::vector<int64_t> st(sizes_.size(), 0);
  int64_t acc = 1;
  for (size_t d = last; d-- > first;) {
    st[d] = acc;
    acc *= sizes_[d];
  }
  return index(st, 0);
}

void KernelEmitter::store(size_t s, Value* offset) {
  DType t = g_.value(k_.stores[s]).type.dtype;
  Value* v = to_memory(convert(operand(k_.stores[s]), t), t);
  Value* p = b_.CreateInBoundsGEP(mem_type(t), fn_->getArg(nbuf_ - k_.stores.size() + s), offset);
  b_.CreateAlignedStore(v, p, llvm::Align(ir::element_size(t)));
}

void KernelEmitter::emit_row_body() {
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

void KernelEmitter::emit_reduction(const ir::Node& n, const std::optional<ColLoop>& cols) {
  DType at = ir::opmath_dtype(static_cast<DType>(attr_i64(n, 0)));
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
  if (cols) {
    emit_col_loop(*cols, [&] {
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

}  // namespace lazyjit::lowering::cpu::emit
