#include "runtime/traced_node.h"

#include <algorithm>
#include <utility>

namespace lazyjit::runtime {

namespace {

// The program arguments node `n` reads, transitively, as sorted (kind, index) pairs.
std::vector<std::pair<int, int64_t>> sources(const ir::Graph& g, uint32_t n) {
  std::vector<std::pair<int, int64_t>> out;
  std::vector<bool> seen(g.nodes().size());
  std::vector<uint32_t> todo{n};
  seen[n] = true;
  while (!todo.empty()) {
    const ir::Node& node = g.nodes()[todo.back()];
    todo.pop_back();
    if (node.kind == ir::OpKind::Input || node.kind == ir::OpKind::Scalar) {
      out.emplace_back(static_cast<int>(node.kind), std::get<int64_t>(node.attrs[0].value));
      continue;
    }
    for (ir::ValueId v : node.operands) {
      uint32_t p = g.value(v).node;
      if (!seen[p]) seen[p] = true, todo.push_back(p);
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

bool same_op(const ir::Graph& a, const ir::Node& x, const ir::Graph& b, const ir::Node& y) {
  if (x.kind != y.kind || x.attrs != y.attrs || x.outputs.size() != y.outputs.size()) return false;
  for (size_t i = 0; i < x.outputs.size(); ++i)
    if (!(a.value(x.outputs[i]).type == b.value(y.outputs[i]).type)) return false;
  return true;
}

}  // namespace

int64_t traced_node(const ir::Graph& traced, const ir::Graph& lowered, uint32_t n) {
  if (n >= lowered.nodes().size()) return -1;
  const ir::Node& target = lowered.nodes()[n];
  auto wanted = sources(lowered, n);
  int64_t by_name = -1;
  for (uint32_t i = 0; i < traced.nodes().size(); ++i) {
    const ir::Node& t = traced.nodes()[i];
    if (t.kind != target.kind) continue;
    if (same_op(traced, t, lowered, target) && sources(traced, i) == wanted) return i;
    if (by_name < 0 && !t.attrs.empty() && !target.attrs.empty() && t.attrs[0] == target.attrs[0]) by_name = i;
  }
  return by_name;
}

void to_traced_nodes(RunResult& r, const ir::Graph& traced, const ir::Graph& program) {
  for (executor::StepFailure& f : r.failures) {
    int64_t n = traced_node(traced, program, f.node);
    f.node = n < 0 ? kNoTracedNode : static_cast<uint32_t>(n);
  }
}

}  // namespace lazyjit::runtime
