#include "lowering/passes.h"

#include "graph_ir/effects.h"
#include "lowering/gemm_epilogue.h"
#include "lowering/graph_rewriter.h"

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <unordered_map>

namespace lazyjit::lowering {

using ir::DType;
using ir::Graph;
using ir::Node;
using ir::OpKind;
using ir::ValueId;

namespace {

bool is_source(OpKind k) { return k == OpKind::Input || k == OpKind::Scalar; }

DType compute_of(const Node& n) { return static_cast<DType>(std::get<int64_t>(n.attrs[0].value)); }

}  // namespace

bool view_is_identity(const ir::TensorType& src, const std::vector<ir::Attr>& attrs) {
  const auto& sizes = std::get<std::vector<int64_t>>(attrs.at(0).value);
  const auto& strides = std::get<std::vector<int64_t>>(attrs.at(1).value);
  bool same = std::get<int64_t>(attrs.at(2).value) == 0 && sizes == src.sizes && strides.size() == src.strides.size();
  for (size_t d = 0; same && d < sizes.size(); ++d) same = sizes[d] == 1 || strides[d] == src.strides[d];
  return same;
}

namespace {

// The value `v`'s node computes, when that is just one of its operands.
std::optional<ValueId> identity_of(const Graph& g, const Node& n) {
  auto same_type = [&](ValueId a) { return g.value(a).type == g.value(n.outputs[0]).type; };
  auto from = [&](ValueId a) -> std::optional<ValueId> {
    // Scalars are arguments, not buffers: a value computed from one stays a node.
    if (same_type(a) && g.producer(a).kind != OpKind::Scalar) return a;
    return std::nullopt;
  };
  switch (n.kind) {
    case OpKind::Cast: {
      ValueId x = n.operands[0];
      DType t = g.value(x).type.dtype;
      // cast(x) in its own dtype, computed in a type that holds it exactly.
      if (ir::widens_exactly(t, compute_of(n))) return from(x);
      return std::nullopt;
    }
    case OpKind::AsStrided:
      // (x.transpose of a length-1 dim, which decode's q and k make, relabels
      // only size-1 strides.)
      if (view_is_identity(g.value(n.operands[0]).type, n.attrs)) return from(n.operands[0]);
      return std::nullopt;
    case OpKind::Where:
      if (n.operands[1] == n.operands[2]) return from(n.operands[1]);
      return std::nullopt;
    case OpKind::Maximum:
    case OpKind::Minimum:
      if (n.operands[0] == n.operands[1] && compute_of(n) == g.value(n.operands[0]).type.dtype)
        return from(n.operands[0]);
      return std::nullopt;
    case OpKind::Clamp:
      if (n.attrs.size() > 1 && std::holds_alternative<int64_t>(n.attrs[1].value) &&
          std::get<int64_t>(n.attrs[1].value) == 0 && compute_of(n) == g.value(n.operands[0]).type.dtype)
        return from(n.operands[0]);
      return std::nullopt;
    default:
      break;
  }
  // Involutions and round trips: f(g(x)) == x.
  const Node& inner = g.producer(n.operands[0]);
  if (inner.kind == OpKind::Input || inner.kind == OpKind::Scalar) return std::nullopt;
  if (n.kind == OpKind::Neg && inner.kind == OpKind::Neg) {
    ValueId x = inner.operands[0];
    DType t = g.value(x).type.dtype;
    // Exact when both negations happen in x's own type (or a wider float).
    if ((ir::is_floating(t) || ir::is_signed_integral(t)) && compute_of(n) == compute_of(inner) &&
        compute_of(inner) == t)
      return from(x);
  }
  if (n.kind == OpKind::LogicalNot && inner.kind == OpKind::LogicalNot) {
    ValueId x = inner.operands[0];
    if (g.value(x).type.dtype == DType::Bool && g.value(n.operands[0]).type.dtype == DType::Bool)
      return from(x);
  }
  return std::nullopt;
}

// cast(cast(x, wide), narrow) == x when `wide` holds every value of x's dtype.
std::optional<ValueId> round_trip_of(const Graph& g, const Node& n) {
  if (n.kind != OpKind::Cast) return std::nullopt;
  const Node& inner = g.producer(n.operands[0]);
  if (inner.kind != OpKind::Cast) return std::nullopt;
  ValueId x = inner.operands[0];
  DType t = g.value(x).type.dtype, mid = g.value(n.operands[0]).type.dtype;
  if (!ir::widens_exactly(t, compute_of(inner)) || !ir::widens_exactly(t, mid) ||
      !ir::widens_exactly(t, compute_of(n)))
    return std::nullopt;
  if (g.value(x).type != g.value(n.outputs[0]).type || g.producer(x).kind == OpKind::Scalar)
    return std::nullopt;
  return x;
}

struct NodeKeyHash {
  size_t operator()(const std::pair<OpKind, std::vector<ValueId>>& k) const {
    uint64_t h = ir::hash64(k.second.data(), k.second.size() * sizeof(ValueId));
    return static_cast<size_t>(h ^ (static_cast<uint64_t>(k.first) * 0x9e3779b97f4a7c15ull));
  }
};

}  // namespace

Graph eliminate_dead_code(const Graph& g, ValueMap* map) {
  std::vector<bool> live = ir::live_nodes(g);
  Rewriter rw(g);
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    const Node& n = g.nodes()[i];
    if (live[i] && !is_source(n.kind)) rw.copy(n);
  }
  return rw.finish(map);
}

