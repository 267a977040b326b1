// Values in the executor are CPU tensors with exactly the layout their IR type
// declares; these helpers keep it so.
#pragma once
#include <ATen/core/Tensor.h>

#include "graph_ir/graph.h"

namespace lazyjit::executor {

// `t` itself when it carries `type`'s sizes and strides, else a copy that does.
at::Tensor with_layout(const at::Tensor& t, const ir::TensorType& type);

}  // namespace lazyjit::executor
