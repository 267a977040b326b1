// The results of a run's collectives started and not yet waited for
// (collective_step.h). A step that reads one (or the end of the run) waits for
// them all first, in the order they started, which is the same on every rank.
#pragma once
#include <ATen/core/Tensor.h>

#include <vector>

#include "graph_ir/graph.h"

namespace lazyjit::executor {

class CollectivesInFlight {
 public:
  bool empty() const { return values_.empty(); }
  void started(const std::vector<ir::ValueId>& results) { values_.insert(values_.end(), results.begin(), results.end()); }
  // Whether a step that reads `reads` (Thunk::reads) reads one of them
  // (through a folded AsStrided of `g`: its base).
  bool read_by(const ir::Graph& g, const std::vector<ir::ValueId>& reads) const;
  // Waits for each (wait_collective), then forgets them. When a wait throws,
  // they stay: values() are the results then in flight.
  void wait_all(std::vector<at::Tensor>& env);
  const std::vector<ir::ValueId>& values() const { return values_; }
  void clear() { values_.clear(); }

 private:
  std::vector<ir::ValueId> values_;
};

}  // namespace lazyjit::executor
