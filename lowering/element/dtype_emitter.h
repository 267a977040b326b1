// How each lowerable DType lives in LLVM registers and memory, and the
// conversions between them (shared by the CPU and CUDA targets). Stateless:
// functions of an IRBuilder.
#pragma once
#include <stdexcept>
#include <string>

#include <llvm/IR/IRBuilder.h>

#include "graph_ir/graph.h"

namespace lazyjit::lowering::element {

using ir::DType;
using ir::OpKind;
using ir::ValueId;
using llvm::Value;
using Builder = llvm::IRBuilder<>;

[[noreturn]] inline void unsupported(const std::string& what) { throw std::runtime_error(what); }

inline bool is_unsigned(DType t) { return t == DType::UInt8 || t == DType::Bool; }

inline int64_t attr_i64(const ir::Node& n, size_t i) {
  if (i < n.attrs.size())
    if (auto* v = std::get_if<int64_t>(&n.attrs[i].value)) return *v;
  unsupported(std::string(ir::op_name(n.kind)) + ": attr " + std::to_string(i) + " is not an int64");
}

// A value in registers: the LLVM value and the dtype it represents. Registers
// hold i1 for bool, `half` for float16 and a float holding an exact bf16 for
// bfloat16; memory holds one byte per bool and i16 per bf16.
struct TV {
  Value* v;
  DType t;
};

// Throws for a dtype that is not lowerable.
llvm::Type* reg_type(Builder& b, DType t);
llvm::Type* mem_type(Builder& b, DType t);

// Round a float to the nearest-even bf16, kept as a float (ATen's round_to_nearest_even).
Value* round_bf16(Builder& b, Value* f);

// x as dtype `to`, with c10's conversion rules.
Value* convert(Builder& b, TV x, DType to);

// Between the register and the memory form of dtype t.
Value* to_memory(Builder& b, Value* v, DType t);
Value* from_memory(Builder& b, Value* v, DType t);

}  // namespace lazyjit::lowering::element
