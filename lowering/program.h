// A compiled program as a value: the graph it computes, the plan that runs it
// (steps, kernels, buffer frees) and the code of its kernels. It can be written
// to bytes and read back without LLVM codegen (program_bytes.h); nothing in it
// belongs to a cache or to the executor.
#pragma once
#include <memory>
#include <string>

#include "graph_ir/graph.h"
#include "lowering/plan.h"
#include "lowering/target.h"

namespace lazyjit::lowering {

struct Program {
  ir::Graph graph;  // after the graph passes; its attributes drive the library steps
  Plan plan;        // plan.kernel_fns point into `code`
  // The kernels' relocatable object file, loaded into the JIT. Null when the plan
  // has no kernels.
  std::unique_ptr<CompiledCode> code;
  double compile_ms = 0;  // graph passes, planning and codegen, when it was compiled
};

}  // namespace lazyjit::lowering
