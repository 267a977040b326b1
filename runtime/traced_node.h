// Which node of a traced graph a node of its lowered program stands for. The
// graph passes renumber nodes (dce drops, cse merges, fold rewrites), but keep
// the program arguments' numbering; so a node is found again by what it is
// (kind, attributes, result types) and which arguments it reads, transitively.
// Used only after a step failed, to name the op the user recorded.
#pragma once
#include <cstdint>

#include "graph_ir/graph.h"
#include "runtime/run_io.h"

namespace lazyjit::runtime {

// The first node of `traced` with node `n` of `lowered`'s kind, attributes and
// result types that reads the same inputs and scalar arguments; else the first
// with the same kind and first attribute (an ATen step's op name); else -1.
int64_t traced_node(const ir::Graph& traced, const ir::Graph& lowered, uint32_t n);

// A step failure's node when none of the traced graph can be told.
inline constexpr uint32_t kNoTracedNode = ~uint32_t{0};
// Renames each failure's node (one of `program`'s graph, after the graph
// passes) as the node of `traced` it stands for (kNoTracedNode when none).
void to_traced_nodes(RunResult& r, const ir::Graph& traced, const ir::Graph& program);

}  // namespace lazyjit::runtime
