// The generic rung of the recording ladder: any op with a meta kernel becomes
// one Aten node, which the executor runs through the op's ATen kernel.
#pragma once
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

namespace lazyjit::tracer {

struct OpInfo;

// Records `op` (`info` is op_info(op), which the caller has) as one Aten node: tensors become operands, numbers
// runtime scalars, everything else attributes. Mutated arguments get the node's
// new values (resized as the meta kernel resized them); the results, or the
// arguments they alias, are pushed onto `out`. `meta_args` and `meta_rets` are
// infer_meta's. Throws on an argument kind it cannot record.
void record_aten(const c10::OperatorHandle& op, const OpInfo& info, const torch::jit::Stack& args,
                 const torch::jit::Stack& meta_args, const torch::jit::Stack& meta_rets, torch::jit::Stack* out);

}  // namespace lazyjit::tracer
