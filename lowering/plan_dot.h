// A compiled program's plan as Graphviz DOT text (<key>.plan.dot in the dumps
// of LAZYJIT_DUMP / LAZYJIT_DEBUG>=2): the graph after the graph passes, each
// fused kernel a cluster subgraph labelled with its name, step number and
// iteration space, holding the ops it computes; library steps (ATen ops, views,
// op-by-op steps) as grey boxes; inputs, scalars and outputs as in
// graph_ir/graph_dot.h; every edge a value with its dtype and sizes.
#pragma once
#include <string>

#include "graph_ir/graph.h"
#include "lowering/plan.h"

namespace lazyjit::lowering {

// `g` is the graph the plan was built from (Program::graph).
std::string plan_dot(const ir::Graph& g, const Plan& plan, const std::string& title = "plan");

}  // namespace lazyjit::lowering
