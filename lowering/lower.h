// The map of the compiler: graph -> plan (DCE, fusion, coalescing) -> target code.
#pragma once
#include <memory>
#include <mutex>

#include "cache/compile_cache.h"
#include "graph_ir/graph.h"
#include "lowering/plan.h"
#include "lowering/target.h"

namespace lazyjit::lowering {

// A compiled program: the graph it was compiled from (its attributes drive the
// library steps), the plan, and the code that keeps the kernels callable.
struct Program : cache::CacheEntry {
  ir::Graph graph;
  Plan plan;
  std::unique_ptr<CompiledCode> code;
  double compile_ms = 0;
  // What the executor resolves once per program (ATen operator handles), so a
  // cached program launches without name lookups. Opaque here: lowering does
  // not know libtorch.
  mutable std::once_flag runtime_once;
  mutable std::shared_ptr<void> runtime;
};

// Throws std::runtime_error when the graph fails verification or a kernel fails
// to compile. Writes dumps named `dump_name` when LAZYJIT_DUMP is set.
std::shared_ptr<Program> lower(ir::Graph graph, Target& target, const PlanOptions& opts,
                               const std::string& dump_name);

}  // namespace lazyjit::lowering
