// NaN and Inf pinned to the op that made them (LAZYJIT_DEBUG_NANS=1,
// lazyjit.debug_nans(True)). After each run the outputs are checked (one pass
// over each floating output); when one holds a NaN or Inf, the graph is run
// again op by op through ATen (lowering::plan_op_by_op) on the same inputs, every
// value kept, and the first node whose result holds one is reported with its
// operands' statistics. The caller adds the op's call site.
#pragma once
#include <ATen/core/Tensor.h>

#include <functional>
#include <string>
#include <vector>

#include "executor/executable.h"
#include "graph_ir/graph.h"

namespace lazyjit::runtime {

// Whether `t` (floating or complex) holds a NaN or an Inf.
bool has_nonfinite(const at::Tensor& t);
// Whether one of `ts` does: one pass over all of them (the outputs of a sync).
bool any_nonfinite(const std::vector<at::Tensor>& ts);

// "[4, 8] Float: min -2, max 1.9, mean -0.05, 3 NaN, 0 Inf" (over its finite elements).
std::string tensor_stats(const at::Tensor& t);

// What the op-by-op run of `program` (an op-by-op plan) found: the first step
// whose result holds a NaN or Inf, described, or "" when none did. `where(node)`
// names a program node in the user's terms ("log (node #3) at model.py:12").
std::string find_first_nonfinite(const executor::Executable& program, const executor::Bindings& bindings,
                                 int threads, const std::function<std::string(uint32_t node)>& where);

}  // namespace lazyjit::runtime
