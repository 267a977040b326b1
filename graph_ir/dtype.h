// Element types of graph values. graph_ir knows neither libtorch nor LLVM, so it
// has its own enum; tracer/ maps c10::ScalarType onto it and back.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace lazyjit::ir {

enum class DType : uint8_t {
  Bool, UInt8, Int8, Int16, Int32, Int64, Float16, BFloat16, Float32, Float64,
  Complex64, Complex128,  // carried through ATen steps only; never lowered
  Other,                  // any other ScalarType: carried through ATen steps only
};

// What lazyjit knows of an element type: one row per DType, the one table
// (graph_ir/dtype.cpp's names, sizes and the passes' exact-widening rule all
// read it).
struct DTypeInfo {
  enum class Kind : uint8_t { Bool, Unsigned, Signed, Float, Complex, Other };
  std::string_view name;  // "f32": the IR text and cache manifests
  int64_t size;           // bytes per element; 0 for Other
  Kind kind;
  // Unsigned/Signed: value bits (the sign excluded); Float: significand bits,
  // so integers up to 2^bits are held exactly; 0 otherwise.
  int bits;
  int exponent_bits;  // Float only
};
inline constexpr DTypeInfo kDTypeInfo[] = {
    {"bool", 1, DTypeInfo::Kind::Bool, 0, 0},      {"u8", 1, DTypeInfo::Kind::Unsigned, 8, 0},
    {"i8", 1, DTypeInfo::Kind::Signed, 7, 0},      {"i16", 2, DTypeInfo::Kind::Signed, 15, 0},
    {"i32", 4, DTypeInfo::Kind::Signed, 31, 0},    {"i64", 8, DTypeInfo::Kind::Signed, 63, 0},
    {"f16", 2, DTypeInfo::Kind::Float, 11, 5},     {"bf16", 2, DTypeInfo::Kind::Float, 8, 8},
    {"f32", 4, DTypeInfo::Kind::Float, 24, 8},     {"f64", 8, DTypeInfo::Kind::Float, 53, 11},
    {"c64", 8, DTypeInfo::Kind::Complex, 0, 0},    {"c128", 16, DTypeInfo::Kind::Complex, 0, 0},
    {"other", 0, DTypeInfo::Kind::Other, 0, 0},
};
static_assert(sizeof(kDTypeInfo) / sizeof(kDTypeInfo[0]) == static_cast<size_t>(DType::Other) + 1,
              "one row of kDTypeInfo per DType, in the enum's order");
constexpr const DTypeInfo& dtype_info(DType t) { return kDTypeInfo[static_cast<uint8_t>(t)]; }

inline int64_t element_size(DType t) { return dtype_info(t).size; }
inline std::string_view dtype_name(DType t) { return dtype_info(t).name; }
inline bool is_floating(DType t) { return dtype_info(t).kind == DTypeInfo::Kind::Float; }
inline bool is_integral(DType t, bool include_bool) {
  DTypeInfo::Kind k = dtype_info(t).kind;
  return (include_bool && k == DTypeInfo::Kind::Bool) || k == DTypeInfo::Kind::Unsigned || k == DTypeInfo::Kind::Signed;
}
inline bool is_signed_integral(DType t) { return dtype_info(t).kind == DTypeInfo::Kind::Signed; }

// Every value of dtype `from` survives a round trip through `to` unchanged.
bool widens_exactly(DType from, DType to);

// The dtype arithmetic on `t` runs in (ATen's "opmath"): float16 and bfloat16
// compute in float32 and are rounded once, when the result is converted back;
// every other dtype computes in itself. The one statement of this rule: the
// tracer's compute dtypes and the codegen's register arithmetic must agree.
inline DType opmath_dtype(DType t) {
  return t == DType::Float16 || t == DType::BFloat16 ? DType::Float32 : t;
}

}  // namespace lazyjit::ir
