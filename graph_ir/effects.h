// Nodes that act on something outside the graph. Internal to graph_ir and the
// passes that drop or merge nodes.
#pragma once
#include "graph_ir/graph.h"

namespace lazyjit::ir {

// Whether node `n` acts on something outside the graph, so that it must run
// (once, in recorded order) whether or not anything reads its results: a
// collective or point-to-point op (an ATen node of a `c10d` namespace,
// `lazyjit_c10d::*` or `_c10d_functional::*`) talks to other processes, which
// pair each of them with their own in the order each process issues them.
// live_nodes (graph.h) counts such a node as live, with what it reads: never
// dead code; common-subexpression elimination never merges two of them.
bool has_effects(const Node& n);
// Whether some node of `g` has effects.
bool holds_effects(const Graph& g);

}  // namespace lazyjit::ir
