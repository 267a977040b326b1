// Lowering as the runtime's tiers ask for it: a graph to a program for this
// process's target, with the switches of its Config (disabled passes, dumps,
// dynamic shapes) and its backend's pass rules. Runs no program, caches
// nothing (runtime/tiers.h decides when to compile).
#pragma once
#include <memory>
#include <optional>
#include <string>

#include "graph_ir/graph.h"
#include "lowering/program.h"
#include "lowering/shapes.h"
#include "runtime/config.h"

namespace lazyjit::lowering {
class Target;
}

namespace lazyjit::runtime {

class Backend;

class Compiler {
 public:
  Compiler(const Config& config, const Backend& backend, lowering::Target& target)
      : config_(config), backend_(backend), target_(target) {}
  // Lowers `graph` (consumed: the caller keeps its own copy when it needs one).
  // `check_stores`: kernels test what they store for NaN/Inf (Plan::check_stores).
  std::shared_ptr<const lowering::Program> compile(ir::Graph graph, const std::string& dump_name,
                                                   std::optional<lowering::Shapes> shapes, bool check_stores) const;

 private:
  const Config& config_;
  const Backend& backend_;
  lowering::Target& target_;
};

// Gives the heap's free pages back once they pass a bound (after compiles and
// bindings; heap_trim.cpp).
void trim_heap();

}  // namespace lazyjit::runtime
