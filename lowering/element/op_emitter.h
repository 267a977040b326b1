// One graph node as LLVM values (shared by the CPU and CUDA targets): picks
// the compute dtype (ir::opmath_dtype), converts operands to it and dispatches to
// math_emitter.h; plus the combining step and identity of row reductions.
// Stateless: operands come through callbacks, so the loop emitter decides where
// they live (registers, loads, scratch) and when they are loaded.
#pragma once
#include <functional>

#include "lowering/element/math_emitter.h"
#include "lowering/plan.h"

namespace lazyjit::lowering::element {

struct OperandSource {
  // The value `v` as the node sees it (computed, loaded, or a scalar argument).
  std::function<TV(ValueId v)> value;
  // Whether `v` is a scalar argument of the kernel (loop-invariant).
  std::function<bool(ValueId v)> is_scalar_argument;
};

// An elementwise node's result in its compute dtype (ir::opmath_dtype of its
// attr 0), or bool for predicates; the caller converts it to the output dtype.
TV emit_elementwise(const MathContext& c, const ir::Node& n, const OperandSource& in);

// Node `n` of kernel `k` in its output dtype: a Cat is its operand `cat_piece`
// (0 when `k` has no cat dim), read through that piece's own (shifted) load,
// `load(index into k.loads)`; any other node is emit_elementwise, made wrong by
// inject_fault when the options ask. What both targets' emitters compute per node.
TV emit_node(const MathContext& c, const ir::Graph& g, const ir::Node& n, const FusedKernel& k, size_t cat_piece,
             const std::function<TV(int32_t load)>& load, const OperandSource& in);

// Plan::check_stores: for `v`, a float32/float64 value in its memory form about
// to be stored, ORs "it is NaN or Inf" into the i8 `flag`, an entry-block alloca
// of `fn` made (zeroed) on first use; other dtypes are never checked. Integer
// ops, so no fast-math flag folds it away, and an OR the vectorizer widens.
void note_nonfinite(Builder& b, llvm::Function* fn, llvm::AllocaInst*& flag, Value* v, DType t);

// `r`, the result of a node of kind `k`, made wrong when the options ask for a
// fault in that kind (CodegenOptions::fault, tests of LAZYJIT_CHECK); else `r`.
TV inject_fault(const MathContext& c, OpKind k, TV r);

// A reduction's starting accumulator, in register type of its accumulate dtype
// `at`: 0, or the lowest/highest value for max/min (-inf/+inf for floats).
Value* reduction_identity(Builder& b, OpKind k, DType at);

// acc (op) x for reduction `k` in dtype `at`. Only the float sum is
// reassociable (so that it vectorizes; signed zeros are kept, so a sum of
// -0.0s is +0.0 as in eager); max/min use llvm.maximum/minimum, which
// propagate NaN.
Value* reduction_step(Builder& b, OpKind k, Value* acc, Value* x, DType at);

}  // namespace lazyjit::lowering::element
