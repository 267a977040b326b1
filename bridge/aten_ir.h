// The one bridge between ATen's and lazyjit's IR vocabularies: dtypes, and the
// 64-bit slots that carry scalar arguments into programs. Shared by the tracer
// (recording) and the executor (running), so both agree on every conversion.
//
// Depends on graph_ir and libtorch's core headers only.
#pragma once
#include <ATen/core/Tensor.h>
#include <c10/core/Scalar.h>

#include <cstdint>

#include "graph_ir/dtype.h"

namespace lazyjit::bridge {

at::ScalarType to_aten(ir::DType t);  // throws for DType::Other
ir::DType from_aten(at::ScalarType t);  // DType::Other when lazyjit has no name for it

// A scalar argument slot: a double's bits for floating dtypes, an int64 (or 0/1)
// otherwise. Throws for complex and symbolic scalars.
int64_t slot_from_scalar(const c10::Scalar& s);
// Reads a slot back as the c10::Scalar it was recorded from.
c10::Scalar scalar_from_slot(int64_t slot, ir::DType dtype);

}  // namespace lazyjit::bridge
