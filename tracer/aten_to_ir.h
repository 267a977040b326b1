// ATen ops as IR nodes: elementwise ops the codegen handles, and reductions,
// softmax and layer_norm built from row reductions. What the op becomes at run
// time is lowering's business (lowering/); this only builds graph nodes.
#pragma once
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <string>
#include <vector>

#include "graph_ir/graph.h"
#include "tracer/meta_inference.h"
#include "tracer/op_info.h"

namespace lazyjit::tracer {

// Rungs of the recording ladder (record_op.cpp), each given the op's arguments
// and infer_meta's result.
//
// A view op: results are new TensorImpls over their base's storage, no node.
// False, having done nothing, when the meta results do not alias the arguments
// the schema says. Otherwise the op's arguments on `stack` are replaced by its
// results.
bool record_view(const c10::OperatorHandle& op, const torch::jit::Stack& args, const MetaResult& meta,
                 torch::jit::Stack* stack);
// Elementwise, pointwise-composite, reduction and elementwise-.out ops as IR
// nodes, their results pushed onto `out`; false, recording nothing, for others.
bool record_ir_nodes(const OpInfo& info, const torch::jit::Stack& args, const MetaResult& meta,
                     torch::jit::Stack* out);

// Each records `fname` (the functional form of the op) and pushes its results
// onto `out`, or returns false having recorded nothing.
bool try_elementwise(const std::string& fname, bool inplace, const torch::jit::Stack& args,
                     const std::vector<at::Tensor>& meta_outs, const torch::jit::Stack& meta_args,
                     torch::jit::Stack* out);
// `aten::X.out(..., out=o)` of an elementwise op: its node written into `o`.
bool try_elementwise_out(const std::string& fname, const torch::jit::Stack& args,
                         const std::vector<at::Tensor>& meta_outs, const torch::jit::Stack& meta_args,
                         torch::jit::Stack* out);
// addcmul / addcdiv / lerp as elementwise nodes; `mo` is the result's meta tensor.
bool try_pointwise_composite(const std::string& fname, bool inplace, const torch::jit::Stack& args,
                             const at::Tensor& mo, torch::jit::Stack* out);
// gelu_backward and mse_loss_backward as elementwise nodes, mse_loss and the
// backward of softmax and log_softmax over the last dim as row reductions
// (backward_ops.cpp).
bool try_training_op(const std::string& fname, const torch::jit::Stack& args, const at::Tensor& mo,
                     torch::jit::Stack* out);
// Whether try_training_op handles `fname` at all (callers ask once per op).
bool is_training_op_name(const std::string& fname);
bool try_reduction(const std::string& fname, const torch::jit::Stack& args,
                   const std::vector<at::Tensor>& meta_outs, torch::jit::Stack* out);
// Whether try_reduction handles `fname` at all (callers ask once per op).
bool is_reduction_name(const std::string& fname);

// "aten::add_.Tensor" -> "aten::add.Tensor", with *inplace = true.
std::string functional_name(const std::string& name, bool* inplace);
// Half types compute in float32.
ir::DType compute_dtype_for(ir::DType t);
ir::TensorType contiguous_type(const at::Tensor& m);

}  // namespace lazyjit::tracer
