// The operations of the graph IR and what each one means.
//
// Semantics every op shares:
//  - Every value is a dense tensor: its strides are a permutation of a contiguous
//    layout (non-overlapping, no gaps), so its elements are exactly `numel` slots
//    of one buffer. AsStrided reads those slots as flat memory.
//  - Elementwise ops broadcast their operands to the node's output sizes with
//    NumPy rules and compute in the node's `compute` dtype (attr 0), then cast to
//    the output dtype. Integer overflow wraps; float ops follow IEEE-754 like ATen.
//  - Scalar values are 0-d program arguments: their value is never part of a
//    hash, so a changing learning rate does not recompile.
#pragma once
#include <cstdint>
#include <string_view>

namespace lazyjit::ir {

#define LAZYJIT_FORALL_UNARY_OPS(_) \
  _(Abs, "abs") _(Neg, "neg") _(Exp, "exp") _(Log, "log") _(Sqrt, "sqrt")          \
  _(Rsqrt, "rsqrt") _(Tanh, "tanh") _(Sigmoid, "sigmoid") _(Relu, "relu")          \
  _(Gelu, "gelu") _(GeluTanh, "gelu_tanh") _(Silu, "silu") _(Reciprocal, "reciprocal") \
  _(Sin, "sin") _(Cos, "cos") _(Log1p, "log1p") _(Expm1, "expm1") _(Erf, "erf")    \
  _(LogicalNot, "logical_not") _(Cast, "cast")

#define LAZYJIT_FORALL_BINARY_OPS(_) \
  _(Add, "add") _(Sub, "sub") _(Mul, "mul") _(Div, "div") _(DivTrunc, "div_trunc") \
  _(DivFloor, "div_floor") _(Remainder, "remainder") _(Pow, "pow")                  \
  _(Maximum, "maximum") _(Minimum, "minimum") _(Eq, "eq") _(Ne, "ne") _(Lt, "lt")    \
  _(Le, "le") _(Gt, "gt") _(Ge, "ge") _(LogicalAnd, "logical_and")                   \
  _(LogicalOr, "logical_or") _(BitAnd, "bitwise_and") _(BitOr, "bitwise_or")         \
  _(BitXor, "bitwise_xor")

enum class OpKind : uint16_t {
  Input,             // a graph input buffer, numbered by first use (attr 0: input index)
  Scalar,            // a 0-d runtime argument (attr 0: argument index)
  Full,              // output filled with scalar operand 0, cast to the output dtype
  AsStrided,         // view of operand 0's flat slots: attrs sizes, strides, offset
  AsStridedScatter,  // operand 0 with the view (attrs as AsStrided) replaced by operand 1
#define LAZYJIT_ENUM(name, str) name,
  LAZYJIT_FORALL_UNARY_OPS(LAZYJIT_ENUM)
  LAZYJIT_FORALL_BINARY_OPS(LAZYJIT_ENUM)
#undef LAZYJIT_ENUM
  Where,             // operands: condition, then, else
  Clamp,             // operands: x, min, max; attr 1: bit 0 = has min, bit 1 = has max
  // Reductions over the trailing dims of operand 0, keeping them as size 1.
  // attr 0: accumulate dtype (f32 for f16/bf16/f32, f64, i64 for integers);
  // attr 1: the reduced dims (int list, sorted, the last k dims of the operand).
  // ReduceMax/Min propagate NaN like torch.amax/amin. Empty rows give 0 (sum),
  // -inf/+inf (max/min) for floats.
  ReduceSum,
  ReduceMax,
  ReduceMin,
  Aten,              // any ATen op, run by its library kernel. attr 0: schema name;
                     // attrs 1..n: one per schema argument (see AttrValue)
  Fma,               // operands a, b, c: a * b + c rounded once (floats), as ATen's
                     // CPU kernels compute add/sub with alpha, addcmul and lerp
  Cat,               // operands joined along dim attr 1 (torch.cat), in order. Not
                     // broadcast: each operand has the output's rank and sizes except
                     // along that dim, where it has >= 1 elements; all have the
                     // output's dtype. Attr 0: compute dtype (the output's).
};
// The highest kind: new kinds go last, so stored graphs keep their numbers.
inline constexpr OpKind kLastOpKind = OpKind::Cat;

std::string_view op_name(OpKind k);
bool is_unary(OpKind k);
bool is_binary(OpKind k);
// Elementwise ops can be fused into one loop nest. Cat counts: each output
// element is one operand element (at an index shifted along the cat dim).
bool is_elementwise(OpKind k);
// Trailing-dim reductions (fused with elementwise producers and consumers).
bool is_reduction(OpKind k);
// Comparison and logical ops: bool output, computed in the promoted input dtype.
bool is_predicate(OpKind k);
// Elementwise ops of three operands (Where, Clamp, Fma).
bool is_ternary(OpKind k);

}  // namespace lazyjit::ir
