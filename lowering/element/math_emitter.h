// Elementwise math on LLVM values of one compute dtype (shared by the CPU and
// CUDA targets): float and int unary/binary ops, ATen's special cases, and calls into
// libm/libmvec. Stateless: functions of an IRBuilder, or of a MathContext where
// the choice depends on the target and the codegen options.
#pragma once
#include <string>
#include <unordered_set>

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/Module.h>

#include "lowering/target.h"
#include "lowering/element/dtype_emitter.h"

namespace lazyjit::lowering::element {

struct MathContext {
  Builder& b;
  llvm::Module& m;
  const CodegenOptions& opts;
  // Only when the JIT can resolve glibc's libmvec may the optimizer call it (CPU).
  bool libmvec = false;
  bool avx2 = false, avx512 = false;  // the target's vector ISAs
  // Vector variants this kernel declared (each is added to llvm.compiler.used once).
  std::unordered_set<std::string>& declared;
};

inline Value* fconst(Value* like, double c) { return llvm::ConstantFP::get(like->getType(), c); }
inline Value* intrinsic(Builder& b, llvm::Intrinsic::ID id, Value* x) {
  return b.CreateUnaryIntrinsic(id, x);
}

// libm functions without an LLVM intrinsic. Declared as pure so that the loop
// vectorizer may widen them, onto libmvec's variants when it is available.
Value* libm(const MathContext& c, const char* name, Value* x);

// exp/log/sin/cos: LLVM's own libmvec table maps the intrinsic onto 128- and
// 256-bit variants only; with 512-bit vectors the call names all three.
Value* math(const MathContext& c, const char* name, llvm::Intrinsic::ID id, Value* x);

// float32 tanh as the rational approximation Eigen and XLA use (13/6 odd/even
// polynomials on [-7.9, 7.9], x itself below 4e-4): a few ulp, branch-free and
// vectorized inline; glibc's vector tanhf costs ~15 cycles an element.
// float64 keeps libm.
Value* tanh(const MathContext& c, Value* x);

// x ** y for a loop-invariant y, with ATen's CPU special cases: 2 -> x*x,
// 3 -> x*x*x, -2 -> 1/(x*x), -1 -> 1/x, 0.5 -> sqrt (so pow(-inf, 0.5) is
// nan, as in eager), -0.5 -> rsqrt; else pow. LLVM unswitches the branches out
// of the loop and each version vectorizes (powf costs ~20x a multiply). Adds
// blocks to the insert point's function.
Value* pow_by_scalar(Builder& b, Value* x, Value* y);

// Ops of a floating compute dtype.
Value* unary_float(const MathContext& c, OpKind k, Value* x);
Value* binary_float(Builder& b, OpKind k, Value* a, Value* y);

// Ops of an integral or bool compute dtype `ct`.
Value* unary_int(Builder& b, OpKind k, Value* x, DType ct);
Value* binary_int(Builder& b, OpKind k, Value* a, Value* y, DType ct);

}  // namespace lazyjit::lowering::element
