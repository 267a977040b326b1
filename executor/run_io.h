// What a program run takes and gives: its bindings (bindings.h: inputs,
// scalars, where results may go) and its result (outputs, failed steps, reports). Kept apart
// from executable.h so that the layers above name them without the executor's
// machinery (runtime/run_io.h re-exports them).
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "executor/bindings.h"
#include "graph_ir/graph.h"

namespace lazyjit::executor {

// A step that threw while a program ran. Only ATen library steps and view steps
// can: a fused kernel has no data-dependent checks.
struct StepFailure {
  uint32_t node;             // the step's node in program().graph (a kernel: its first node)
  std::exception_ptr error;  // what it threw, as thrown (an ATen kernel's c10::Error keeps its type)
};

// What a run computed. When a step throws, the steps that do not read its
// results (through the graph) still run, so every output that does not depend on
// a failed step is computed.
struct RunResult {
  std::vector<at::Tensor> outputs;    // per graph output; undefined when lost
  // With NaN checks on (LAZYJIT_DEBUG_NANS): which op first made a NaN or Inf
  // among the outputs, and its inputs; empty when none (runtime/debug_runs/nan_check.h).
  std::string nan_report;
  // With the compiled-vs-eager check on (LAZYJIT_CHECK): the first op whose
  // generated code disagrees with eager, and where its repro was written; empty
  // when all agree (runtime/debug_runs/graph_check.h).
  std::string check_report;
  std::vector<StepFailure> failures;  // in step order; empty when every step ran
  std::vector<int32_t> lost_by;       // per output: the failure it depends on, or -1; empty when none failed
  // A program with Plan::check_stores: whether a kernel stored a NaN or Inf
  // (in any float32/float64 value it stored, an output or not).
  bool stored_nonfinite = false;
};

}  // namespace lazyjit::executor
