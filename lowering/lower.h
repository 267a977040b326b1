// The map of the compiler: graph -> graph passes (passes.h) -> plan (fusion,
// coalescing, buffer plan: plan.h) -> target code (target.h).
#pragma once
#include <memory>
#include <string>

#include "graph_ir/graph.h"
#include "lowering/passes.h"
#include "lowering/plan.h"
#include "lowering/program.h"
#include "lowering/target.h"

namespace lazyjit::lowering {

struct LowerOptions {
  // plan.disabled names graph passes ("dce", "fold", "cse") and plan stages
  // ("fuse", "buffers") to skip; the caller keys its cache on them too.
  PlanOptions plan;
  // When set, dumps are written here, named `<dump_name>.*`: the graph before
  // the passes (.graph.txt, .graph.dot), after each pass, the plan (.plan.txt,
  // .plan.dot), and the LLVM IR (.ll) and assembly (.s) when the target kept them.
  std::string dump_dir;
  std::string dump_name;
  // Exact or shape-generic kernels (target.h).
  Shapes shapes = Shapes::Auto;
  // No kernels: elementwise and reduction nodes run op by op (plan_op_by_op).
  bool op_by_op = false;
  // The rules of where the program's ATen steps run (graph passes that depend
  // on it: pass_rules.h).
  PassRules pass_rules = cpu_library_rules();
};

// Throws std::runtime_error when the graph fails verification or a kernel fails
// to compile.
std::shared_ptr<Program> lower(ir::Graph graph, Target& target, const LowerOptions& opts);

}  // namespace lazyjit::lowering
