#include "lowering/element/dtype_emitter.h"

namespace lazyjit::lowering::element {

llvm::Type* reg_type(Builder& b, DType t) {
  switch (t) {
    case DType::Bool: return b.getInt1Ty();
    case DType::UInt8: case DType::Int8: return b.getInt8Ty();
    case DType::Int16: return b.getInt16Ty();
    case DType::Int32: return b.getInt32Ty();
    case DType::Int64: return b.getInt64Ty();
    case DType::Float16: return b.getHalfTy();
    case DType::BFloat16: case DType::Float32: return b.getFloatTy();
    case DType::Float64: return b.getDoubleTy();
    default: unsupported("dtype " + std::string(ir::dtype_name(t)) + " is not lowerable");
  }
}

llvm::Type* mem_type(Builder& b, DType t) {
  if (t == DType::Bool) return b.getInt8Ty();
  if (t == DType::BFloat16) return b.getInt16Ty();
  return reg_type(b, t);
}

Value* round_bf16(Builder& b, Value* f) {
  auto* i32 = b.getInt32Ty();
  Value* u = b.CreateBitCast(f, i32);
  Value* lsb = b.CreateAnd(b.CreateLShr(u, 16), 1);
  Value* r = b.CreateAnd(b.CreateAdd(b.CreateAdd(u, b.getInt32(0x7fff)), lsb),
                         b.getInt32(0xffff0000u));
  r = b.CreateSelect(b.CreateFCmpUNO(f, f), b.getInt32(0x7fc00000), r);
  return b.CreateBitCast(r, b.getFloatTy());
}

Value* convert(Builder& b, TV x, DType to) {
  if (x.t == to) return x.v;
  llvm::Type* T = reg_type(b, to);
  bool fx = ir::is_floating(x.t), ft = ir::is_floating(to);
  if (to == DType::Bool)
    return fx ? b.CreateFCmpUNE(x.v, llvm::ConstantFP::get(x.v->getType(), 0.0))
              : b.CreateICmpNE(x.v, llvm::ConstantInt::get(x.v->getType(), 0));
  if (!fx && !ft) return b.CreateIntCast(x.v, T, !is_unsigned(x.t));
  if (!fx) {
    Value* f = is_unsigned(x.t) ? b.CreateUIToFP(x.v, T) : b.CreateSIToFP(x.v, T);
    return to == DType::BFloat16 ? round_bf16(b, f) : f;
  }
  if (!ft) {
    // Like c10's conversions: narrow ints via a wider int, and uint8 via int64
    // so that negative floats wrap instead of being undefined.
    llvm::Type* wide = to == DType::Int64 || to == DType::UInt8 ? b.getInt64Ty() : b.getInt32Ty();
    return b.CreateIntCast(b.CreateFPToSI(x.v, wide), T, true);
  }
  Value* v = x.v;
  if (v->getType() != T) v = b.CreateFPCast(v, T);
  return to == DType::BFloat16 ? round_bf16(b, v) : v;
}

Value* to_memory(Builder& b, Value* v, DType t) {
  if (t == DType::Bool) return b.CreateZExt(v, b.getInt8Ty());
  if (t == DType::BFloat16)
    return b.CreateTrunc(b.CreateLShr(b.CreateBitCast(v, b.getInt32Ty()), 16), b.getInt16Ty());
  return v;
}

Value* from_memory(Builder& b, Value* v, DType t) {
  if (t == DType::Bool) return b.CreateICmpNE(v, b.getInt8(0));
  if (t == DType::BFloat16)
    return b.CreateBitCast(b.CreateShl(b.CreateZExt(v, b.getInt32Ty()), 16), b.getFloatTy());
  return v;
}

}  // namespace lazyjit::lowering::element
