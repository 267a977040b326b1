// Output geometry for the ops that dominate real models (pointwise ops,
// native_layer_norm, addmm/mm, gelu, triu/tril, masked_fill, softmax, var/var_mean,
// the CPU flash attention), computed natively
// instead of by running their meta kernels: in torch 2.x many of those are
// Python (torch._refs / torch._prims / torch._decomp), 100-3000 us each, and the
// first one imports torch._dynamo. With a new shape every call the memo in
// meta_inference misses every time, so this is the per-call cost of tracing.
//
// Only plain cases take it (contiguous inputs, common dtypes, valid shapes): for
// anything else it declines and the meta kernel runs, so correctness never
// depends on its being complete. When it answers, its result is eager's
// (at::result_type, broadcasting, TensorIterator's contiguous layout).
#pragma once
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

namespace lazyjit::tracer {

// `args`: the op's arguments (lazyjit or 0-d CPU tensors, scalars). On success
// pushes the op's returns, as meta tensors, onto `*rets` and returns true;
// returns false (leaving `*rets` empty) to have the caller run the meta kernel.
bool meta_fast_path(const c10::OperatorHandle& op, const torch::jit::Stack& args, torch::jit::Stack* rets);

}  // namespace lazyjit::tracer
