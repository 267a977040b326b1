// Syncs that run op by op through ATen, uncompiled and uncached: while their
// program compiles in the background, or past the recompile limit with
// LAZYJIT_ON_RECOMPILE_LIMIT=op_by_op (steps 3, 5 and 6 of the map in
// pipeline.cpp); and the op-by-op rerun that pins a NaN to its op
// (debug_runs/nan_pinning.cpp). Their plans are kept by graph structure.
#pragma once
#include <memory>
#include <mutex>
#include <unordered_map>

#include "executor/executable.h"
#include "graph_ir/graph.h"
#include "graph_ir/hash.h"
#include "lowering/plan.h"
#include "runtime/config.h"
#include "runtime/run_io.h"
#include "runtime/sync_log.h"

namespace lazyjit::lowering {
class Target;
}

namespace lazyjit::runtime {

class OpByOpRuns {
 public:
  OpByOpRuns(const Config& config, lowering::Target& target, executor::ExecutionTarget execution)
      : config_(config), target_(target), execution_(execution) {}

  // `graph` as a program without kernels: every node run op by op through ATen
  // (lowering::plan_op_by_op); `keep_values`: no buffer frees.
  executor::Executable program(const ir::Graph& graph, bool keep_values) const;
  // Runs `graph` op by op, uncompiled and uncached; `how` says why (OpByOp:
  // past the limit, Background: its program compiles meanwhile).
  RunResult run(const ir::Graph& graph, const Bindings& bindings, SyncNote::How how, int threads) const;
  // Forgets the plans kept.
  void clear();

 private:
  const Config& config_;
  lowering::Target& target_;
  executor::ExecutionTarget execution_;
  // Op-by-op plans by graph structure (steps and buffer frees follow from it):
  // a structure run op by op again, at any sizes, is not planned again.
  struct Plan {
    lowering::Plan plan;
    size_t nodes = 0, values = 0;  // of the graph it was made for (a cheap check)
  };
  mutable std::mutex plans_mu_;
  mutable std::unordered_map<ir::Hash128, std::shared_ptr<const Plan>> plans_;
};

}  // namespace lazyjit::runtime
