#include "lowering/element/math_emitter.h"

#include <cmath>
#include <functional>
#include <vector>

#include <llvm/Transforms/Utils/ModuleUtils.h>

namespace lazyjit::lowering::element {

namespace {

// LLVM 19's libmvec table covers exp/log/sin/cos/pow only; glibc >= 2.35 also
// has tanh, erf, log1p and expm1, which we name per call site in the vector
// function ABI ("_ZGV<isa>N<lanes>v_<name>"). Only ISAs the host runs are listed.
void add_vector_variants(const MathContext& c, llvm::CallInst* call, const std::string& fname, bool f32) {
  struct Isa { char code; int bits; bool ok; };
  std::string attr;
  for (Isa isa : {Isa{'b', 128, true}, Isa{'d', 256, c.avx2}, Isa{'e', 512, c.avx512}}) {
    if (!isa.ok) continue;
    unsigned lanes = isa.bits / (f32 ? 32 : 64);
    std::string vname = std::string("_ZGV") + isa.code + "N" + std::to_string(lanes) + "v_" + fname;
    auto* vt = llvm::FixedVectorType::get(call->getType(), lanes);
    auto* vf = llvm::cast<llvm::Function>(c.m.getOrInsertFunction(vname, vt, vt).getCallee());
    vf->setDoesNotAccessMemory();
    vf->setDoesNotThrow();
    vf->setWillReturn();
    // Kept alive until the vectorizer looks for it, as InjectTLIMappings does.
    if (c.declared.insert(vname).second) llvm::appendToCompilerUsed(c.m, {vf});
    attr += (attr.empty() ? "" : ",") + vname + "(" + vname + ")";
  }
  call->addFnAttr(llvm::Attribute::get(c.b.getContext(), "vector-function-abi-variant", attr));
}

// fmod's result has the dividend's sign; Python's modulo wants the divisor's (y's).
Value* sign_fix(Builder& b, Value* mod, Value* y) {
  Value* zero = fconst(y, 0.0);
  return b.CreateAnd(b.CreateFCmpUNE(mod, zero),
                     b.CreateXor(b.CreateFCmpOLT(y, zero), b.CreateFCmpOLT(mod, zero)));
}

// ATen's div_floor_floating, branch-free.
Value* div_floor(Builder& b, Value* a, Value* y) {
  Value* zero = fconst(a, 0.0);
  Value* q = b.CreateFDiv(a, y);
  Value* mod = b.CreateFRem(a, y);
  Value* div = b.CreateFDiv(b.CreateFSub(a, mod), y);
  div = b.CreateSelect(sign_fix(b, mod, y), b.CreateFSub(div, fconst(a, 1.0)), div);
  Value* fl = intrinsic(b, llvm::Intrinsic::floor, div);
  fl = b.CreateSelect(b.CreateFCmpOGT(b.CreateFSub(div, fl), fconst(a, 0.5)),
                      b.CreateFAdd(fl, fconst(a, 1.0)), fl);
  Value* r = b.CreateSelect(b.CreateFCmpUNE(div, zero), fl,
                            b.CreateBinaryIntrinsic(llvm::Intrinsic::copysign, zero, q));
  return b.CreateSelect(b.CreateFCmpOEQ(y, zero), q, r);
}

}  // namespace

Value* libm(const MathContext& c, const char* name, Value* x) {
  bool f32 = x->getType()->isFloatTy();
  std::string fname = std::string(name) + (f32 ? "f" : "");
  auto callee = c.m.getOrInsertFunction(fname, x->getType(), x->getType());
  auto* f = llvm::cast<llvm::Function>(callee.getCallee());
  f->setDoesNotAccessMemory();
  f->setDoesNotThrow();
  f->setWillReturn();
  llvm::CallInst* call = c.b.CreateCall(callee, {x});
  if (c.libmvec && c.opts.vectorize_math) add_vector_variants(c, call, fname, f32);
  return call;
}

Value* math(const MathContext& c, const char* name, llvm::Intrinsic::ID id, Value* x) {
  if (c.avx512 && c.opts.vector_bits >= 512 && c.libmvec && c.opts.vectorize_math)
    return libm(c, name, x);
  return intrinsic(c.b, id, x);
}

Value* tanh(const MathContext& c, Value* x) {
  if (!x->getType()->isFloatTy()) return libm(c, "tanh", x);
  Value* ax = intrinsic(c.b, llvm::Intrinsic::fabs, x);
  Value* xc = c.b.CreateBinaryIntrinsic(llvm::Intrinsic::minnum, x, fconst(x, 7.90531110763549805));
  xc = c.b.CreateBinaryIntrinsic(llvm::Intrinsic::maxnum, xc, fconst(x, -7.90531110763549805));
  Value* x2 = c.b.CreateFMul(xc, xc);
  auto poly = [&](std::initializer_list<double> coeffs) {  // highest degree first, in x2
    Value* acc = nullptr;
    // fmuladd: one FMA per step where the host has FMA (our own
    // approximation, so contraction changes no PyTorch rounding).
    for (double k : coeffs)
      acc = acc ? c.b.CreateIntrinsic(llvm::Intrinsic::fmuladd, {x->getType()}, {acc, x2, fconst(x, k)})
                : fconst(x, k);
    return acc;
  };
  Value* p = c.b.CreateFMul(xc, poly({-2.76076847742355e-16, 2.00018790482477e-13, -8.60467152213735e-11,
                                    5.12229709037114e-08, 1.48572235717979e-05, 6.37261928875436e-04,
                                    4.89352455891786e-03}));
  Value* q = poly({1.19825839466702e-06, 1.18534705686654e-04, 2.26843463243900e-03, 4.89352518554385e-03});
  Value* r = c.b.CreateFDiv(p, q);
  // |x| >= 9.011: tanhf(x) rounds to +-1 exactly (so gelu(-inf) is nan, as in
  // eager); the polynomial alone stops 3e-7 short.
  r = c.b.CreateSelect(c.b.CreateFCmpOGE(ax, fconst(x, 9.01099967956543)),
                       c.b.CreateBinaryIntrinsic(llvm::Intrinsic::copysign, fconst(x, 1.0), x), r);
  // Tiny |x|: tanh(x) = x (keeps -0.0 and subnormals exact); NaN stays NaN.
  return c.b.CreateSelect(c.b.CreateFCmpOLT(ax, fconst(x, 0.0004)), x,
                          c.b.CreateSelect(c.b.CreateFCmpUNO(x, x), x, r));
}

Value* unary_float(const MathContext& c, OpKind k, Value* x) {
  Value* one = fconst(x, 1.0);
  switch (k) {
    case OpKind::Abs: return intrinsic(c.b, llvm::Intrinsic::fabs, x);
    case OpKind::Neg: return c.b.CreateFNeg(x);
    case OpKind::Exp: return math(c, "exp", llvm::Intrinsic::exp, x);
    case OpKind::Log: return math(c, "log", llvm::Intrinsic::log, x);
    case OpKind::Sqrt: return intrinsic(c.b, llvm::Intrinsic::sqrt, x);
    case OpKind::Rsqrt: return c.b.CreateFDiv(one, intrinsic(c.b, llvm::Intrinsic::sqrt, x));
    case OpKind::Tanh: return tanh(c, x);
    case OpKind::Sigmoid:
      return c.b.CreateFDiv(one, c.b.CreateFAdd(one, math(c, "exp", llvm::Intrinsic::exp, c.b.CreateFNeg(x))));
    // clamp_min(x, 0) as ATen computes it: only x < 0 becomes +0, so NaN and
    // -0.0 keep x (relu(-0.) is -0. in eager).
    case OpKind::Relu: return c.b.CreateSelect(c.b.CreateFCmpOLT(x, fconst(x, 0.0)), fconst(x, 0.0), x);
    case OpKind::Gelu: {
      Value* e = libm(c, "erf", c.b.CreateFMul(x, fconst(x, M_SQRT1_2)));
      return c.b.CreateFMul(c.b.CreateFMul(fconst(x, 0.5), x), c.b.CreateFAdd(one, e));
    }
    case OpKind::GeluTanh: {
      Value* x3 = c.b.CreateFMul(c.b.CreateFMul(x, x), x);
      Value* inner = c.b.CreateFMul(fconst(x, std::sqrt(2.0 / M_PI)),
                                    c.b.CreateFAdd(x, c.b.CreateFMul(fconst(x, 0.044715), x3)));
      return c.b.CreateFMul(c.b.CreateFMul(fconst(x, 0.5), x), c.b.CreateFAdd(one, tanh(c, inner)));
    }
    case OpKind::Silu:
      return c.b.CreateFDiv(x, c.b.CreateFAdd(one, math(c, "exp", llvm::Intrinsic::exp, c.b.CreateFNeg(x))));
    case OpKind::Reciprocal: return c.b.CreateFDiv(one, x);
    case OpKind::Sin: return math(c, "sin", llvm::Intrinsic::sin, x);
    case OpKind::Cos: return math(c, "cos", llvm::Intrinsic::cos, x);
    case OpKind::Log1p: return libm(c, "log1p", x);
    case OpKind::Expm1: return libm(c, "expm1", x);
    case OpKind::Erf: return libm(c, "erf", x);
    default: unsupported(std::string(ir::op_name(k)) + " on a floating dtype");
  }
}

Value* pow_by_scalar(Builder& b, Value* x, Value* y) {
  llvm::LLVMContext& ctx = b.getContext();
  llvm::Function* fn = b.GetInsertBlock()->getParent();
  struct Case { double e; std::function<Value*()> f; };
  Value* one = fconst(x, 1.0);
  std::vector<Case> cases{
      {2.0, [&] { return b.CreateFMul(x, x); }},
      {3.0, [&] { return b.CreateFMul(b.CreateFMul(x, x), x); }},
      {-2.0, [&] { return b.CreateFDiv(one, b.CreateFMul(x, x)); }},
      {-1.0, [&] { return b.CreateFDiv(one, x); }},
      {0.5, [&] { return intrinsic(b, llvm::Intrinsic::sqrt, x); }},
      {-0.5, [&] { return b.CreateFDiv(one, intrinsic(b, llvm::Intrinsic::sqrt, x)); }},
  };
  llvm::BasicBlock* done = llvm::BasicBlock::Create(ctx, "pow.done", fn);
  std::vector<std::pair<Value*, llvm::BasicBlock*>> results;
  for (const Case& c : cases) {
    llvm::BasicBlock* hit = llvm::BasicBlock::Create(ctx, "pow.case", fn);
    llvm::BasicBlock* next = llvm::BasicBlock::Create(ctx, "pow.next", fn);
    b.CreateCondBr(b.CreateFCmpOEQ(y, fconst(y, c.e)), hit, next);
    b.SetInsertPoint(hit);
    Value* r = c.f();
    results.emplace_back(r, b.GetInsertBlock());
    b.CreateBr(done);
    b.SetInsertPoint(next);
  }
  Value* general = b.CreateBinaryIntrinsic(llvm::Intrinsic::pow, x, y);
  results.emplace_back(general, b.GetInsertBlock());
  b.CreateBr(done);
  b.SetInsertPoint(done);
  llvm::PHINode* phi = b.CreatePHI(x->getType(), static_cast<unsigned>(results.size()));
  for (auto& [v, bb] : results) phi->addIncoming(v, bb);
  return phi;
}

Value* binary_float(Builder& b, OpKind k, Value* a, Value* y) {
  switch (k) {
    case OpKind::Add: return b.CreateFAdd(a, y);
    case OpKind::Sub: return b.CreateFSub(a, y);
    case OpKind::Mul: return b.CreateFMul(a, y);
    case OpKind::Div: return b.CreateFDiv(a, y);
    case OpKind::DivTrunc: return intrinsic(b, llvm::Intrinsic::trunc, b.CreateFDiv(a, y));
    case OpKind::DivFloor: return div_floor(b, a, y);
    case OpKind::Remainder: {
      Value* mod = b.CreateFRem(a, y);
      return b.CreateSelect(sign_fix(b, mod, y), b.CreateFAdd(mod, y), mod);
    }
    case OpKind::Pow: return b.CreateBinaryIntrinsic(llvm::Intrinsic::pow, a, y);
    // uno: either is NaN, and a + y is then NaN. Equal operands (+0.0 and
    // -0.0) give the first, as std::max/min in ATen's scalar loops and its
    // clamp_min/clamp_max at every position (see docs/design.md on zeros).
    case OpKind::Maximum:
      return b.CreateSelect(b.CreateFCmpUNO(a, y), b.CreateFAdd(a, y),
                            b.CreateSelect(b.CreateFCmpOLT(a, y), y, a));
    case OpKind::Minimum:
      return b.CreateSelect(b.CreateFCmpUNO(a, y), b.CreateFAdd(a, y),
                            b.CreateSelect(b.CreateFCmpOGT(a, y), y, a));
    case OpKind::Eq: return b.CreateFCmpOEQ(a, y);
    case OpKind::Ne: return b.CreateFCmpUNE(a, y);
    case OpKind::Lt: return b.CreateFCmpOLT(a, y);
    case OpKind::Le: return b.CreateFCmpOLE(a, y);
    case OpKind::Gt: return b.CreateFCmpOGT(a, y);
    case OpKind::Ge: return b.CreateFCmpOGE(a, y);
    default: unsupported(std::string(ir::op_name(k)) + " on a floating dtype");
  }
}

Value* unary_int(Builder& b, OpKind k, Value* x, DType ct) {
  bool u = is_unsigned(ct);
  switch (k) {
    case OpKind::Abs: return u ? x : b.CreateBinaryIntrinsic(llvm::Intrinsic::abs, x, b.getFalse());
    case OpKind::Neg:
      if (ct == DType::Bool) break;
      return b.CreateNeg(x);
    case OpKind::Relu:
      return u ? x : b.CreateBinaryIntrinsic(llvm::Intrinsic::smax, x, llvm::ConstantInt::get(x->getType(), 0));
    default: break;
  }
  unsupported(std::string(ir::op_name(k)) + " on " + std::string(ir::dtype_name(ct)));
}

Value* binary_int(Builder& b, OpKind k, Value* a, Value* y, DType ct) {
  bool u = is_unsigned(ct), bl = ct == DType::Bool;
  using P = llvm::CmpInst::Predicate;
  switch (k) {
    // ATen: bool add is or, bool mul is and (sub on bool is an error there).
    case OpKind::Add: return bl ? b.CreateOr(a, y) : b.CreateAdd(a, y);
    case OpKind::Sub:
      if (bl) break;
      return b.CreateSub(a, y);
    case OpKind::Mul: return bl ? b.CreateAnd(a, y) : b.CreateMul(a, y);
    case OpKind::Maximum: return b.CreateBinaryIntrinsic(u ? llvm::Intrinsic::umax : llvm::Intrinsic::smax, a, y);
    case OpKind::Minimum: return b.CreateBinaryIntrinsic(u ? llvm::Intrinsic::umin : llvm::Intrinsic::smin, a, y);
    case OpKind::Eq: return b.CreateICmp(P::ICMP_EQ, a, y);
    case OpKind::Ne: return b.CreateICmp(P::ICMP_NE, a, y);
    case OpKind::Lt: return b.CreateICmp(u ? P::ICMP_ULT : P::ICMP_SLT, a, y);
    case OpKind::Le: return b.CreateICmp(u ? P::ICMP_ULE : P::ICMP_SLE, a, y);
    case OpKind::Gt: return b.CreateICmp(u ? P::ICMP_UGT : P::ICMP_SGT, a, y);
    case OpKind::Ge: return b.CreateICmp(u ? P::ICMP_UGE : P::ICMP_SGE, a, y);
    case OpKind::BitAnd: return b.CreateAnd(a, y);
    case OpKind::BitOr: return b.CreateOr(a, y);
    case OpKind::BitXor: return b.CreateXor(a, y);
    default: break;
  }
  unsupported(std::string(ir::op_name(k)) + " on " + std::string(ir::dtype_name(ct)));
}

}  // namespace lazyjit::lowering::element
