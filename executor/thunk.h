// One step of a program made ready to run, as XLA's GPU thunks are: built once
// per Executable by the class of its kind (a CPU, CUDA or simulated kernel,
// an ATen call, a collective, a view, an op run op by op), it knows the values
// it reads and makes and whether a CUDA graph could capture it, and runs.
// The executor asks its thunks and switches on no step kind
// (executable.cpp; step_thunks.h builds them).
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <unordered_set>
#include <vector>

#include "executor/bindings.h"
#include "graph_ir/graph.h"

namespace lazyjit::executor {

class CollectivesInFlight;

// What a run hands each step: its values so far (by ValueId; the step writes
// what it makes there), the run's bindings and threads.
struct StepRun {
  std::vector<at::Tensor>& env;
  const Bindings& bindings;
  int threads;                     // of ATen's OpenMP pool, for CPU kernels
  bool& stored_nonfinite;          // set when a kernel with checked stores stored a NaN or Inf
  CollectivesInFlight& in_flight;  // a collective adds its results, started and not waited for
  // The memory of inputs released so far (Bindings::released); null when none.
  const std::unordered_set<const c10::StorageImpl*>* released = nullptr;
};

class Thunk {
 public:
  virtual ~Thunk() = default;
  // Runs the step. Throws what the step's work throws (an ATen kernel's error).
  virtual void run(StepRun& r) const = 0;

  // The graph values it reads (tensors; a kernel's scalar arguments are not)
  // and makes. A step reading a value a failed step made is skipped and its
  // values are lost (Executable::run).
  const std::vector<ir::ValueId>& reads() const { return reads_; }
  const std::vector<ir::ValueId>& writes() const { return writes_; }
  // The node a failure of the step names (a kernel: its first node).
  uint32_t node() const { return node_; }
  // Empty when a CUDA graph may capture the step; else why not, in words
  // ("output size read on the host"; executor/graph_replay.h's rules 3-6).
  const std::string& capture_blocker() const { return capture_blocker_; }

 protected:
  Thunk(std::vector<ir::ValueId> reads, std::vector<ir::ValueId> writes, uint32_t node,
        std::string capture_blocker = {})
      : reads_(std::move(reads)), writes_(std::move(writes)), node_(node),
        capture_blocker_(std::move(capture_blocker)) {}

 private:
  std::vector<ir::ValueId> reads_, writes_;
  uint32_t node_;
  std::string capture_blocker_;
};

}  // namespace lazyjit::executor