Graph eliminate_common_subexpressions(const Graph& g, ValueMap* map) {
  Rewriter rw(g);
  // Candidates by op and renamed operands; attributes and result types are
  // compared exactly on a bucket hit.
  std::unordered_map<std::pair<OpKind, std::vector<ValueId>>, std::vector<uint32_t>, NodeKeyHash> seen;
  for (uint32_t i = 0; i < g.nodes().size(); ++i) {
    const Node& n = g.nodes()[i];
    if (is_source(n.kind)) continue;
    // Two equal collectives are two collectives: each pairs with one of the
    // other processes' (ir::has_effects).
    if (ir::has_effects(n)) {
      rw.copy(n);
      continue;
    }
    std::pair<OpKind, std::vector<ValueId>> key{n.kind, rw.operands(n)};
    auto& bucket = seen[key];
    const Node* same = nullptr;
    for (uint32_t j : bucket) {
      const Node& m = g.nodes()[j];
      if (m.attrs != n.attrs || m.outputs.size() != n.outputs.size()) continue;
      bool types = true;
      for (size_t o = 0; o < n.outputs.size() && types; ++o)
        types = g.value(m.outputs[o]).type == g.value(n.outputs[o]).type;
      if (types) {
        same = &m;
        break;
      }
    }
    if (same) {
      for (size_t o = 0; o < n.outputs.size(); ++o) rw.alias(n.outputs[o], rw.map(same->outputs[o]));
      continue;
    }
    rw.copy(n);
    bucket.push_back(i);
  }
  return rw.finish(map);
}

Graph fold_constants(const Graph& g, ValueMap* map) {
  Rewriter rw(g);
  // Replacements are found on the old graph; a chain of them resolves because
  // each replaced value maps to whatever its replacement already maps to.
  for (const Node& n : g.nodes()) {
    if (is_source(n.kind)) continue;
    std::optional<ValueId> same;
    if (n.outputs.size() == 1 && (ir::is_elementwise(n.kind) || n.kind == OpKind::AsStrided)) {
      same = identity_of(g, n);
      if (!same) same = round_trip_of(g, n);
    }
    if (same) rw.alias(n.outputs[0], rw.map(*same));
    else rw.copy(n);
  }
  return rw.finish(map);
}

const std::vector<GraphPass>& graph_pipeline() {
  // Never destroyed: a background compile may still run them while the
  // process exits (runtime/background_compiles.h).
  static const auto& passes = *new std::vector<GraphPass>{
      {"dce", [](const Graph& g, const PassRules&, ValueMap* m) { return eliminate_dead_code(g, m); }},
      {"fold", [](const Graph& g, const PassRules&, ValueMap* m) { return fold_constants(g, m); }},
      {"cse", [](const Graph& g, const PassRules&, ValueMap* m) { return eliminate_common_subexpressions(g, m); }},
      // what fold and cse left unused
      {"dce", [](const Graph& g, const PassRules&, ValueMap* m) { return eliminate_dead_code(g, m); }},
      // Last: it counts a GEMM's readers, which cse may have merged.
      {"gemm_epilogue",
       [](const Graph& g, const PassRules& r, ValueMap* m) { return fuse_gemm_epilogues(g, r.gemm_epilogue, m); }},
  };
  return passes;
}

Graph run_graph_passes(Graph g, const std::vector<std::string>& disabled,
                       const std::function<void(const std::string&, const Graph&)>& after, ValueMap* map,
                       const PassRules& rules) {
  if (map) {
    map->resize(g.values().size());
    for (ValueId v = 0; v < map->size(); ++v) (*map)[v] = v;
  }
  ValueMap step;
  for (const GraphPass& p : graph_pipeline()) {
    if (std::find(disabled.begin(), disabled.end(), p.name) != disabled.end()) continue;
    g = p.run(g, rules, map ? &step : nullptr);
    if (map)
      for (ValueId& v : *map)
        if (v != kDropped) v = step[v];
    if (after) after(p.name, g);
  }
  return g;
}

}  // namespace lazyjit::lowering
