// One graph node run by ATen's own operators, without generated code: how a
// program runs op by op (lowering::plan_eager, Step::Kind::Eager). Computes as
// op_kind.h defines: operands cast to the node's compute dtype (attr 0), the op,
// the result cast to the output dtype. Used where compiling is not wanted (the
// recompile budget's eager stance, LAZYJIT_ON_RECOMPILE_LIMIT=eager).
#pragma once
#include <ATen/core/Tensor.h>

#include <vector>

#include "graph_ir/graph.h"

namespace lazyjit::executor {

// Computes node `n` (elementwise, reduction or Full) into env[n.outputs[0]],
// reading operands from `env`, Scalar operands from `scalars`. Throws
// std::runtime_error for other kinds.
void run_eager_node(const ir::Graph& g, const ir::Node& n, std::vector<at::Tensor>& env,
                    const std::vector<int64_t>& scalars);

}  // namespace lazyjit::executor
