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
  // (output index, input index): the caller's new value of a tensor whose old
  // value is the input and which nothing else holds (the device's in-place
  // updates: an optimizer step's parameters and state). Executable::run(b,
  // threads) stores each such output into the input's memory where the
  // program allows it (can_store_into_input) and no other input shares that
  // memory; other runs, and op-by-op plans, ignore them.
  std::vector<std::pair<size_t, size_t>> may_overwrite;
  // Op-by-op plans' may_overwrite, resolved by Executable::run: after step
  // `first`, the value's result is copied into the tensor (an input no later
  // step reads), which holds the value from then on, and its buffer freed; in
  // step order.
  std::vector<std::pair<size_t, std::pair<ir::ValueId, at::Tensor>>> copies;
  // With copies: each such input from the step of its last reader on (that
  // step included; in step order). Its memory is the caller's no more: steps
  // may compute results in it (op_by_op_thunk.cpp), as eager's in-place ops
  // compute an optimizer's update in the parameter; the copy into it is then
  // left out when the value is there already, or while a value there is
  // still read (the output keeps a buffer of its own).
  std::vector<std::pair<size_t, at::Tensor>> released;
};

}  // namespace lazyjit::executor
