#include "graph_ir/dtype.h"

namespace lazyjit::ir {

int64_t element_size(DType t) {
  switch (t) {
    case DType::Bool: case DType::UInt8: case DType::Int8: return 1;
    case DType::Int16: case DType::Float16: case DType::BFloat16: return 2;
    case DType::Int32: case DType::Float32: return 4;
    case DType::Int64: case DType::Float64: case DType::Complex64: return 8;
    case DType::Complex128: return 16;
    case DType::Other: return 0;
  }
  return 0;
}

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::Bool: return "bool";
    case DType::UInt8: return "u8";
    case DType::Int8: return "i8";
    case DType::Int16: return "i16";
    case DType::Int32: return "i32";
    case DType::Int64: return "i64";
    case DType::Float16: return "f16";
    case DType::BFloat16: return "bf16";
    case DType::Float32: return "f32";
    case DType::Float64: return "f64";
    case DType::Complex64: return "c64";
    case DType::Complex128: return "c128";
    case DType::Other: return "other";
  }
  return "?";
}

}  // namespace lazyjit::ir
