// Shapes, dtypes and PyTorch's own argument errors for an op, from running it on
// meta tensors of its arguments' geometry. Meta kernels cost 5-100 us (many are
// Python decompositions), so results are memoized.
#pragma once
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <vector>

namespace lazyjit::tracer {

struct MetaResult {
  torch::jit::Stack args;        // meta arguments after the call (mutated ones resized)
  torch::jit::Stack rets;
  std::vector<at::Tensor> outs;  // the tensors among rets, flattened
  // The op's CPU kernel, run on one-element tensors of the arguments' dtypes,
  // raised a dtype error ("not implemented for 'Float'", "result type Float
  // can't be cast to ..."): checks meta kernels do not make.
  bool dtype_error = false;
};

// Runs `op` on meta versions of `args` (the op's arguments, lazyjit or 0-d CPU
// tensors), or returns the memoized result of an identical earlier call without
// copying it. A result that cannot be memoized is stored in `*scratch`. Returns
// nullptr when the op has no usable meta kernel (none, or one that needs data).
// Call with the trace lock held; the result stays valid until the next call.
const MetaResult* infer_meta(const c10::OperatorHandle& op, const torch::jit::Stack& args, MetaResult* scratch);

}  // namespace lazyjit::tracer
