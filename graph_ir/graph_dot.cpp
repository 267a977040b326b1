#include "graph_ir/graph_dot.h"

#include <sstream>
#include <variant>

namespace lazyjit::ir {

namespace dot {

std::string escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

std::string ints(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s + "]";
}

std::string op_label(const Graph& g, uint32_t n) {
  const Node& node = g.nodes()[n];
  std::string name(op_name(node.kind));
  auto int_attr = [&](size_t i) -> int64_t {
    return i < node.attrs.size() && std::holds_alternative<int64_t>(node.attrs[i].value)
               ? std::get<int64_t>(node.attrs[i].value)
               : -1;
  };
  switch (node.kind) {
    case OpKind::Input: return "input " + std::to_string(int_attr(0));
    case OpKind::Scalar: return "scalar " + std::to_string(int_attr(0));
    case OpKind::Aten:
      return !node.attrs.empty() && std::holds_alternative<std::string>(node.attrs[0].value)
                 ? std::get<std::string>(node.attrs[0].value)
                 : name;
    default: break;
  }
  if (is_reduction(node.kind) && node.attrs.size() > 1 &&
      std::holds_alternative<std::vector<int64_t>>(node.attrs[1].value))
    return name + " dims " + ints(std::get<std::vector<int64_t>>(node.attrs[1].value));
  if (node.kind == OpKind::Cast && !node.outputs.empty())
    return name + " to " + std::string(dtype_name(g.value(node.outputs[0]).type.dtype));
  return name;
}

std::string value_label(const Graph& g, ValueId v) { return "%" + std::to_string(v) + " " + g.value(v).type.str(); }

std::string node_attrs(const Graph& g, uint32_t n, const std::string& extra_label) {
  const Node& node = g.nodes()[n];
  std::string label = op_label(g, n);
  if (node.kind == OpKind::Input || node.kind == OpKind::Scalar) label += "\n" + value_label(g, node.outputs[0]);
  else label = "#" + std::to_string(n) + " " + label;
  if (!extra_label.empty()) label += "\n" + extra_label;
  std::string style;
  switch (node.kind) {
    case OpKind::Input: style = "shape=invhouse, style=filled, fillcolor=lightblue"; break;
    case OpKind::Scalar: style = "shape=ellipse, style=filled, fillcolor=lightyellow"; break;
    case OpKind::Aten:
    case OpKind::AsStrided:
    case OpKind::AsStridedScatter: style = "shape=box, style=filled, fillcolor=lightgrey"; break;
    default: style = "shape=box, style=rounded"; break;
  }
  return "[" + style + ", label=\"" + escape(label) + "\"]";
}

std::string edge(const std::string& from, const std::string& to, const Graph& g, ValueId v) {
  return "  " + from + " -> " + to + " [label=\"" + escape(value_label(g, v)) + "\"];\n";
}

std::string outputs(const Graph& g, const std::string& node_prefix) {
  std::string s;
  for (size_t k = 0; k < g.outputs().size(); ++k) {
    ValueId v = g.outputs()[k];
    std::string name = "out" + std::to_string(k);
    s += "  " + name + " [shape=house, style=filled, fillcolor=palegreen, label=\"output " + std::to_string(k) +
         "\"];\n";
    s += edge(node_prefix + std::to_string(g.value(v).node), name, g, v);
  }
  return s;
}

}  // namespace dot

std::string graph_dot(const Graph& g, const std::string& title) {
  std::ostringstream os;
  os << "digraph \"" << dot::escape(title) << "\" {\n"
     << "  label=\"" << dot::escape(title + ": the graph as traced (" + std::to_string(g.nodes().size()) + " nodes)")
     << "\";\n  labelloc=t;\n  node [fontname=\"monospace\", fontsize=10];\n"
     << "  edge [fontname=\"monospace\", fontsize=8];\n";
  for (uint32_t n = 0; n < g.nodes().size(); ++n) os << "  n" << n << " " << dot::node_attrs(g, n) << ";\n";
  for (uint32_t n = 0; n < g.nodes().size(); ++n)
    for (ValueId v : g.nodes()[n].operands) os << dot::edge("n" + std::to_string(g.value(v).node), "n" + std::to_string(n), g, v);
  os << dot::outputs(g, "n") << "}\n";
  return os.str();
}

}  // namespace lazyjit::ir
