#include "lowering/plan_dot.h"

#include <sstream>

#include "graph_ir/graph_dot.h"

namespace lazyjit::lowering {

using ir::dot::ints;

std::string plan_dot(const ir::Graph& g, const Plan& plan, const std::string& title) {
  namespace dot = ir::dot;
  const auto& nodes = g.nodes();
  // Which step runs each node: -1 none (a source, or not needed).
  std::vector<int> step_of(nodes.size(), -1);
  for (size_t si = 0; si < plan.steps.size(); ++si) {
    const Step& s = plan.steps[si];
    if (s.kind == Step::Kind::Kernel) {
      for (uint32_t n : plan.kernels[s.kernel].nodes) step_of[n] = static_cast<int>(si);
    } else {
      step_of[s.node] = static_cast<int>(si);
    }
  }
  auto source = [&](uint32_t n) { return nodes[n].kind == ir::OpKind::Input || nodes[n].kind == ir::OpKind::Scalar; };
  // Drawn: sources, every node a step runs, and whatever those read (a view a
  // kernel folded into its loads is not a step of its own: drawn dashed).
  std::vector<bool> drawn(nodes.size(), false);
  for (uint32_t n = 0; n < nodes.size(); ++n) drawn[n] = source(n) || step_of[n] >= 0;
  std::vector<bool> folded(nodes.size(), false);
  for (bool changed = true; changed;) {
    changed = false;
    for (uint32_t n = 0; n < nodes.size(); ++n) {
      if (!drawn[n]) continue;
      for (ir::ValueId v : nodes[n].operands) {
        uint32_t p = g.value(v).node;
        if (!drawn[p]) drawn[p] = folded[p] = changed = true;
      }
    }
  }
  for (ir::ValueId v : g.outputs())
    if (!drawn[g.value(v).node]) drawn[g.value(v).node] = folded[g.value(v).node] = true;

  std::ostringstream os;
  size_t kernel_steps = 0;
  for (const Step& s : plan.steps) kernel_steps += s.kind == Step::Kind::Kernel;
  auto count = [](size_t n, const char* what) { return std::to_string(n) + " " + what + (n == 1 ? "" : "s"); };
  std::string caption = title + ": the plan, " + count(plan.steps.size(), "step") + " (" +
                        count(kernel_steps, "fused kernel") + ", " +
                        count(plan.steps.size() - kernel_steps, "library step") + ")";
  if (!plan.frees.empty())
    caption += ", buffers: peak " + std::to_string(plan.planned_peak_bytes) + " of " +
               std::to_string(plan.result_bytes) + " bytes made";
  os << "digraph \"" << dot::escape(title) << "\" {\n"
     << "  label=\"" << dot::escape(caption) << "\";\n  labelloc=t;\n  compound=true;\n"
     << "  node [fontname=\"monospace\", fontsize=10];\n  edge [fontname=\"monospace\", fontsize=8];\n";
  auto id = [](uint32_t n) { return "n" + std::to_string(n); };
  // Sources and views folded away.
  for (uint32_t n = 0; n < nodes.size(); ++n) {
    if (!drawn[n] || step_of[n] >= 0) continue;
    if (folded[n])
      os << "  " << id(n) << " [shape=box, style=dashed, label=\""
         << dot::escape("#" + std::to_string(n) + " " + dot::op_label(g, n) + "\n(no step: folded into a kernel's loads)")
         << "\"];\n";
    else
      os << "  " << id(n) << " " << dot::node_attrs(g, n) << ";\n";
  }
  for (size_t si = 0; si < plan.steps.size(); ++si) {
    const Step& s = plan.steps[si];
    std::string step = "step " + std::to_string(si);
    if (s.kind != Step::Kind::Kernel) {
      std::string how = s.kind == Step::Kind::OpByOp ? step + ": op by op (ATen)" : step + ": library";
      std::string box = "[shape=box, style=filled, fillcolor=lightgrey, label=\"" +
                        dot::escape("#" + std::to_string(s.node) + " " + dot::op_label(g, s.node) + "\n" + how) + "\"]";
      os << "  " << id(s.node) << " " << box << ";\n";
      continue;
    }
    const FusedKernel& k = plan.kernels[s.kernel];
    std::string label = k.name + " (" + step + ")\niteration " + ints(k.sizes);
    if (k.row)
      label += ", row kernel reducing its last " + (k.reduce_rank == 1 ? std::string("dim") : std::to_string(k.reduce_rank) + " dims");
    os << "  subgraph cluster_" << si << " {\n    label=\"" << dot::escape(label)
       << "\";\n    style=filled;\n    fillcolor=\"#eef3ff\";\n";
    for (uint32_t n : k.nodes) os << "    " << id(n) << " " << dot::node_attrs(g, n) << ";\n";
    os << "  }\n";
  }
  for (uint32_t n = 0; n < nodes.size(); ++n) {
    if (!drawn[n]) continue;
    for (ir::ValueId v : nodes[n].operands) os << dot::edge(id(g.value(v).node), id(n), g, v);
  }
  os << dot::outputs(g, "n") << "}\n";
  return os.str();
}

}  // namespace lazyjit::lowering
