// Kernel emission (the emitter's loop nests, conversions and ops; row kernels
// are in row_kernel.cpp), then the module's optimization pipeline.
#include "lowering/cpu/codegen.h"

#include "lowering/cpu/emitter.h"

#include <cmath>
#include <functional>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>

#include <llvm/Analysis/TargetLibraryInfo.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/raw_ostream.h>

namespace lazyjit::lowering::cpu {
namespace emit {

void KernelEmitter::emit() {
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

void KernelEmitter::set_target_attrs(llvm::Function* f) {
  f->addFnAttr("target-cpu", tm_.getTargetCPU());
  f->addFnAttr("target-features", tm_.getTargetFeatureString());
  f->addFnAttr(llvm::Attribute::NoUnwind);
  // LLVM defaults to 256-bit vectors on AVX-512 server parts; our kernels are
  // long vectorizable loops, where 512 bits measure faster (bench/).
  if (avx512_ && cfg_.opts.vector_bits >= 512) f->addFnAttr("prefer-vector-width", "512");
}

void KernelEmitter::emit_impl() {
  b_.SetInsertPoint(llvm::BasicBlock::Create(ctx_, "entry", fn_));
  llvm::BasicBlock* exit = llvm::BasicBlock::Create(ctx_, "exit", fn_);
  // Scalars are loop-invariant: read them once.
  for (size_t i = 0; i < k_.loads.size(); ++i)
    if (k_.loads[i].scalar_index >= 0) loaded_[i] = load_scalar(k_.loads[i]);
  if (k_.row) return emit_row_impl(exit);
  emit_outer_loops(exit, sizes_.size(), [&] { emit_body(); });
}

void KernelEmitter::emit_outer_loops(llvm::BasicBlock* exit, size_t last, const std::function<void()>& body) {
  bool empty = false;
  for (size_t d = 1; d < last; ++d) empty |= sizes_[d] <= 0;
  if (empty) {
    b_.CreateBr(exit);
  } else {
    Value* begin = fn_->getArg(nbuf_ + 1);
    Value* end = fn_->getArg(nbuf_ + 2);
    llvm::BasicBlock* outer = llvm::BasicBlock::Create(ctx_, "outer", fn_);
    b_.CreateCondBr(b_.CreateICmpSLT(begin, end), outer, exit);
    b_.SetInsertPoint(outer);
    idx_.assign(sizes_.size(), nullptr);
    emit_loops(0, last, begin, end, body);
    b_.CreateBr(exit);
  }
  b_.SetInsertPoint(exit);
  b_.CreateRetVoid();
}

void KernelEmitter::emit_loops(size_t d, size_t last, Value* start, Value* stop, const std::function<void()>& body) {
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

void KernelEmitter::emit_body() {
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

Value* KernelEmitter::index(const std::vector<int64_t>& strides, int64_t offset) {
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

llvm::Type* KernelEmitter::reg_type(DType t) {
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

llvm::Type* KernelEmitter::mem_type(DType t) {
  if (t == DType::Bool) return b_.getInt8Ty();
  if (t == DType::BFloat16) return b_.getInt16Ty();
  return reg_type(t);
}

Value* KernelEmitter::round_bf16(Value* f) {
  auto* i32 = b_.getInt32Ty();
  Value* u = b_.CreateBitCast(f, i32);
  Value* lsb = b_.CreateAnd(b_.CreateLShr(u, 16), 1);
  Value* r = b_.CreateAnd(b_.CreateAdd(b_.CreateAdd(u, b_.getInt32(0x7fff)), lsb),
                          b_.getInt32(0xffff0000u));
  r = b_.CreateSelect(b_.CreateFCmpUNO(f, f), b_.getInt32(0x7fc00000), r);
  return b_.CreateBitCast(r, b_.getFloatTy());
}

Value* KernelEmitter::convert(TV x, DType to) {
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

Value* KernelEmitter::to_memory(Value* v, DType t) {
  if (t == DType::Bool) return b_.CreateZExt(v, b_.getInt8Ty());
  if (t == DType::BFloat16)
    return b_.CreateTrunc(b_.CreateLShr(b_.CreateBitCast(v, b_.getInt32Ty()), 16), b_.getInt16Ty());
  return v;
}

Value* KernelEmitter::from_memory(Value* v, DType t) {
  if (t == DType::Bool) return b_.CreateICmpNE(v, b_.getInt8(0));
  if (t == DType::BFloat16)
    return b_.CreateBitCast(b_.CreateShl(b_.CreateZExt(v, b_.getInt32Ty()), 16), b_.getFloatTy());
  return v;
}

TV KernelEmitter::load_scalar(const Access& a) {
  Value* p = b_.CreateConstInBoundsGEP1_64(b_.getInt64Ty(), fn_->getArg(nbuf_), a.scalar_index);
  if (ir::is_floating(a.dtype)) return {b_.CreateLoad(b_.getDoubleTy(), p), DType::Float64};
  Value* i = b_.CreateLoad(b_.getInt64Ty(), p);
  if (a.dtype == DType::Bool) return {b_.CreateICmpNE(i, b_.getInt64(0)), DType::Bool};
  return {i, DType::Int64};
}

TV KernelEmitter::operand(ValueId v) {
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

TV KernelEmitter::emit_node(const ir::Node& n) {
  DType ct = ir::opmath_dtype(static_cast<DType>(attr_i64(n, 0)));
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

bool KernelEmitter::is_scalar_argument(ValueId v) const {
  if (values_.count(v)) return false;
  int32_t li = k_.load_of(v);
  return li >= 0 && k_.loads[li].scalar_index >= 0;
}

Value* KernelEmitter::pow_by_scalar(Value* x, Value* y) {
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

Value* KernelEmitter::clamp(const ir::Node& n, Value* x, DType ct) {
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

Value* KernelEmitter::libm(const char* name, Value* x) {
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

Value* KernelEmitter::math(const char* name, llvm::Intrinsic::ID id, Value* x) {
  if (avx512_ && cfg_.opts.vector_bits >= 512 && cfg_.libmvec && cfg_.opts.vectorize_math)
    return libm(name, x);
  return intrinsic(id, x);
}

void KernelEmitter::add_vector_variants(llvm::CallInst* call, const std::string& fname, bool f32) {
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

Value* KernelEmitter::tanh(Value* x) {
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

Value* KernelEmitter::unary_float(OpKind k, Value* x) {
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

Value* KernelEmitter::unary_int(OpKind k, Value* x, DType ct) {
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

Value* KernelEmitter::binary_float(OpKind k, Value* a, Value* b) {
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

Value* KernelEmitter::sign_fix(Value* mod, Value* b) {
  Value* zero = fconst(b, 0.0);
  return b_.CreateAnd(b_.CreateFCmpUNE(mod, zero),
                      b_.CreateXor(b_.CreateFCmpOLT(b, zero), b_.CreateFCmpOLT(mod, zero)));
}

Value* KernelEmitter::div_floor(Value* a, Value* b) {
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

Value* KernelEmitter::binary_int(OpKind k, Value* a, Value* b, DType ct) {
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

}  // namespace emit

using emit::KernelEmitter;

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
