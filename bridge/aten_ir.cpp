#include "bridge/aten_ir.h"

#include <cstring>
#include <stdexcept>
#include <string>

namespace lazyjit::bridge {

using ir::DType;

at::ScalarType to_aten(DType t) {
  switch (t) {
    case DType::Bool: return at::kBool;
    case DType::UInt8: return at::kByte;
    case DType::Int8: return at::kChar;
    case DType::Int16: return at::kShort;
    case DType::Int32: return at::kInt;
    case DType::Int64: return at::kLong;
    case DType::Float16: return at::kHalf;
    case DType::BFloat16: return at::kBFloat16;
    case DType::Float32: return at::kFloat;
    case DType::Float64: return at::kDouble;
    case DType::Complex64: return at::kComplexFloat;
    case DType::Complex128: return at::kComplexDouble;
    case DType::Other: break;
  }
  throw std::runtime_error("lazyjit: no ATen dtype for " + std::string(ir::dtype_name(t)));
}

DType from_aten(at::ScalarType t) {
  switch (t) {
    case at::kBool: return DType::Bool;
    case at::kByte: return DType::UInt8;
    case at::kChar: return DType::Int8;
    case at::kShort: return DType::Int16;
    case at::kInt: return DType::Int32;
    case at::kLong: return DType::Int64;
    case at::kHalf: return DType::Float16;
    case at::kBFloat16: return DType::BFloat16;
    case at::kFloat: return DType::Float32;
    case at::kDouble: return DType::Float64;
    case at::kComplexFloat: return DType::Complex64;
    case at::kComplexDouble: return DType::Complex128;
    default: return DType::Other;
  }
}

c10::Scalar scalar_from_slot(int64_t slot, DType dtype) {
  if (ir::is_floating(dtype)) {
    double d;
    std::memcpy(&d, &slot, sizeof d);
    return d;
  }
  if (dtype == DType::Bool) return slot != 0;
  return slot;
}

int64_t slot_from_scalar(const c10::Scalar& s) {
  if (s.isFloatingPoint()) {
    double d = s.toDouble();
    int64_t slot;
    std::memcpy(&slot, &d, sizeof slot);
    return slot;
  }
  if (s.isBoolean()) return s.toBool() ? 1 : 0;
  if (s.isIntegral(false)) return s.toLong();
  throw std::runtime_error("lazyjit: complex and symbolic scalars are not supported yet");
}

}  // namespace lazyjit::bridge
