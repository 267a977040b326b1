// A run that shows every value it computed: what the op hooks with lazy=True
// (tracer/lazyjit.h), the per-op timing table (LAZYJIT_DEBUG=4) and the
// compiled-vs-eager check (LAZYJIT_CHECK, runtime/debug_runs/graph_check.h) look at.
//
// The traced graph is compiled with every node's result as an output (so fused
// kernels store what they would keep in registers; the same passes, fusion and
// kernels otherwise), run with each step timed, and each traced node is tied to
// the step that computed it through the outputs, which the passes keep in order.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "graph_ir/graph.h"

namespace lazyjit::runtime {

struct ObservedRun {
  const ir::Graph* graph = nullptr;  // the traced graph (as given to Runtime::run)
  // Per value of `graph`: inputs as bound, scalars as 0-d tensors, every node's
  // result as the program computed it (CPU, dense); undefined when its step
  // failed or depends on one that did.
  std::vector<at::Tensor> values;
  std::vector<int32_t> step;            // per node of `graph`: the step that computed it, -1 for none
  std::vector<double> step_ms;          // per program step: wall time
  std::vector<std::string> step_name;   // per program step: "fused_2", "aten::mm", "as_strided", ...
  std::vector<std::string> step_ops;    // per program step: a kernel's ops, "mul, add, exp"; else ""
  std::vector<bool> step_is_kernel;     // per program step: generated code (else ATen or a view)
};
using RunObserver = std::function<void(const ObservedRun&)>;

}  // namespace lazyjit::runtime
