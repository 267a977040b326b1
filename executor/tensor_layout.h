// Values in the executor are CPU tensors with exactly the layout their IR type
// declares, except a view step's result, which is the view itself (its
// as_strided strides: for a view the tracer read for an ATen step, also its
// declared ones). Every step takes what it reads through with_layout.
#pragma once
#include <ATen/core/Tensor.h>

#include "graph_ir/graph.h"

namespace lazyjit::executor {

// `t` itself when it carries `type`'s sizes and strides, else a copy that does.
at::Tensor with_layout(const at::Tensor& t, const ir::TensorType& type);

}  // namespace lazyjit::executor
