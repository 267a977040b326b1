// Row kernels: the loops of a row kernel as its RowSchedule (plan) lists them;
// per row, the col loops that feed each reduction, the row-space values, then
// the loop writing the full-size outputs.
#include "targets/cpu/loop_emitter.h"

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
  // Shape-generic code: room for the most cols a schedule keeps scratch for
  // (row_schedule.h: cols x 8 bytes x arrays <= kRowScratchBytes).
  if (cfg_.generic) cols = kRowScratchBytes / 8 / static_cast<int64_t>(k_.schedule.scratch.size());
  llvm::IRBuilder<> eb(&fn_->getEntryBlock(), fn_->getEntryBlock().begin());
  for (int32_t p : k_.schedule.scratch) {
    DType t = g_.value(g_.nodes().at(k_.nodes.at(p)).outputs[0]).type.dtype;
    llvm::AllocaInst* a = eb.CreateAlloca(llvm::ArrayType::get(scratch_type(t), cols), nullptr, "scratch");
    a->setAlignment(llvm::Align(64));
    scratch_[p] = a;
  }
}

void LoopEmitter::emit_col_loop(const ColLoop& w, const std::function<void()>& body,
                                const BlockHooks* blocks) {
  auto saved_values = values_;
  auto saved_loaded = loaded_;
  auto element = [&] {
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
  };
  const size_t last = sizes_.size();
  if (!blocks) {
    emit_loops(nrow_, last, b_.getInt64(0), size_v_[nrow_], element);
  } else {
    const auto d = static_cast<size_t>(blocks->blocks.dim);
    const int64_t chunk = blocks->blocks.chunk;
    if (d < nrow_ || d >= last || chunk < 1 || (!cfg_.generic && chunk >= sizes_[d]))
      unsupported("malformed sum blocks (dim " + std::to_string(d) + ", chunk " + std::to_string(chunk) + ")");
    Value* n = size_v_[d];
    auto block_loop = [&] {
      Value* nblocks = b_.CreateUDiv(b_.CreateAdd(n, b_.getInt64(chunk - 1)), b_.getInt64(chunk));
      emit_counted_loop(nblocks, [&](Value* c) {
        Value* start = b_.CreateMul(c, b_.getInt64(chunk), "", /*NUW=*/true, /*NSW=*/true);
        Value* stop = b_.CreateBinaryIntrinsic(
            llvm::Intrinsic::smin, b_.CreateAdd(start, b_.getInt64(chunk), "", true, true), n);
        blocks->begin_block();
        emit_loops(d, last, start, stop, element);
        blocks->end_block();
      });
    };
    if (d > nrow_) emit_loops(nrow_, d, b_.getInt64(0), size_v_[nrow_], block_loop);
    else block_loop();
  }
  values_ = std::move(saved_values);
  loaded_ = std::move(saved_loaded);
}

void LoopEmitter::emit_counted_loop(Value* n, const std::function<void(Value* i)>& body) {
  llvm::BasicBlock* pre = b_.GetInsertBlock();
  llvm::BasicBlock* head = llvm::BasicBlock::Create(ctx_, "block", fn_);
  b_.CreateBr(head);
  b_.SetInsertPoint(head);
  llvm::PHINode* i = b_.CreatePHI(b_.getInt64Ty(), 2, "blk");
  i->addIncoming(b_.getInt64(0), pre);
  body(i);
  Value* next = b_.CreateAdd(i, b_.getInt64(1), "", /*NUW=*/true, /*NSW=*/true);
  i->addIncoming(next, b_.GetInsertBlock());
  llvm::BasicBlock* after = llvm::BasicBlock::Create(ctx_, "block.end", fn_);
  b_.CreateCondBr(b_.CreateICmpSLT(next, n), head, after);
  b_.SetInsertPoint(after);
}

