#include "graph_ir/op_kind.h"

namespace lazyjit::ir {

std::string_view op_name(OpKind k) {
  switch (k) {
    case OpKind::Input: return "input";
    case OpKind::Scalar: return "scalar";
    case OpKind::Full: return "full";
    case OpKind::AsStrided: return "as_strided";
    case OpKind::AsStridedScatter: return "as_strided_scatter";
#define LAZYJIT_CASE(name, str) case OpKind::name: return str;
    LAZYJIT_FORALL_UNARY_OPS(LAZYJIT_CASE)
    LAZYJIT_FORALL_BINARY_OPS(LAZYJIT_CASE)
#undef LAZYJIT_CASE
    case OpKind::Where: return "where";
    case OpKind::Clamp: return "clamp";
    case OpKind::ReduceSum: return "reduce_sum";
    case OpKind::ReduceMax: return "reduce_max";
    case OpKind::ReduceMin: return "reduce_min";
    case OpKind::Aten: return "aten";
    case OpKind::Fma: return "fma";
    case OpKind::Cat: return "cat";
  }
  return "?";
}

bool is_unary(OpKind k) {
  switch (k) {
#define LAZYJIT_CASE(name, str) case OpKind::name:
    LAZYJIT_FORALL_UNARY_OPS(LAZYJIT_CASE)
#undef LAZYJIT_CASE
    return true;
    default: return false;
  }
}

bool is_binary(OpKind k) {
  switch (k) {
#define LAZYJIT_CASE(name, str) case OpKind::name:
    LAZYJIT_FORALL_BINARY_OPS(LAZYJIT_CASE)
#undef LAZYJIT_CASE
    return true;
    default: return false;
  }
}

bool is_elementwise(OpKind k) {
  return is_unary(k) || is_binary(k) || is_ternary(k) || k == OpKind::Full || k == OpKind::Cat;
}

bool is_ternary(OpKind k) { return k == OpKind::Where || k == OpKind::Clamp || k == OpKind::Fma; }

bool is_reduction(OpKind k) {
  return k == OpKind::ReduceSum || k == OpKind::ReduceMax || k == OpKind::ReduceMin;
}

bool is_predicate(OpKind k) {
  switch (k) {
    case OpKind::Eq: case OpKind::Ne: case OpKind::Lt: case OpKind::Le:
    case OpKind::Gt: case OpKind::Ge: case OpKind::LogicalAnd: case OpKind::LogicalOr:
    case OpKind::LogicalNot:
      return true;
    default: return false;
  }
}

}  // namespace lazyjit::ir
