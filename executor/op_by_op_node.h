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
// on `device`. Throws std::runtime_error for other kinds. With `into` (only
// where may_compute_into_operand): an operand's buffer that no later step
// reads, with the output's dtype and layout; the result is computed there, as
// eager's in-place ops compute, instead of in a new buffer. Operands that are
// broadcasts (stride-0 dims) are read as what they repeat; with `broadcast`
// (only op-by-op node steps read the value) a result smaller than the value's
// sizes stays a broadcast: a stride-0 view, not the declared layout.
void run_op_by_op_node(const ir::Graph& g, const ir::Node& n, std::vector<at::Tensor>& env,
                       const std::vector<int64_t>& scalars, c10::Device device, at::Tensor into = {},
                       bool broadcast = false);

// Whether node `n` is elementwise and computed in its output's dtype: its
// result may go to an operand's buffer (run_op_by_op_node's `into`).
bool may_compute_into_operand(const ir::Graph& g, const ir::Node& n);

// Computes a layer norm the tracer decomposed as ATen's native_layer_norm (as
// eager ran it) into env[ln.out], env[ln.mean], env[ln.rstd]; node by node
// when its 1/n scalar is not 1 / (elements normalized).
void run_op_by_op_layer_norm(const ir::Graph& g, const lowering::OpByOpLayerNorm& ln, std::vector<at::Tensor>& env,
                             const std::vector<int64_t>& scalars, c10::Device device);

}  // namespace lazyjit::executor
