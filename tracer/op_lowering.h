// How ATen ops become graph nodes: elementwise ops the codegen handles, and
// reductions / softmax / layer_norm built from row reductions (op_lowering.cpp);
// the ops every device implements itself: empty, copies, item, resize, fills,
// and random draws made at trace time (device_ops.cpp).
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

bool is_special_op(const std::string& name);
// Handles `name` on the stack; false when it is not a special op (or not this case).
bool special_op(const std::string& name, torch::jit::Stack* stack);
bool draw_at_trace_time(const c10::OperatorHandle& op, const std::string& name, torch::jit::Stack* stack);
// Whether draw_at_trace_time can handle `name` at all (callers ask once per op).
bool may_draw_at_trace_time(const std::string& name);

}  // namespace lazyjit::tracer
