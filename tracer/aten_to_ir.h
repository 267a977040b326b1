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

namespace lazyjit::tracer {

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
