// Row kernels: per row, one loop over the cols per reduction (recomputing or
// reading back from scratch the elementwise chain feeding it), the row-space
// values, then one loop writing the full-size outputs.
#include "lowering/cpu/emitter.h"

namespace lazyjit::lowering::cpu::emit {

void KernelEmitter::emit_row_impl(llvm::BasicBlock* exit) {
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
  plan_row_scratch();
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

bool KernelEmitter::is_row_value(ValueId v) const {
  auto it = pos_of_.find(v);
  return it != pos_of_.end() && k_.row_space[it->second];
}

KernelEmitter::Walk KernelEmitter::walk_full(const std::vector<ValueId>& targets, const std::vector<bool>& stop_at) const {
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

KernelEmitter::ColWork KernelEmitter::full_nodes_for(const std::vector<ValueId>& targets) const {
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

void KernelEmitter::plan_row_scratch() {
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

void KernelEmitter::emit_col_loop(const ColWork& w, const std::function<void()>& body) {
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

void KernelEmitter::emit_reduction(const ir::Node& n) {
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

}  // namespace lazyjit::lowering::cpu::emit
