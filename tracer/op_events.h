// The ops of a compiled graph as the op hooks see them (add_op_hook(.., true))
// and the per-op timing table (LAZYJIT_DEBUG=4): built from an observed run
// (runtime/debug_runs/observed_run.h), one event per op the user recorded.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "runtime/debug_runs/observed_run.h"
#include "tracer/lazyjit.h"

namespace lazyjit::tracer {

// Which recorded op a graph node came from: the op's first node (nodes of one
// op share it), its schema name and call site. `first` < 0: not known.
struct NodeOp {
  int64_t first = -1;
  std::string op, site;
};

// One event per recorded op, in graph order. `copy`: tensors are cloned (hooks
// may keep or change them); else shared with the run's values.
std::vector<OpEvent> op_events(const runtime::ObservedRun& run, const std::function<NodeOp(uint32_t node)>& op_of,
                               bool copy);

// LAZYJIT_DEBUG=4: adds the events' times to the table printed at exit.
void add_to_timing_table(const std::vector<OpEvent>& events);

}  // namespace lazyjit::tracer
