// One graph node run by ATen's own operators, without generated code: how a
// program runs op by op (lowering::plan_op_by_op, Step::Kind::OpByOp). Computes as
// op_kind.h defines: operands cast to the node's compute dtype (attr 0), the op,
// the result cast to the output dtype. Used where compiling is not wanted (the
// recompile budget's op_by_op stance, LAZYJIT_ON_RECOMPILE_LIMIT=op_by_op).
#pragma once
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <vector>

#include "graph_ir/graph.h"
#include "lowering/op_by_op_groups.h"

namespace lazyjit::executor {

// Computes node `n` (elementwise, reduction or Full) into env[n.outputs[0]],
// reading operands from `env`, Scalar operands from `scalars`; a Full is made
// on `device`. Throws std::runtime_error for other kinds.
void run_op_by_op_node(const ir::Graph& g, const ir::Node& n, std::vector<at::Tensor>& env,
                       const std::vector<int64_t>& scalars, c10::Device device);

// Computes a layer norm the tracer decomposed as ATen's native_layer_norm (as
// eager ran it) into env[ln.out], env[ln.mean], env[ln.rstd]; node by node
// when its 1/n scalar is not 1 / (elements normalized).
void run_op_by_op_layer_norm(const ir::Graph& g, const lowering::OpByOpLayerNorm& ln, std::vector<at::Tensor>& env,
                             const std::vector<int64_t>& scalars, c10::Device device);

}  // namespace lazyjit::executor
