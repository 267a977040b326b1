// A Graph as Graphviz DOT text (`dot -Tsvg g.dot > g.svg`), for the dumps of
// LAZYJIT_DUMP / LAZYJIT_DEBUG>=2 (<key>.graph.dot). One DOT node per IR node:
// inputs as blue "invhouse" shapes, scalar arguments as yellow ellipses, ATen
// (library) ops as grey boxes, the graph's own ops as rounded boxes; each
// output gets a green "house" node. Every edge is a value, labelled with its
// number, dtype and sizes ("%3 f32[4,8]"). lowering/plan_dot.h draws a plan
// with the same pieces.
#pragma once
#include <cstdint>
#include <string>

#include "graph_ir/graph.h"

namespace lazyjit::ir {

std::string graph_dot(const Graph& g, const std::string& title = "graph");

// The pieces both DOT writers share.
namespace dot {
// `s` as the body of a DOT "..." string.
std::string escape(const std::string& s);
// What node `n` does, e.g. "mul", "input 0", "aten::mm", "reduce_sum dims [1]".
std::string op_label(const Graph& g, uint32_t n);
// "[4,8]".
std::string ints(const std::vector<int64_t>& v);
// "%3 f32[4,8]".
std::string value_label(const Graph& g, ValueId v);
// The DOT attributes of node `n`'s box: shape, colours, label (already in [...]).
std::string node_attrs(const Graph& g, uint32_t n, const std::string& extra_label = "");
// The edge from the producer of `v` (DOT node `from`) to DOT node `to`.
std::string edge(const std::string& from, const std::string& to, const Graph& g, ValueId v);
// One green "house" node per graph output, named out<k>, with its edge.
std::string outputs(const Graph& g, const std::string& node_prefix);
}  // namespace dot

}  // namespace lazyjit::ir
