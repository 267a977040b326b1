// What one run of a program is given: its inputs, scalar arguments and the
// tensors kernels may store into (executable.h).
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "graph_ir/graph.h"

namespace lazyjit::executor {

struct Bindings {
  std::vector<at::Tensor> inputs;   // by input index; dense, with the declared strides
  std::vector<int64_t> scalars;     // by argument index: a double's bits or an int64 (bridge/aten_ir.h)
  // Kernel results stored into these tensors instead of new buffers (each
  // contiguous, of the value's type; one that is not gets a new buffer): an
  // input's memory, where can_store_into_input (store_in_place.h) allows it.
  std::vector<std::pair<ir::ValueId, at::Tensor>> into;
};

}  // namespace lazyjit::executor
