// Row kernels on the GPU, by the launch shape's row mode (kernel_emitter.h):
// block rows (one block per row, grid-stride over rows, the block's threads
// striding over the row's flattened cols, each reduction ending in a block
// reduction) or warp rows (one warp per row, block / 32 rows a block, the
// lanes striding over the cols, each reduction one warp butterfly: no shared
// memory, no barriers). The RowSchedule's steps in order. Col loops recompute
// the full-space nodes they need (no scratch: a row's reload is a recompute
// here); a reduction's result is held by every thread of the row's block (or
// every lane of its warp).
//
// Float sums accumulate in the accumulate dtype (float32 for float32, as CUDA
// eager does); RowStep::blocks (the CPU's float64 SumBlocks) are ignored: each
// thread's partial covers cols / block of the row, and the tree combining the
// partials bounds the error growth the blocks exist for on the CPU.
#include <llvm/IR/IntrinsicsNVPTX.h>

#include "targets/cuda/kernel_emitter.h"

namespace lazyjit::lowering::cuda::emit {

namespace {
constexpr unsigned kShared = 3;  // NVPTX address space
}

void KernelEmitter::emit_rows() {
  const size_t rank = sizes_.size();
  const auto ncol = static_cast<size_t>(k_.reduce_rank);
  if (k_.row_space.size() != k_.nodes.size() || ncol < 1 || ncol >= rank)
    unsupported("malformed row kernel (reduce_rank " + std::to_string(k_.reduce_rank) + ", rank " +
                std::to_string(rank) + ")");
  if (k_.schedule.steps.empty()) unsupported("row kernel without a row schedule");
  nrow_ = rank - ncol;
  for (size_t p = 0; p < k_.nodes.size(); ++p)
    if (!k_.row_space[p])
      for (ValueId v : g_.nodes().at(k_.nodes[p]).outputs) position_of_[v] = static_cast<int32_t>(p);
  ncols_ = ival(1);
  for (size_t d = nrow_; d < rank; ++d) ncols_ = b_.CreateMul(ncols_, size_v_[d], "", true, true);

  auto* i64 = b_.getInt64Ty();
  Value* ctaid = b_.CreateZExt(sreg(llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_x), i64);
  Value* nctaid = b_.CreateZExt(sreg(llvm::Intrinsic::nvvm_read_ptx_sreg_nctaid_x), i64);
  Value* first = ctaid;
  Value* step = nctaid;
  if (warp_rows()) {
    // Warp w of block c starts at row c * warps + w and strides by the grid's warps.
    Value* tid = b_.CreateZExt(sreg(llvm::Intrinsic::nvvm_read_ptx_sreg_tid_x), i64);
    Value* ntid = b_.CreateZExt(sreg(llvm::Intrinsic::nvvm_read_ptx_sreg_ntid_x), i64);
    Value* warps = b_.CreateLShr(ntid, b_.getInt64(5), "warps");
    first = b_.CreateAdd(b_.CreateMul(ctaid, warps, "", true, true), b_.CreateLShr(tid, b_.getInt64(5)), "", true, true);
    step = b_.CreateMul(nctaid, warps, "", true, true);
  }
  // Every thread of a block (warp rows: of a warp) runs the same rows: the row
  // loop and the row-level code between col loops are uniform there, so
  // barriers (block rows) and shuffles there are safe.
  emit_stride_loop(first, total_, step, "row", [&](Value* r) {
    row_flat_ = b_.CreateZExtOrTrunc(r, it_);
    idx_.assign(rank, nullptr);
    decompose(row_flat_, 0, nrow_);
    values_.clear();
    for (auto it = loaded_.begin(); it != loaded_.end();)
      it = k_.loads[it->first].scalar_index >= 0 ? std::next(it) : loaded_.erase(it);
    for (const RowStep& st : k_.schedule.steps) emit_row_step(st);
  });
}

void KernelEmitter::emit_row_step(const RowStep& st) {
  switch (st.kind) {
    case RowStep::Kind::Node: emit_kernel_node(g_.nodes().at(k_.nodes.at(st.node))); break;
    case RowStep::Kind::Reduce: emit_reduction(g_.nodes().at(k_.nodes.at(st.node)), st); break;
    case RowStep::Kind::StoreRows: {
      // Computed by every thread (the values stay defined for later steps),
      // stored by thread 0 (warp rows: lane 0).
      std::vector<Value*> vs;
      for (int32_t s : st.stores) vs.push_back(store_value(static_cast<size_t>(s)));
      llvm::BasicBlock* one = llvm::BasicBlock::Create(ctx_, "store.rows", fn_);
      llvm::BasicBlock* done = llvm::BasicBlock::Create(ctx_, "store.rows.end", fn_);
      Value* tid = sreg(llvm::Intrinsic::nvvm_read_ptx_sreg_tid_x);
      if (warp_rows()) tid = b_.CreateAnd(tid, b_.getInt32(31), "lane");
      b_.CreateCondBr(b_.CreateICmpEQ(tid, b_.getInt32(0)), one, done);
      b_.SetInsertPoint(one);
      for (size_t i = 0; i < st.stores.size(); ++i) store_at(static_cast<size_t>(st.stores[i]), vs[i], row_flat_);
      b_.CreateBr(done);
      b_.SetInsertPoint(done);
      break;
    }
    case RowStep::Kind::StoreCols:
      if (!st.cols) break;  // empty rows: nothing to store
      emit_col_loop([&] {
        Value* off = b_.CreateAdd(b_.CreateMul(row_flat_, ncols_, "", true, true), col_flat_, "", true, true);
        for (int32_t s : st.stores) store_at(static_cast<size_t>(s), store_value(static_cast<size_t>(s)), off);
      });
      break;
  }
}

void KernelEmitter::emit_col_loop(const std::function<void()>& body) {
  auto saved_values = values_;
  auto saved_loaded = loaded_;
  // Block rows: the block's threads stride over the cols; warp rows: the warp's lanes.
  Value* tid = sreg(llvm::Intrinsic::nvvm_read_ptx_sreg_tid_x);
  Value* ntid = sreg(llvm::Intrinsic::nvvm_read_ptx_sreg_ntid_x);
  if (warp_rows()) {
    tid = b_.CreateAnd(tid, b_.getInt32(31), "lane");
    ntid = b_.getInt32(32);
  }
  const size_t rank = sizes_.size();
  emit_stride_loop(
      tid, ncols_, ntid, "col",
      [&](Value* c) {
        col_flat_ = c;
        decompose(c, nrow_, rank);
        body();
      },
      it_);
  for (size_t d = nrow_; d < rank; ++d) idx_[d] = nullptr;
  col_flat_ = nullptr;
  values_ = std::move(saved_values);
  loaded_ = std::move(saved_loaded);
}

void KernelEmitter::emit_reduction(const ir::Node& n, const RowStep& st) {
  DType at = ir::opmath_dtype(static_cast<DType>(attr_i64(n, 0)));
  DType out = g_.value(n.outputs[0]).type.dtype;
  llvm::Type* T = reg_type(b_, at);
  Value* init = reduction_identity(b_, n.kind, at);
  if (!st.cols) {  // empty rows: the identity
    values_[n.outputs[0]] = {convert(b_, inject_fault(math(), n.kind, {init, at}), out), out};
    return;
  }
  llvm::IRBuilder<> eb(&fn_->getEntryBlock(), fn_->getEntryBlock().begin());
  llvm::AllocaInst* acc = eb.CreateAlloca(T, nullptr, "acc");
  b_.CreateStore(init, acc);
  emit_col_loop([&] {
    Value* x = convert(b_, operand(n.operands.at(0)), at);
    b_.CreateStore(reduction_step(b_, n.kind, b_.CreateLoad(T, acc), x, at), acc);
  });
  Value* r = block_reduce(b_.CreateLoad(T, acc), n.kind, at);
  values_[n.outputs[0]] = {convert(b_, inject_fault(math(), n.kind, {r, at}), out), out};
}

Value* KernelEmitter::shuffle_xor(Value* v, int lane_mask) {
  llvm::Type* T = v->getType();
  auto* i32 = b_.getInt32Ty();
  auto shfl = [&](llvm::Intrinsic::ID id, Value* x) {
    return b_.CreateIntrinsic(id, {}, {b_.getInt32(-1), x, b_.getInt32(lane_mask), b_.getInt32(0x1f)});
  };
  if (T->isFloatTy()) return shfl(llvm::Intrinsic::nvvm_shfl_sync_bfly_f32, v);
  if (T->isIntegerTy(32)) return shfl(llvm::Intrinsic::nvvm_shfl_sync_bfly_i32, v);
  if (T->isDoubleTy() || T->isIntegerTy(64)) {
    auto* i64 = b_.getInt64Ty();
    Value* bits = T->isDoubleTy() ? b_.CreateBitCast(v, i64) : v;
    Value* lo = shfl(llvm::Intrinsic::nvvm_shfl_sync_bfly_i32, b_.CreateTrunc(bits, i32));
    Value* hi = shfl(llvm::Intrinsic::nvvm_shfl_sync_bfly_i32, b_.CreateTrunc(b_.CreateLShr(bits, 32), i32));
    Value* r = b_.CreateOr(b_.CreateZExt(lo, i64), b_.CreateShl(b_.CreateZExt(hi, i64), 32));
    return T->isDoubleTy() ? b_.CreateBitCast(r, T) : r;
  }
  if (T->isHalfTy()) {
    Value* x = b_.CreateZExt(b_.CreateBitCast(v, b_.getInt16Ty()), i32);
    return b_.CreateBitCast(b_.CreateTrunc(shfl(llvm::Intrinsic::nvvm_shfl_sync_bfly_i32, x), b_.getInt16Ty()), T);
  }
  if (T->isIntegerTy() && T->getIntegerBitWidth() < 32)
    return b_.CreateTrunc(shfl(llvm::Intrinsic::nvvm_shfl_sync_bfly_i32, b_.CreateZExt(v, i32)), T);
  unsupported("a block reduction of this register type");
}

Value* KernelEmitter::warp_reduce(Value* v, OpKind k, DType at) {
  // Butterfly: every lane ends with the warp's result, bit for bit (lanes add
  // the same pairs, commuted). Not reassociable across the shuffles.
  for (int m = 16; m >= 1; m /= 2) {
    v = reduction_step(b_, k, v, shuffle_xor(v, m), at);
    // copyFastMathFlags assigns; setFastMathFlags would OR in no flags and
    // leave the builder's reassoc on.
    if (auto* I = llvm::dyn_cast<llvm::Instruction>(v); I && llvm::isa<llvm::FPMathOperator>(I))
      I->copyFastMathFlags(llvm::FastMathFlags());
  }
  return v;
}

llvm::GlobalVariable* KernelEmitter::shared_partials() {
  if (partials_) return partials_;
  auto* ty = llvm::ArrayType::get(b_.getInt64Ty(), static_cast<uint64_t>(shape_.block / 32));
  partials_ = new llvm::GlobalVariable(m_, ty, false, llvm::GlobalValue::InternalLinkage, llvm::UndefValue::get(ty),
                                       symbol_ + ".partials", nullptr, llvm::GlobalValue::NotThreadLocal, kShared);
  partials_->setAlignment(llvm::Align(8));
  return partials_;
}

Value* KernelEmitter::block_reduce(Value* v, OpKind k, DType at) {
  v = warp_reduce(v, k, at);
  if (warp_rows() || shape_.block <= 32) return v;  // the row is one warp's (or the block is: maxntidx)
  llvm::Type* T = v->getType();
  auto* i64 = b_.getInt64Ty();
  // The partials as raw 64 bits, whatever the accumulate type.
  auto to_bits = [&](Value* x) -> Value* {
    if (T->isDoubleTy()) return b_.CreateBitCast(x, i64);
    if (T->isFloatTy()) return b_.CreateZExt(b_.CreateBitCast(x, b_.getInt32Ty()), i64);
    if (T->isHalfTy()) return b_.CreateZExt(b_.CreateBitCast(x, b_.getInt16Ty()), i64);
    return b_.CreateZExtOrTrunc(x, i64);
  };
  auto from_bits = [&](Value* x) -> Value* {
    if (T->isDoubleTy()) return b_.CreateBitCast(x, T);
    if (T->isFloatTy()) return b_.CreateBitCast(b_.CreateTrunc(x, b_.getInt32Ty()), T);
    if (T->isHalfTy()) return b_.CreateBitCast(b_.CreateTrunc(x, b_.getInt16Ty()), T);
    return b_.CreateZExtOrTrunc(x, T);
  };
  llvm::GlobalVariable* partials = shared_partials();
  auto* arr = partials->getValueType();
  Value* tid = sreg(llvm::Intrinsic::nvvm_read_ptx_sreg_tid_x);
  Value* ntid = sreg(llvm::Intrinsic::nvvm_read_ptx_sreg_ntid_x);
  Value* lane = b_.CreateAnd(tid, b_.getInt32(31));
  Value* warp = b_.CreateLShr(tid, b_.getInt32(5));
  Value* nwarps = b_.CreateLShr(ntid, b_.getInt32(5));
  // The previous reduction's readers are done with the partials.
  b_.CreateIntrinsic(llvm::Intrinsic::nvvm_barrier0, {}, {});
  llvm::BasicBlock* write = llvm::BasicBlock::Create(ctx_, "partial", fn_);
  llvm::BasicBlock* written = llvm::BasicBlock::Create(ctx_, "partial.end", fn_);
  b_.CreateCondBr(b_.CreateICmpEQ(lane, b_.getInt32(0)), write, written);
  b_.SetInsertPoint(write);
  b_.CreateAlignedStore(to_bits(v), b_.CreateInBoundsGEP(arr, partials, {b_.getInt32(0), warp}), llvm::Align(8));
  b_.CreateBr(written);
  b_.SetInsertPoint(written);
  b_.CreateIntrinsic(llvm::Intrinsic::nvvm_barrier0, {}, {});
  // Every warp combines all partials itself: the result reaches every thread
  // without another barrier. Lanes past the warps read a valid slot and use
  // the identity instead.
  Value* has = b_.CreateICmpULT(lane, nwarps);
  Value* slot = b_.CreateSelect(has, lane, b_.getInt32(0));
  Value* p = b_.CreateAlignedLoad(i64, b_.CreateInBoundsGEP(arr, partials, {b_.getInt32(0), slot}), llvm::Align(8));
  Value* x = b_.CreateSelect(has, from_bits(p), reduction_identity(b_, k, at));
  return warp_reduce(x, k, at);
}

}  // namespace lazyjit::lowering::cuda::emit