void LoopEmitter::emit_row_body() {
  for (const RowStep& st : k_.schedule.steps) {
    switch (st.kind) {
      case RowStep::Kind::Node: emit_kernel_node(g_.nodes().at(k_.nodes.at(st.node))); break;
      case RowStep::Kind::Reduce: emit_reduction(g_.nodes().at(k_.nodes.at(st.node)), st); break;
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

void LoopEmitter::emit_reduction(const ir::Node& n, const RowStep& st) {
  DType at = ir::opmath_dtype(static_cast<DType>(attr_i64(n, 0)));
  DType out = g_.value(n.outputs[0]).type.dtype;
  const bool blocked = st.cols && st.blocks;
  if (blocked && (n.kind != OpKind::ReduceSum || !ir::is_floating(at)))
    unsupported("sum blocks on a " + std::string(ir::op_name(n.kind)) + " in " + std::string(ir::dtype_name(at)));
  DType t = blocked ? DType::Float64 : at;  // blocks sum in float64 (row_schedule.h)
  llvm::Type* T = reg_type(b_, t);
  Value* init = reduction_identity(b_, n.kind, t);
  llvm::IRBuilder<> eb(&fn_->getEntryBlock(), fn_->getEntryBlock().begin());
  llvm::AllocaInst* acc = eb.CreateAlloca(T, nullptr, "acc");
  b_.CreateStore(init, acc);
  auto step = [&] {
    Value* x = convert(b_, {convert(b_, operand(n.operands[0]), at), at}, t);
    b_.CreateStore(reduction_step(b_, n.kind, b_.CreateLoad(T, acc), x, t), acc);
  };
  if (!blocked) {
    if (st.cols) emit_col_loop(*st.cols, step);
    values_[n.outputs[0]] = {convert(b_, inject_fault(math(), n.kind, {b_.CreateLoad(T, acc), at}), out), out};
    return;
  }
  // Neumaier's compensated sum of the block sums.
  llvm::AllocaInst* hi = eb.CreateAlloca(T, nullptr, "sum.hi");
  llvm::AllocaInst* lo = eb.CreateAlloca(T, nullptr, "sum.lo");
  b_.CreateStore(llvm::ConstantFP::getZero(T, /*Negative=*/true), hi);
  b_.CreateStore(llvm::ConstantFP::getZero(T), lo);
  auto fabs = [&](Value* v) { return b_.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, v); };
  BlockHooks hooks{*st.blocks, [&] { b_.CreateStore(init, acc); },
                   [&] {
                     Value* x = b_.CreateLoad(T, acc);
                     Value* s = b_.CreateLoad(T, hi);
                     Value* sum = b_.CreateFAdd(s, x);
                     Value* err = b_.CreateSelect(b_.CreateFCmpOGE(fabs(s), fabs(x)),
                                                  b_.CreateFAdd(b_.CreateFSub(s, sum), x),
                                                  b_.CreateFAdd(b_.CreateFSub(x, sum), s));
                     b_.CreateStore(b_.CreateFAdd(b_.CreateLoad(T, lo), err), lo);
                     b_.CreateStore(sum, hi);
                   }};
  emit_col_loop(*st.cols, step, &hooks);
  // Once the sum is inf or NaN it stays so, and the compensation is NaN: skip it
  // then (and when it is zero, which keeps a -0 sum's sign).
  Value* s = b_.CreateLoad(T, hi);
  Value* c = b_.CreateLoad(T, lo);
  Value* use = b_.CreateAnd(b_.CreateFCmpOLT(fabs(s), llvm::ConstantFP::getInfinity(T)),
                            b_.CreateFCmpONE(c, llvm::ConstantFP::getZero(T)));
  Value* sum = convert(b_, {b_.CreateSelect(use, b_.CreateFAdd(s, c), s), t}, at);
  values_[n.outputs[0]] = {convert(b_, inject_fault(math(), n.kind, {sum, at}), out), out};
}

}  // namespace lazyjit::lowering::cpu::emit
