// Element types of graph values. graph_ir knows neither libtorch nor LLVM, so it
// has its own enum; tracer/ maps c10::ScalarType onto it and back.
#pragma once
#include <cstdint>
#include <string_view>

namespace lazyjit::ir {

enum class DType : uint8_t {
  Bool, UInt8, Int8, Int16, Int32, Int64, Float16, BFloat16, Float32, Float64,
  Complex64, Complex128,  // carried through ATen steps only; never lowered
  Other,                  // any other ScalarType: carried through ATen steps only
};

int64_t element_size(DType t);
std::string_view dtype_name(DType t);
inline bool is_floating(DType t) {
  return t == DType::Float16 || t == DType::BFloat16 || t == DType::Float32 || t == DType::Float64;
}
inline bool is_integral(DType t, bool include_bool) {
  return (include_bool && t == DType::Bool) || t == DType::UInt8 || t == DType::Int8 ||
         t == DType::Int16 || t == DType::Int32 || t == DType::Int64;
}
inline bool is_signed_integral(DType t) {
  return t == DType::Int8 || t == DType::Int16 || t == DType::Int32 || t == DType::Int64;
}

// The dtype arithmetic on `t` runs in (ATen's "opmath"): float16 and bfloat16
// compute in float32 and are rounded once, when the result is converted back;
// every other dtype computes in itself. The one statement of this rule: the
// tracer's compute dtypes and the codegen's register arithmetic must agree.
inline DType opmath_dtype(DType t) {
  return t == DType::Float16 || t == DType::BFloat16 ? DType::Float32 : t;
}

}  // namespace lazyjit::ir
