// The loop-nest emitter: the kernel function, its ABI wrapper, plain kernels'
// loops, operands and stores (row kernels' loops are in row_kernel.cpp).
#include "targets/cpu/loop_emitter.h"

namespace lazyjit::lowering::cpu::emit {

void LoopEmitter::emit() {
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
  params.push_back(ptr);  // dims
  auto* impl = llvm::Function::Create(llvm::FunctionType::get(b_.getVoidTy(), params, false),
                                      llvm::Function::InternalLinkage, name_ + ".impl", m_);
  impl->addFnAttr(llvm::Attribute::AlwaysInline);
  set_target_attrs(impl);
  for (size_t i = 0; i <= nbuf_ + 3; ++i) {
    if (i == nbuf_ + 1 || i == nbuf_ + 2) continue;  // begin, end
    impl->addParamAttr(i, llvm::Attribute::NoAlias);
    impl->addParamAttr(i, llvm::Attribute::NoCapture);
    if (i < nloads || i >= nbuf_) impl->addParamAttr(i, llvm::Attribute::ReadOnly);
  }
  fn_ = impl;
  emit_impl();

  auto* abi = llvm::FunctionType::get(b_.getVoidTy(), {ptr, ptr, i64, i64, ptr}, false);
  auto* wrapper = llvm::Function::Create(abi, llvm::Function::ExternalLinkage, name_, m_);
  set_target_attrs(wrapper);
  b_.SetInsertPoint(llvm::BasicBlock::Create(ctx_, "entry", wrapper));
  std::vector<Value*> args;
  for (size_t i = 0; i < nbuf_; ++i)
    args.push_back(b_.CreateLoad(ptr, b_.CreateConstInBoundsGEP1_64(ptr, wrapper->getArg(0), i)));
  for (unsigned i = 1; i < 5; ++i) args.push_back(wrapper->getArg(i));
  b_.CreateCall(impl, args);
  b_.CreateRetVoid();
}

void LoopEmitter::set_target_attrs(llvm::Function* f) {
  f->addFnAttr("target-cpu", tm_.getTargetCPU());
  f->addFnAttr("target-features", tm_.getTargetFeatureString());
  f->addFnAttr(llvm::Attribute::NoUnwind);
  // LLVM defaults to 256-bit vectors on AVX-512 server parts; our kernels are
  // long vectorizable loops, where 512 bits measure faster (bench/).
  if (avx512_ && cfg_.opts.vector_bits >= 512) f->addFnAttr("prefer-vector-width", "512");
}

void LoopEmitter::emit_impl() {
  b_.SetInsertPoint(llvm::BasicBlock::Create(ctx_, "entry", fn_));
  llvm::BasicBlock* exit = llvm::BasicBlock::Create(ctx_, "exit", fn_);
  load_shape();
  // Scalars are loop-invariant: read them once.
  for (size_t i = 0; i < k_.loads.size(); ++i)
    if (k_.loads[i].scalar_index >= 0) loaded_[i] = load_scalar(i);
  if (k_.row) return emit_row_impl(exit);
  emit_outer_loops(exit, sizes_.size(), [&] { emit_body(); });
}

void LoopEmitter::load_shape() {
  const size_t rank = sizes_.size();
  auto* i64 = b_.getInt64Ty();
  Value* dims = fn_->getArg(nbuf_ + 3);
  auto at = [&](size_t i) -> Value* {
    return b_.CreateLoad(i64, b_.CreateConstInBoundsGEP1_64(i64, dims, i));
  };
  const bool generic = cfg_.generic;
  for (size_t d = 0; d < rank; ++d) size_v_.push_back(generic ? at(d) : b_.getInt64(sizes_[d]));
  size_t next = rank;
  for (const Access& a : k_.loads) {
    std::vector<Value*> st(rank, nullptr);
    Value* off = nullptr;
    slot_v_.push_back(a.scalar_index >= 0 ? at(next++) : nullptr);
    if (a.scalar_index < 0) {
      for (size_t d = 0; d < rank; ++d) {
        int64_t s = d < a.strides.size() ? a.strides[d] : 0;
        if (s != 0) st[d] = generic && runtime_stride(s) ? at(next + d) : b_.getInt64(s);
      }
      if (a.offset != 0) off = generic ? at(next + rank) : b_.getInt64(a.offset);
      next += rank + 1;
    }
    stride_v_.push_back(std::move(st));
    offset_v_.push_back(off);
  }
  if (k_.cat_dim >= 0)
    for (int64_t e : k_.cat_ends) cat_end_v_.push_back(generic ? at(next++) : b_.getInt64(e));
}

void LoopEmitter::emit_outer_loops(llvm::BasicBlock* exit, size_t last, const std::function<void()>& body) {
  bool empty = false;
  if (!cfg_.generic)
    for (size_t d = 1; d < last; ++d) empty |= sizes_[d] <= 0;
  if (empty) {
    b_.CreateBr(exit);
  } else {
    Value* begin = fn_->getArg(nbuf_ + 1);
    Value* end = fn_->getArg(nbuf_ + 2);
    llvm::BasicBlock* outer = llvm::BasicBlock::Create(ctx_, "outer", fn_);
    Value* go = b_.CreateICmpSLT(begin, end);
    // Shape-generic code checks at run time what exact code knew: an empty inner dim.
    if (cfg_.generic)
      for (size_t d = 1; d < last; ++d) go = b_.CreateAnd(go, b_.CreateICmpSGT(size_v_[d], b_.getInt64(0)));
    b_.CreateCondBr(go, outer, exit);
    b_.SetInsertPoint(outer);
    idx_.assign(sizes_.size(), nullptr);
    emit_loops(0, last, begin, end, body);
    b_.CreateBr(exit);
  }
  b_.SetInsertPoint(exit);
  if (nonfinite_) {
    // Plan::check_stores: say so in the int64 past this kernel's dims.
    llvm::BasicBlock* flag = llvm::BasicBlock::Create(ctx_, "nonfinite", fn_);
    llvm::BasicBlock* done = llvm::BasicBlock::Create(ctx_, "done", fn_);
    b_.CreateCondBr(b_.CreateICmpNE(b_.CreateLoad(b_.getInt8Ty(), nonfinite_), b_.getInt8(0)), flag, done);
    b_.SetInsertPoint(flag);
    auto* i64 = b_.getInt64Ty();
    Value* slot = b_.CreateConstInBoundsGEP1_64(i64, fn_->getArg(nbuf_ + 3), kernel_dims(k_).size());
    b_.CreateAlignedStore(b_.getInt64(1), slot, llvm::Align(8))->setAtomic(llvm::AtomicOrdering::Monotonic);
    b_.CreateBr(done);
    b_.SetInsertPoint(done);
  }
  b_.CreateRetVoid();
}

void LoopEmitter::emit_loops(size_t d, size_t last, Value* start, Value* stop, const std::function<void()>& body) {
  if (static_cast<int64_t>(d) != k_.cat_dim) return emit_loop(d, last, start, stop, body);
  // Piece j covers [end of piece j-1, end of piece j) of the dim; the outermost
  // dim's [start, stop) (a thread's share) may cut it, or miss it.
  for (size_t j = 0; j < cat_end_v_.size(); ++j) {
    Value* lo = j == 0 ? b_.getInt64(0) : cat_end_v_[j - 1];
    Value* hi = cat_end_v_[j];
    Value* s = b_.CreateSelect(b_.CreateICmpSGT(start, lo), start, lo);
    Value* e = b_.CreateSelect(b_.CreateICmpSLT(stop, hi), stop, hi);
    llvm::BasicBlock* run = llvm::BasicBlock::Create(ctx_, "piece" + std::to_string(j), fn_);
    llvm::BasicBlock* next = llvm::BasicBlock::Create(ctx_, "piece" + std::to_string(j) + ".end", fn_);
    b_.CreateCondBr(b_.CreateICmpSLT(s, e), run, next);
    b_.SetInsertPoint(run);
    cat_piece_ = j;
    emit_loop(d, last, s, e, body);
    b_.CreateBr(next);
    b_.SetInsertPoint(next);
  }
  cat_piece_ = 0;
}

void LoopEmitter::emit_loop(size_t d, size_t last, Value* start, Value* stop, const std::function<void()>& body) {
  llvm::BasicBlock* pre = b_.GetInsertBlock();
  llvm::BasicBlock* head = llvm::BasicBlock::Create(ctx_, "d" + std::to_string(d), fn_);
  b_.CreateBr(head);
  b_.SetInsertPoint(head);
  llvm::PHINode* i = b_.CreatePHI(b_.getInt64Ty(), 2, "i" + std::to_string(d));
  i->addIncoming(start, pre);
  idx_[d] = i;
  if (d + 1 < last)
    emit_loops(d + 1, last, b_.getInt64(0), size_v_[d + 1], body);
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

void LoopEmitter::emit_body() {
  values_.clear();
  for (auto it = loaded_.begin(); it != loaded_.end();)
    it = k_.loads[it->first].scalar_index >= 0 ? std::next(it) : loaded_.erase(it);
  for (uint32_t ni : k_.nodes) emit_kernel_node(g_.nodes().at(ni));
  Value* off = contiguous_index(0, sizes_.size());
  for (size_t s = 0; s < k_.stores.size(); ++s) store(s, off);
}

Value* LoopEmitter::index(const std::vector<Value*>& strides, Value* offset) {
  Value* off = offset ? offset : b_.getInt64(0);
  for (size_t d = 0; d < sizes_.size(); ++d) {
    Value* st = d < strides.size() ? strides[d] : nullptr;
    if (!st) continue;
    if (!idx_[d]) unsupported("an access varies over a dim it is not read in");
    off = b_.CreateAdd(off, b_.CreateMul(idx_[d], st, "", false, true), "", false, true);
  }
  return off;
}

Value* LoopEmitter::contiguous_index(size_t first, size_t last) {
  std::vector<Value*> st(sizes_.size(), nullptr);
  Value* acc = b_.getInt64(1);
  for (size_t d = last; d-- > first;) {
    st[d] = acc;
    acc = b_.CreateMul(acc, size_v_[d], "", false, true);
  }
  return index(st, nullptr);
}

void LoopEmitter::store(size_t s, Value* offset) {
  DType t = g_.value(k_.stores[s]).type.dtype;
  Value* v = to_memory(b_, convert(b_, operand(k_.stores[s]), t), t);
  if (cfg_.check_stores) note_nonfinite(b_, fn_, nonfinite_, v, t);
  Value* p = b_.CreateInBoundsGEP(mem_type(b_, t), fn_->getArg(nbuf_ - k_.stores.size() + s), offset);
  b_.CreateAlignedStore(v, p, llvm::Align(ir::element_size(t)));
}

TV LoopEmitter::load_scalar(size_t li) {
  const Access& a = k_.loads[li];
  Value* p = b_.CreateInBoundsGEP(b_.getInt64Ty(), fn_->getArg(nbuf_), slot_v_.at(li));
  if (ir::is_floating(a.dtype)) return {b_.CreateLoad(b_.getDoubleTy(), p), DType::Float64};
  Value* i = b_.CreateLoad(b_.getInt64Ty(), p);
  if (a.dtype == DType::Bool) return {b_.CreateICmpNE(i, b_.getInt64(0)), DType::Bool};
  return {i, DType::Int64};
}

TV LoopEmitter::operand(ValueId v) {
  if (auto it = values_.find(v); it != values_.end()) return it->second;
  int32_t li = k_.load_of(v);
  if (li < 0 || li >= static_cast<int32_t>(k_.loads.size()))
    unsupported("operand %" + std::to_string(v) + " is neither computed in the kernel nor loaded");
  return load(li);
}

TV LoopEmitter::load(int32_t li) {
  if (auto it = loaded_.find(li); it != loaded_.end()) return it->second;
  const Access& a = k_.loads[li];
  llvm::Type* mt = mem_type(b_, a.dtype);
  Value* p = b_.CreateInBoundsGEP(mt, fn_->getArg(buffer_of_[li]), index(stride_v_[li], offset_v_[li]));
  TV r{from_memory(b_, b_.CreateAlignedLoad(mt, p, llvm::Align(ir::element_size(a.dtype))), a.dtype),
       a.dtype};
  return loaded_[li] = r;
}

bool LoopEmitter::is_scalar_argument(ValueId v) const {
  if (values_.count(v)) return false;
  int32_t li = k_.load_of(v);
  return li >= 0 && k_.loads[li].scalar_index >= 0;
}

void LoopEmitter::emit_kernel_node(const ir::Node& n) {
  values_[n.outputs[0]] = emit_node(math(), g_, n, k_, cat_piece_, [this](int32_t li) { return load(li); }, operands());
}

OperandSource LoopEmitter::operands() {
  return {[this](ValueId v) { return operand(v); },
          [this](ValueId v) { return is_scalar_argument(v); }};
}

}  // namespace lazyjit::lowering::cpu::emit
