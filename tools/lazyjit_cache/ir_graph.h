// A program's IR text (ir::Graph::str(), one node per line:
// "  %9 = aten["aten::addmm", ...](%0, %1) : f32[7,64]") as a Graphviz graph,
// and its SVG drawing by `dot -Tsvg` when Graphviz is installed.
#pragma once
#include <string>

namespace lazyjit::cache_tool {

// Graphviz source: one box per node labelled with its op and type, an edge
// per operand; inputs and scalars drawn apart, returned values bold.
std::string ir_to_dot(const std::string& ir_text);

// The <svg> element dot draws, or empty (with *note set) when dot is missing
// or fails.
std::string dot_to_svg(const std::string& dot_source, std::string* note);

}  // namespace lazyjit::cache_tool
