#include "lowering/element/op_emitter.h"

namespace lazyjit::lowering::element {

namespace {

// Float: a NaN x compares false and stays; a NaN bound is ignored, like ATen.
Value* clamp(const MathContext& c, const ir::Node& n, const OperandSource& in, Value* x, DType ct) {
  Builder& b = c.b;
  int64_t bits = attr_i64(n, 1);
  bool f = ir::is_floating(ct), u = is_unsigned(ct);
  if (bits & 1) {
    Value* lo = convert(b, in.value(n.operands.at(1)), ct);
    x = f ? b.CreateSelect(b.CreateFCmpOLT(x, lo), lo, x)
          : b.CreateBinaryIntrinsic(u ? llvm::Intrinsic::umax : llvm::Intrinsic::smax, x, lo);
  }
  if (bits & 2) {
    Value* hi = convert(b, in.value(n.operands.at(2)), ct);
    x = f ? b.CreateSelect(b.CreateFCmpOGT(x, hi), hi, x)
          : b.CreateBinaryIntrinsic(u ? llvm::Intrinsic::umin : llvm::Intrinsic::smin, x, hi);
  }
  return x;
}

}  // namespace

TV emit_elementwise(const MathContext& c, const ir::Node& n, const OperandSource& in) {
  Builder& b = c.b;
  DType ct = ir::opmath_dtype(static_cast<DType>(attr_i64(n, 0)));
  reg_type(b, ct);  // rejects non-lowerable compute dtypes
  auto arg = [&](size_t i, DType t) {
    if (i >= n.operands.size()) unsupported(std::string(ir::op_name(n.kind)) + ": missing operand");
    return convert(b, in.value(n.operands[i]), t);
  };
  switch (n.kind) {
    case OpKind::Cast:
    case OpKind::Full: return {arg(0, ct), ct};
    case OpKind::Where: return {b.CreateSelect(arg(0, DType::Bool), arg(1, ct), arg(2, ct)), ct};
    case OpKind::Clamp: return {clamp(c, n, in, arg(0, ct), ct), ct};
    case OpKind::Fma: {
      Value *x = arg(0, ct), *y = arg(1, ct), *z = arg(2, ct);
      if (ir::is_floating(ct)) return {b.CreateIntrinsic(llvm::Intrinsic::fma, {x->getType()}, {x, y, z}), ct};
      return {binary_int(b, OpKind::Add, binary_int(b, OpKind::Mul, x, y, ct), z, ct), ct};
    }
    case OpKind::LogicalNot: return {b.CreateNot(arg(0, DType::Bool)), DType::Bool};
    case OpKind::LogicalAnd: return {b.CreateAnd(arg(0, DType::Bool), arg(1, DType::Bool)), DType::Bool};
    case OpKind::LogicalOr: return {b.CreateOr(arg(0, DType::Bool), arg(1, DType::Bool)), DType::Bool};
    default: break;
  }
  if (ir::is_unary(n.kind)) {
    Value* x = arg(0, ct);
    return {ir::is_floating(ct) ? unary_float(c, n.kind, x) : unary_int(b, n.kind, x, ct), ct};
  }
  if (n.kind == OpKind::Pow && ir::is_floating(ct) && in.is_scalar_argument(n.operands[1]))
    return {pow_by_scalar(b, arg(0, ct), arg(1, ct)), ct};
  if (ir::is_binary(n.kind)) {
    Value* x = arg(0, ct);
    Value* y = arg(1, ct);
    Value* r = ir::is_floating(ct) ? binary_float(b, n.kind, x, y) : binary_int(b, n.kind, x, y, ct);
    return {r, ir::is_predicate(n.kind) ? DType::Bool : ct};
  }
  unsupported(std::string(ir::op_name(n.kind)) + " is not an elementwise op");
}

TV emit_node(const MathContext& c, const ir::Graph& g, const ir::Node& n, const FusedKernel& k, size_t cat_piece,
             const std::function<TV(int32_t load)>& load, const OperandSource& in) {
  DType out = g.value(n.outputs[0]).type.dtype;
  if (n.kind == OpKind::Cat) {
    // A kernel that never iterates has no pieces: any operand will do.
    size_t j = k.cat_dim >= 0 ? cat_piece : 0;
    int32_t li = k.load_of(n.operands.at(j), static_cast<int32_t>(j));
    if (li < 0) unsupported("a cat operand without its piece's load");
    return {convert(c.b, load(li), out), out};
  }
  TV r = inject_fault(c, n.kind, emit_elementwise(c, n, in));
  return {convert(c.b, r, out), out};
}

void note_nonfinite(Builder& b, llvm::Function* fn, llvm::AllocaInst*& flag, Value* v, DType t) {
  if (t != DType::Float32 && t != DType::Float64) return;
  // NaN or Inf: every exponent bit set.
  const bool f64 = t == DType::Float64;
  llvm::Type* I = f64 ? b.getInt64Ty() : b.getInt32Ty();
  Value* exp = llvm::ConstantInt::get(I, f64 ? 0x7ff0000000000000ull : 0x7f800000ull);
  Value* bad = b.CreateICmpEQ(b.CreateAnd(b.CreateBitCast(v, I), exp), exp);
  if (!flag) {
    Builder eb(&fn->getEntryBlock(), fn->getEntryBlock().begin());
    flag = eb.CreateAlloca(b.getInt8Ty(), nullptr, "nonfinite");
    eb.CreateStore(b.getInt8(0), flag);
  }
  b.CreateStore(b.CreateOr(b.CreateLoad(b.getInt8Ty(), flag), b.CreateZExt(bad, b.getInt8Ty())), flag);
}

TV inject_fault(const MathContext& c, OpKind k, TV r) {
  if (c.opts.fault.empty() || c.opts.fault != ir::op_name(k)) return r;
  Builder& b = c.b;
  Value* x = r.v;
  if (r.t == DType::Bool) return {b.CreateNot(x), r.t};
  if (ir::is_floating(r.t)) return {b.CreateFAdd(b.CreateFMul(x, fconst(x, 1.25)), fconst(x, 0.5)), r.t};
  return {b.CreateAdd(x, llvm::ConstantInt::get(x->getType(), 1)), r.t};
}

Value* reduction_identity(Builder& b, OpKind k, DType at) {
  llvm::Type* T = reg_type(b, at);
  bool fl = ir::is_floating(at), u = is_unsigned(at);
  switch (k) {
    case OpKind::ReduceSum: return llvm::Constant::getNullValue(T);
    case OpKind::ReduceMax:
      return fl ? llvm::ConstantFP::getInfinity(T, /*Negative=*/true)
                : llvm::ConstantInt::get(T, u ? llvm::APInt::getMinValue(T->getIntegerBitWidth())
                                              : llvm::APInt::getSignedMinValue(T->getIntegerBitWidth()));
    case OpKind::ReduceMin:
      return fl ? llvm::ConstantFP::getInfinity(T, /*Negative=*/false)
                : llvm::ConstantInt::get(T, u ? llvm::APInt::getMaxValue(T->getIntegerBitWidth())
                                              : llvm::APInt::getSignedMaxValue(T->getIntegerBitWidth()));
    default: unsupported(std::string(ir::op_name(k)) + " is not a reduction");
  }
}

Value* reduction_step(Builder& b, OpKind k, Value* acc, Value* x, DType at) {
  bool fl = ir::is_floating(at), u = is_unsigned(at);
  switch (k) {
    case OpKind::ReduceSum: {
      if (!fl) return binary_int(b, OpKind::Add, acc, x, at);
      Value* r = b.CreateFAdd(acc, x);
      // Reassociable only: without nsz LLVM keeps the +0.0 start (its vector
      // lanes start at -0.0), so a sum of -0.0s is +0.0, as in eager.
      if (auto* I = llvm::dyn_cast<llvm::Instruction>(r)) {
        llvm::FastMathFlags fmf;
        fmf.setAllowReassoc();
        I->setFastMathFlags(fmf);
      }
      return r;
    }
    case OpKind::ReduceMax:
      return b.CreateBinaryIntrinsic(fl ? llvm::Intrinsic::maximum
                                     : u ? llvm::Intrinsic::umax : llvm::Intrinsic::smax, acc, x);
    default:
      return b.CreateBinaryIntrinsic(fl ? llvm::Intrinsic::minimum
                                     : u ? llvm::Intrinsic::umin : llvm::Intrinsic::smin, acc, x);
  }
}

}  // namespace lazyjit::lowering::element
