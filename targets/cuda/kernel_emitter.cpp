// The CUDA kernel emitter: the kernel function and its ABI, plain kernels'
// grid-stride loop, operands, indexing and stores (row kernels are in
// row_kernel.cpp).
#include "targets/cuda/kernel_emitter.h"

#include <algorithm>
#include <cstdlib>

#include <llvm/IR/IntrinsicsNVPTX.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Support/raw_ostream.h>

namespace lazyjit::lowering::cuda {

namespace emit {

namespace {
constexpr unsigned kGlobal = 1;  // NVPTX address spaces
constexpr int64_t kI32Limit = int64_t{1} << 31;
// Vectorized plain kernels: bytes of the widest vector access (ld.global.v4.f32).
// (The plan's launch shape keeps a chunk's copies of the node code in bounds:
// launch_shape.h's kMaxLaneNodes.)
constexpr int32_t kVectorBytes = 16;
}  // namespace

DeviceKernel KernelEmitter::emit() {
  if (std::string why = shape_.invalid(k_.row); !why.empty()) unsupported("launch shape: " + why);
  if (m_.getFunction(symbol_)) unsupported("symbol " + symbol_ + " is already in the module");
  sizes_ = k_.sizes;
  if (sizes_.empty()) sizes_ = {1};  // a 0-d kernel runs its one element as dim 0
  it_ = fits_i32() ? b_.getInt32Ty() : b_.getInt64Ty();
  create_function();
  b_.SetInsertPoint(llvm::BasicBlock::Create(ctx_, "entry", fn_));
  load_shape();
  if (k_.row)
    emit_rows();
  else
    emit_elements();
  if (nonfinite_) {
    // Plan::check_stores: a thread that stored a NaN or Inf sets the flag (a
    // plain store of 1: every writer writes the same).
    llvm::BasicBlock* set = llvm::BasicBlock::Create(ctx_, "nonfinite", fn_);
    llvm::BasicBlock* done = llvm::BasicBlock::Create(ctx_, "done", fn_);
    b_.CreateCondBr(b_.CreateICmpNE(b_.CreateLoad(b_.getInt8Ty(), nonfinite_), b_.getInt8(0)), set, done);
    b_.SetInsertPoint(set);
    b_.CreateAlignedStore(b_.getInt32(1), flag_, llvm::Align(4));
    b_.CreateBr(done);
    b_.SetInsertPoint(done);
  }
  b_.CreateRetVoid();

  DeviceKernel dk;
  dk.grid = k_.row ? DeviceKernel::Grid::Rows : DeviceKernel::Grid::Elements;
  dk.block = shape_.block;
  dk.shared_bytes = 0;  // block rows' partials are static shared memory
  dk.elements_per_thread = k_.row ? 1 : chunk_;
  dk.rows_per_block = k_.row ? shape_.rows_per_block() : 1;
  return dk;
}

bool KernelEmitter::fits_i32() const {
  if (cfg_.generic) return false;
  __int128 total = 1;
  for (int64_t s : sizes_) total *= s < 0 ? 0 : s;
  if (total >= kI32Limit) return false;
  if (total == 0) return true;
  for (const Access& a : k_.loads) {
    if (a.scalar_index >= 0) continue;
    // The furthest element any index of the iteration space reaches (an upper
    // bound: a cat piece's load is read only in its piece).
    __int128 far = a.offset < 0 ? -static_cast<__int128>(a.offset) : a.offset;
    for (size_t d = 0; d < sizes_.size(); ++d) {
      int64_t s = d < a.strides.size() ? a.strides[d] : 0;
      far += static_cast<__int128>(sizes_[d] - 1) * (s < 0 ? -static_cast<__int128>(s) : s);
    }
    if (far >= kI32Limit) return false;
  }
  return true;
}

void KernelEmitter::create_function() {
  auto* gptr = b_.getPtrTy(kGlobal);
  std::vector<llvm::Type*> params;
  for (const Access& a : k_.loads) {
    buffer_of_.push_back(a.scalar_index < 0 ? static_cast<int>(nbuf_) : -1);
    if (a.scalar_index < 0) ++nbuf_;
  }
  const size_t nloads = nbuf_;
  nbuf_ += k_.stores.size();
  params.assign(nbuf_, gptr);
  if (cfg_.check_stores) params.push_back(gptr);
  params.push_back(b_.getInt64Ty());  // total
  params.push_back(b_.getPtrTy());    // dims, byval
  auto* ft = llvm::FunctionType::get(b_.getVoidTy(), params, false);
  fn_ = llvm::Function::Create(ft, llvm::Function::ExternalLinkage, symbol_, m_);
  fn_->addFnAttr(llvm::Attribute::NoUnwind);
  // No "nvptx-f32ftz": float32 denormals are kept, as CUDA eager keeps them.
  for (size_t i = 0; i < nbuf_; ++i) {
    fn_->addParamAttr(i, llvm::Attribute::NoAlias);  // the plan's buffers never alias
    fn_->addParamAttr(i, llvm::Attribute::NoCapture);
    fn_->addParamAttr(i, i < nloads ? llvm::Attribute::ReadOnly : llvm::Attribute::WriteOnly);
    fn_->getArg(i)->setName(i < nloads ? "in" + std::to_string(i) : "out" + std::to_string(i - nloads));
  }
  size_t next = nbuf_;
  if (cfg_.check_stores) {
    flag_ = fn_->getArg(next++);
    flag_->setName("nonfinite");
    fn_->addParamAttr(flag_->getArgNo(), llvm::Attribute::NoAlias);
    fn_->addParamAttr(flag_->getArgNo(), llvm::Attribute::NoCapture);
  }
  total_ = fn_->getArg(next++);
  total_->setName("total");
  dims_ = fn_->getArg(next);
  dims_->setName("dims");
  const size_t ndims = kernel_dims(k_).size();
  auto* dims_ty = llvm::ArrayType::get(b_.getInt64Ty(), ndims);
  fn_->addParamAttr(dims_->getArgNo(), llvm::Attribute::getWithByValType(ctx_, dims_ty));
  fn_->addParamAttr(dims_->getArgNo(), llvm::Attribute::getWithAlignment(ctx_, llvm::Align(8)));
}

Value* KernelEmitter::dim_entry(size_t i) {
  auto* i64 = b_.getInt64Ty();
  return b_.CreateAlignedLoad(i64, b_.CreateConstInBoundsGEP1_64(i64, dims_, i), llvm::Align(8));
}

Value* KernelEmitter::sreg(llvm::Intrinsic::ID id) { return b_.CreateIntrinsic(id, {}, {}); }

void KernelEmitter::load_shape() {
  const size_t rank = sizes_.size();
  const bool generic = cfg_.generic;
  // Shape-generic code is 64-bit (fits_i32), so a dims entry is already an it_.
  auto at = [&](size_t i) -> Value* { return dim_entry(i); };
  for (size_t d = 0; d < rank; ++d) size_v_.push_back(generic ? at(d) : ival(sizes_[d]));
  size_t next = rank;
  for (size_t li = 0; li < k_.loads.size(); ++li) {
    const Access& a = k_.loads[li];
    std::vector<Value*> st(rank, nullptr);
    Value* off = nullptr;
    if (a.scalar_index >= 0) {
      // The launch put the scalar's own bits in its slot's entry.
      Value* bits = at(next++);
      TV v;
      if (ir::is_floating(a.dtype))
        v = {b_.CreateBitCast(bits, b_.getDoubleTy()), DType::Float64};
      else if (a.dtype == DType::Bool)
        v = {b_.CreateICmpNE(bits, b_.getInt64(0)), DType::Bool};
      else
        v = {bits, DType::Int64};
      loaded_[static_cast<int32_t>(li)] = v;
    } else {
      for (size_t d = 0; d < rank; ++d) {
        int64_t s = d < a.strides.size() ? a.strides[d] : 0;
        if (s != 0) st[d] = generic && runtime_stride(s) ? at(next + d) : ival(s);
      }
      if (a.offset != 0) off = generic ? at(next + rank) : ival(a.offset);
      next += rank + 1;
    }
    stride_v_.push_back(std::move(st));
    offset_v_.push_back(off);
  }
  if (k_.cat_dim >= 0) {
    if (k_.cat_dim >= static_cast<int32_t>(rank) || k_.cat_ends.empty())
      unsupported("malformed cat (dim " + std::to_string(k_.cat_dim) + ", " + std::to_string(k_.cat_ends.size()) +
                  " pieces)");
    for (int64_t e : k_.cat_ends) cat_end_v_.push_back(generic ? at(next++) : ival(e));
  }
}

void KernelEmitter::emit_stride_loop(Value* start, Value* end, Value* step, const char* name,
                                     const std::function<void(Value* i)>& body, llvm::Type* ty) {
  if (!ty) ty = b_.getInt64Ty();
  auto cast = [&](Value* v) { return b_.CreateZExtOrTrunc(v, ty); };
  start = cast(start);
  end = cast(end);
  step = cast(step);
  std::string n(name);
  llvm::BasicBlock* pre = b_.GetInsertBlock();
  llvm::BasicBlock* head = llvm::BasicBlock::Create(ctx_, n, fn_);
  llvm::BasicBlock* after = llvm::BasicBlock::Create(ctx_, n + ".end", fn_);
  // Indices and bounds are nonnegative; start + step stays below 2^(bits):
  // unsigned compares.
  b_.CreateCondBr(b_.CreateICmpULT(start, end), head, after);
  b_.SetInsertPoint(head);
  llvm::PHINode* i = b_.CreatePHI(ty, 2, n + ".i");
  i->addIncoming(start, pre);
  body(i);
  Value* next = b_.CreateAdd(i, step, "", /*HasNUW=*/true);
  i->addIncoming(next, b_.GetInsertBlock());
  b_.CreateCondBr(b_.CreateICmpULT(next, end), head, after);
  b_.SetInsertPoint(after);
}

void KernelEmitter::decompose(Value* flat, size_t first, size_t last) {
  Value* rest = flat;
  for (size_t d = last; d-- > first;) {
    if (d == first) {  // the outermost dim takes what is left
      idx_[d] = rest;
      break;
    }
    if (!cfg_.generic && sizes_[d] == 1) {
      idx_[d] = ival(0);
      continue;
    }
    idx_[d] = b_.CreateURem(rest, size_v_[d]);
    rest = b_.CreateUDiv(rest, size_v_[d]);
  }
}

// --- plain kernels ------------------------------------------------------------

void KernelEmitter::emit_elements() {
  auto* i64 = b_.getInt64Ty();
  Value* tid = b_.CreateZExt(sreg(llvm::Intrinsic::nvvm_read_ptx_sreg_tid_x), i64);
  Value* ntid = b_.CreateZExt(sreg(llvm::Intrinsic::nvvm_read_ptx_sreg_ntid_x), i64);
  Value* ctaid = b_.CreateZExt(sreg(llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_x), i64);
  Value* nctaid = b_.CreateZExt(sreg(llvm::Intrinsic::nvvm_read_ptx_sreg_nctaid_x), i64);
  Value* start = b_.CreateAdd(b_.CreateMul(ctaid, ntid, "", true, true), tid, "", true, true);
  Value* step = b_.CreateMul(nctaid, ntid, "", true, true);
  const size_t rank = sizes_.size();
  // Vectorized: the full chunks first; the scalar loop then takes the rest.
  choose_vectors();
  if (lanes_ > 1) start = emit_vector_elements(start, step);
  // The flat index loops in 64 bits (start + step may pass 2^31 even when the
  // elements do not); the index arithmetic is in it_.
  emit_stride_loop(start, total_, step, "elem", [&](Value* i) {
    Value* flat = b_.CreateZExtOrTrunc(i, it_);
    idx_.assign(rank, nullptr);
    decompose(flat, 0, rank);
    if (k_.cat_dim < 0) {
      emit_body(flat);
      return;
    }
    // The piece the cat dim's index falls in; each piece its own body.
    Value* at = idx_[static_cast<size_t>(k_.cat_dim)];
    llvm::BasicBlock* done = llvm::BasicBlock::Create(ctx_, "pieces.end", fn_);
    for (size_t j = 0; j < cat_end_v_.size(); ++j) {
      cat_piece_ = j;
      if (j + 1 < cat_end_v_.size()) {
        llvm::BasicBlock* run = llvm::BasicBlock::Create(ctx_, "piece" + std::to_string(j), fn_);
        llvm::BasicBlock* next = llvm::BasicBlock::Create(ctx_, "piece" + std::to_string(j) + ".next", fn_);
        b_.CreateCondBr(b_.CreateICmpULT(at, cat_end_v_[j]), run, next);
        b_.SetInsertPoint(run);
        emit_body(flat);
        b_.CreateBr(done);
        b_.SetInsertPoint(next);
      } else {
        emit_body(flat);
        b_.CreateBr(done);
      }
    }
    cat_piece_ = 0;
    b_.SetInsertPoint(done);
  });
}

void KernelEmitter::clear_element_values() {
  values_.clear();
  for (auto it = loaded_.begin(); it != loaded_.end();)
    it = k_.loads[it->first].scalar_index >= 0 ? std::next(it) : loaded_.erase(it);
}

void KernelEmitter::emit_body(Value* flat) {
  clear_element_values();
  for (uint32_t ni : k_.nodes) emit_kernel_node(g_.nodes().at(ni));
  // Stores are contiguous over the kernel's sizes: the flat index.
  for (size_t s = 0; s < k_.stores.size(); ++s) store_at(s, store_value(s), flat);
}

void KernelEmitter::choose_vectors() {
  lanes_ = chunk_ = 1;
  vec_load_.assign(k_.loads.size(), false);
  if (shape_.vector_width <= 1 || k_.row || k_.cat_dim >= 0 || k_.stores.empty()) return;
  const size_t rank = sizes_.size();
  const bool generic = cfg_.generic;
  // Exact code: the contiguous strides of the sizes (dims of size 1 take any stride).
  std::vector<int64_t> contiguous(rank, 1);
  __int128 total = 1;
  for (size_t d = rank; d-- > 0;) {
    contiguous[d] = static_cast<int64_t>(total);
    total *= sizes_[d] < 0 ? 0 : sizes_[d];
  }
  int64_t widest = 0;  // bytes of the widest vector-accessed element
  for (ValueId v : k_.stores) widest = std::max(widest, ir::element_size(g_.value(v).type.dtype));
  std::vector<bool> vec(k_.loads.size(), false);
  for (size_t li = 0; li < k_.loads.size(); ++li) {
    const Access& a = k_.loads[li];
    if (a.scalar_index >= 0) continue;
    bool broadcast = true, contiguous_load = true;
    for (size_t d = 0; d < rank; ++d) {
      int64_t s = d < a.strides.size() ? a.strides[d] : 0;
      if (generic) {
        // Only what the stride classes (kernel_key.h) hold for every kernel this code serves.
        broadcast &= s == 0;
        contiguous_load &= rank == 1 && s == 1;
      } else if (sizes_[d] != 1) {
        broadcast &= s == 0;
        contiguous_load &= s == contiguous[d];
      }
    }
    if (broadcast) continue;  // one scalar load per chunk
    if (!contiguous_load) return;
    vec[li] = true;
    widest = std::max(widest, ir::element_size(a.dtype));
  }
  if (widest <= 0 || widest > kVectorBytes) return;
  // The shape's width, no wider than one 16-byte access (both powers of two).
  const int32_t v = std::min<int32_t>(shape_.vector_width, kVectorBytes / static_cast<int32_t>(widest));
  int32_t e = v * (shape_.elements_per_thread / shape_.vector_width);
  if (!generic && total < e) e = v;  // exact code: not one full chunk of E
  if (v <= 1 || (!generic && total < v)) return;
  lanes_ = v;
  chunk_ = e;
  vec_load_ = std::move(vec);
}

Value* KernelEmitter::emit_vector_elements(Value* start, Value* step) {
  const int32_t v = lanes_;
  auto* i64 = b_.getInt64Ty();
  const size_t nstores = k_.stores.size();
  // Once per thread: every vector-accessed address (buffer + offset) aligned to
  // its V elements, else no chunk runs vectorized.
  Value* misaligned = b_.getInt64(0);
  auto check = [&](Value* buffer, DType t, Value* offset) {
    Value* p = offset ? b_.CreateInBoundsGEP(mem_type(b_, t), buffer, offset) : buffer;
    const int64_t bytes = static_cast<int64_t>(v) * ir::element_size(t);
    misaligned = b_.CreateOr(misaligned, b_.CreateAnd(b_.CreatePtrToInt(p, i64), b_.getInt64(bytes - 1)));
  };
  for (size_t li = 0; li < k_.loads.size(); ++li)
    if (vec_load_[li]) check(fn_->getArg(buffer_of_[li]), k_.loads[li].dtype, offset_v_[li]);
  for (size_t s = 0; s < nstores; ++s)
    check(fn_->getArg(nbuf_ - nstores + s), g_.value(k_.stores[s]).type.dtype, nullptr);
  Value* aligned = b_.CreateICmpEQ(misaligned, b_.getInt64(0), "aligned");
  const int32_t e = chunk_;
  Value* chunks = b_.CreateSelect(aligned, b_.CreateUDiv(total_, b_.getInt64(e)), b_.getInt64(0), "chunks");
  emit_stride_loop(start, chunks, step, "chunk", [&](Value* c) {
    emit_chunk(b_.CreateMul(b_.CreateZExtOrTrunc(c, it_), ival(e), "", true, true));
  });
  // The thread's first element past the chunks.
  return b_.CreateAdd(b_.CreateMul(chunks, b_.getInt64(e), "", true, true), start, "", true, true);
}

void KernelEmitter::emit_chunk(Value* base) {
  const int32_t v = lanes_;
  const int32_t groups = chunk_ / lanes_;  // vector accesses per operand
  auto at_group = [&](Value* first, int32_t gi) {
    return gi == 0 ? first : b_.CreateAdd(first, ival(static_cast<int64_t>(gi) * v), "", true, true);
  };
  // Broadcast loads read their offset (their strides, if any, are over dims of size 1).
  idx_.assign(sizes_.size(), ival(0));
  clear_element_values();
  std::unordered_map<int32_t, TV> once;        // broadcast loads: one element per chunk
  // contiguous loads: `groups` <V x T> each
  std::vector<std::vector<Value*>> vec(k_.loads.size());
  for (size_t li = 0; li < k_.loads.size(); ++li) {
    const Access& a = k_.loads[li];
    if (a.scalar_index >= 0) continue;
    const auto l = static_cast<int32_t>(li);
    if (!vec_load_[li]) {
      once[l] = load(l);
      continue;
    }
    llvm::Type* mt = mem_type(b_, a.dtype);
    Value* first = offset_v_[li] ? b_.CreateAdd(offset_v_[li], base, "", false, true) : base;
    for (int32_t gi = 0; gi < groups; ++gi) {
      Value* p = b_.CreateInBoundsGEP(mt, fn_->getArg(buffer_of_[li]), at_group(first, gi));
      llvm::LoadInst* ld = b_.CreateAlignedLoad(llvm::FixedVectorType::get(mt, v), p,
                                                llvm::Align(static_cast<uint64_t>(v * ir::element_size(a.dtype))));
      // Inputs never change during the kernel: ld.global.nc.v4.
      ld->setMetadata(llvm::LLVMContext::MD_invariant_load, llvm::MDNode::get(ctx_, {}));
      vec[li].push_back(ld);
    }
  }
  // Lane by lane, the element code; each output gathered into `groups` vectors.
  std::vector<std::vector<Value*>> out(k_.stores.size());
  for (size_t s = 0; s < out.size(); ++s)
    out[s].assign(static_cast<size_t>(groups),
                  llvm::PoisonValue::get(
                      llvm::FixedVectorType::get(mem_type(b_, g_.value(k_.stores[s]).type.dtype), v)));
  for (int32_t j = 0; j < chunk_; ++j) {
    const auto gi = static_cast<size_t>(j / v);
    const auto lane = static_cast<uint64_t>(j % v);
    clear_element_values();
    for (const auto& [l, tv] : once) loaded_[l] = tv;
    for (size_t li = 0; li < vec.size(); ++li)
      if (!vec[li].empty()) {
        DType t = k_.loads[li].dtype;
        loaded_[static_cast<int32_t>(li)] = {from_memory(b_, b_.CreateExtractElement(vec[li][gi], lane), t), t};
      }
    for (uint32_t ni : k_.nodes) emit_kernel_node(g_.nodes().at(ni));
    for (size_t s = 0; s < out.size(); ++s) out[s][gi] = b_.CreateInsertElement(out[s][gi], store_value(s), lane);
  }
  for (size_t s = 0; s < out.size(); ++s) {
    DType t = g_.value(k_.stores[s]).type.dtype;
    for (int32_t gi = 0; gi < groups; ++gi) {
      Value* p = b_.CreateInBoundsGEP(mem_type(b_, t), fn_->getArg(nbuf_ - k_.stores.size() + s), at_group(base, gi));
      b_.CreateAlignedStore(out[s][static_cast<size_t>(gi)], p,
                            llvm::Align(static_cast<uint64_t>(v * ir::element_size(t))));
    }
  }
}

// --- elements -----------------------------------------------------------------

Value* KernelEmitter::index(const std::vector<Value*>& strides, Value* offset) {
  Value* off = offset ? offset : ival(0);
  for (size_t d = 0; d < sizes_.size(); ++d) {
    Value* st = d < strides.size() ? strides[d] : nullptr;
    if (!st) continue;
    if (!idx_.at(d)) unsupported("an access varies over a dim it is not read in");
    off = b_.CreateAdd(off, b_.CreateMul(idx_[d], st, "", false, true), "", false, true);
  }
  return off;
}

Value* KernelEmitter::store_value(size_t s) {
  DType t = g_.value(k_.stores[s]).type.dtype;
  Value* v = to_memory(b_, convert(b_, operand(k_.stores[s]), t), t);
  if (cfg_.check_stores) note_nonfinite(b_, fn_, nonfinite_, v, t);
  return v;
}

void KernelEmitter::store_at(size_t s, Value* v, Value* offset) {
  DType t = g_.value(k_.stores[s]).type.dtype;
  Value* p = b_.CreateInBoundsGEP(mem_type(b_, t), fn_->getArg(nbuf_ - k_.stores.size() + s), offset);
  b_.CreateAlignedStore(v, p, llvm::Align(ir::element_size(t)));
}

TV KernelEmitter::operand(ValueId v) {
  if (auto it = values_.find(v); it != values_.end()) return it->second;
  // Row kernels: a full-space node, computed on first use in this col loop.
  if (auto it = position_of_.find(v); it != position_of_.end()) {
    emit_kernel_node(g_.nodes().at(k_.nodes.at(it->second)));
    return values_.at(v);
  }
  int32_t li = k_.load_of(v);
  if (li < 0 || li >= static_cast<int32_t>(k_.loads.size()))
    unsupported("operand %" + std::to_string(v) + " is neither computed in the kernel nor loaded");
  return load(li);
}

TV KernelEmitter::load(int32_t li) {
  if (auto it = loaded_.find(li); it != loaded_.end()) return it->second;
  const Access& a = k_.loads.at(li);
  if (buffer_of_.at(li) < 0) unsupported("scalar load " + std::to_string(li) + " without its value");
  llvm::Type* mt = mem_type(b_, a.dtype);
  Value* p = b_.CreateInBoundsGEP(mt, fn_->getArg(buffer_of_[li]), index(stride_v_[li], offset_v_[li]));
  llvm::LoadInst* ld = b_.CreateAlignedLoad(mt, p, llvm::Align(ir::element_size(a.dtype)));
  // Inputs never change during the kernel: ld.global.nc.
  ld->setMetadata(llvm::LLVMContext::MD_invariant_load, llvm::MDNode::get(ctx_, {}));
  TV r{from_memory(b_, ld, a.dtype), a.dtype};
  return loaded_[li] = r;
}

bool KernelEmitter::is_scalar_argument(ValueId v) const {
  if (values_.count(v) || position_of_.count(v)) return false;
  int32_t li = k_.load_of(v);
  return li >= 0 && k_.loads[li].scalar_index >= 0;
}

void KernelEmitter::emit_kernel_node(const ir::Node& n) {
  values_[n.outputs[0]] = emit_node(math(), g_, n, k_, cat_piece_, [this](int32_t li) { return load(li); }, operands());
}

OperandSource KernelEmitter::operands() {
  return {[this](ValueId v) { return operand(v); }, [this](ValueId v) { return is_scalar_argument(v); }};
}

// NVPTX expands `frem` as x - trunc(x / y) * y, which is not C's fmod (wrong
// for large quotients); CUDA eager calls fmod. So each becomes a call to libm's
// fmodf/fmod, which the target maps onto libdevice like the other libm calls.
void frem_to_fmod(llvm::Function& f) {
  std::vector<llvm::Instruction*> rems;
  for (llvm::BasicBlock& bb : f)
    for (llvm::Instruction& i : bb)
      if (i.getOpcode() == llvm::Instruction::FRem) rems.push_back(&i);
  for (llvm::Instruction* r : rems) {
    llvm::IRBuilder<> b(r);
    llvm::Type* T = r->getType();
    Value* x = r->getOperand(0);
    Value* y = r->getOperand(1);
    llvm::Type* C = T->isDoubleTy() ? T : b.getFloatTy();  // half: through float, exact
    if (C != T) {
      x = b.CreateFPExt(x, C);
      y = b.CreateFPExt(y, C);
    }
    auto callee = f.getParent()->getOrInsertFunction(C->isDoubleTy() ? "fmod" : "fmodf", C, C, C);
    auto* fn = llvm::cast<llvm::Function>(callee.getCallee());
    fn->setDoesNotAccessMemory();
    fn->setDoesNotThrow();
    fn->setWillReturn();
    Value* v = b.CreateCall(callee, {x, y});
    if (C != T) v = b.CreateFPTrunc(v, T);
    r->replaceAllUsesWith(v);
    r->eraseFromParent();
  }
}

}  // namespace emit

DeviceKernel emit_kernel(llvm::Module& m, const ir::Graph& g, const FusedKernel& k, const std::string& symbol,
                         const KernelConfig& cfg) {
  emit::KernelEmitter e(m, g, k, symbol, cfg);
  try {
    DeviceKernel dk = e.emit();
    emit::frem_to_fmod(*e.function());
    std::string err;
    llvm::raw_string_ostream os(err);
    if (llvm::verifyFunction(*e.function(), &os)) throw std::runtime_error("invalid IR: " + os.str());
    // A PTX kernel (.entry), at most the shape's block of threads a block.
    llvm::LLVMContext& ctx = m.getContext();
    auto* i32 = llvm::Type::getInt32Ty(ctx);
    llvm::NamedMDNode* md = m.getOrInsertNamedMetadata("nvvm.annotations");
    md->addOperand(llvm::MDNode::get(ctx, {llvm::ValueAsMetadata::get(e.function()), llvm::MDString::get(ctx, "kernel"),
                                           llvm::ConstantAsMetadata::get(llvm::ConstantInt::get(i32, 1))}));
    md->addOperand(llvm::MDNode::get(ctx, {llvm::ValueAsMetadata::get(e.function()), llvm::MDString::get(ctx, "maxntidx"),
                                           llvm::ConstantAsMetadata::get(llvm::ConstantInt::get(i32, dk.block))}));
    return dk;
  } catch (const std::exception& ex) {
    // Leave the module as it was (but for declarations the math may have added).
    if (llvm::Function* f = e.function()) f->eraseFromParent();
    if (llvm::GlobalVariable* gv = m.getGlobalVariable(symbol + ".partials", true)) gv->eraseFromParent();
    throw std::runtime_error("kernel " + k.name + ": " + ex.what());
  }
}

}  // namespace lazyjit::lowering::cuda
