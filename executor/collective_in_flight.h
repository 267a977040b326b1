// The results of a run's collectives started and not yet waited for
// (collective_step.h). A step that reads one waits for those it reads only;
// the others stay in flight while it runs, until a step that reads them or
// the end of the run waits. Every collective was started, in the same order on
// every rank, before any wait: the process group pairs them by that order,
// so the order of the waits on this host is free.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "graph_ir/graph.h"

namespace lazyjit::executor {

class CollectivesInFlight {
 public:
  bool empty() const { return values_.empty(); }
  void started(const std::vector<ir::ValueId>& results) { values_.insert(values_.end(), results.begin(), results.end()); }
  // Waits for those a step that reads `reads` (Thunk::reads) reads (through a
  // folded AsStrided of `g`: its base), in the order they started, and forgets
  // them. `step`: the step that waits, named by the trace's "collective wait"
  // spans. When a wait throws, the one that threw and the rest stay in flight.
  void wait_read(const ir::Graph& g, const std::vector<ir::ValueId>& reads, std::vector<at::Tensor>& env,
                 int64_t step);
  // Waits for each, in the order they started, then forgets them. `step`: as
  // wait_read's (-1: the run's end). When a wait throws, it and those after it
  // stay: values() are the results then in flight.
  void wait_all(std::vector<at::Tensor>& env, int64_t step = -1);
  const std::vector<ir::ValueId>& values() const { return values_; }
  // Whether `v` is the result of a collective still in flight.
  bool holds(ir::ValueId v) const;
  void clear() { values_.clear(); }

 private:
  std::vector<ir::ValueId> values_;
};

}  // namespace lazyjit::executor
