#include "executor/store_in_place.h"

#include <ATen/core/dispatch/Dispatcher.h>

#include <algorithm>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <unordered_set>

namespace lazyjit::executor {

using ir::OpKind;
using ir::ValueId;
using lowering::Step;

bool may_alias_operand(const ir::Node& n) {
  if (n.kind == OpKind::AsStrided) return true;
  if (n.kind != OpKind::Aten) return false;
  const std::string& full = std::get<std::string>(n.attrs[0].value);
  static std::mutex mu;
  static std::unordered_map<std::string, bool> known;
  std::lock_guard<std::mutex> lock(mu);
  auto [it, fresh] = known.emplace(full, true);
  if (!fresh) return it->second;
  auto dot = full.find('.');
  std::optional<c10::OperatorHandle> op = c10::Dispatcher::singleton().findSchema(
      {full.substr(0, dot), dot == std::string::npos ? "" : full.substr(dot + 1)});
  if (!op) return true;  // unknown: it may
  bool alias = false;
  for (const c10::Argument& r : op->schema().returns()) alias = alias || r.alias_info() != nullptr;
  it->second = alias;
  return alias;
}

bool can_store_into_input(const lowering::Program& p, size_t out, size_t in) {
  const ir::Graph& g = p.graph;
  if (out >= g.outputs().size() || in >= g.inputs().size()) return false;
  const ValueId v = g.outputs()[out], x = g.inputs()[in];
  if (std::count(g.outputs().begin(), g.outputs().end(), v) != 1) return false;
  const ir::TensorType &vt = g.value(v).type, &xt = g.value(x).type;
  if (vt.dtype != xt.dtype || vt.sizes != xt.sizes || vt.strides != ir::contiguous_strides(vt.sizes) ||
      xt.strides != vt.strides)
    return false;

  // The input and everything that may alias it: its views, and what library
  // steps whose schema lets a result alias an argument make from it.
  std::unordered_set<ValueId> alias{x};
  for (const ir::Node& n : g.nodes()) {
    if (!may_alias_operand(n)) continue;
    if (std::any_of(n.operands.begin(), n.operands.end(), [&](ValueId o) { return alias.count(o) > 0; }))
      alias.insert(n.outputs.begin(), n.outputs.end());
  }
  for (ValueId o : g.outputs())
    if (alias.count(o)) return false;

  size_t store_step = p.plan.steps.size();
  for (size_t si = 0; si < p.plan.steps.size() && store_step == p.plan.steps.size(); ++si) {
    const Step& s = p.plan.steps[si];
    if (s.kind != Step::Kind::Kernel) continue;
    const auto& stores = p.plan.kernels[s.kernel].stores;
    if (std::find(stores.begin(), stores.end(), v) != stores.end()) store_step = si;
  }
  if (store_step == p.plan.steps.size()) return false;
  const lowering::FusedKernel& k = p.plan.kernels[p.plan.steps[store_step].kernel];
  if (k.row || k.cat_dim >= 0) return false;

  // Within the kernel: the values the output is computed from.
  std::unordered_set<ValueId> feeds{v};
  for (auto it = k.nodes.rbegin(); it != k.nodes.rend(); ++it) {
    const ir::Node& n = g.nodes()[*it];
    if (std::any_of(n.outputs.begin(), n.outputs.end(), [&](ValueId o) { return feeds.count(o) > 0; }))
      feeds.insert(n.operands.begin(), n.operands.end());
  }
  std::vector<int64_t> own(k.sizes.size());  // the store's element index, as strides
  int64_t acc = 1;
  for (size_t d = k.sizes.size(); d-- > 0;) {
    own[d] = acc;
    acc *= k.sizes[d];
  }
  for (const lowering::Access& a : k.loads) {
    if (a.scalar_index >= 0 || (!alias.count(a.value) && !alias.count(a.operand))) continue;
    if (a.value != x || a.piece >= 0 || a.offset != 0 || a.strides != own || !feeds.count(a.operand)) return false;
  }

  // After it: nothing reads the input or what aliases it.
  auto read = [&](ValueId o) { return alias.count(o) > 0; };
  for (size_t si = store_step + 1; si < p.plan.steps.size(); ++si) {
    const Step& s = p.plan.steps[si];
    if (s.kind == Step::Kind::Kernel) {
      for (const lowering::Access& a : p.plan.kernels[s.kernel].loads)
        if (a.scalar_index < 0 && (read(a.value) || read(a.operand))) return false;
    } else if (s.group >= 0) {
      for (ValueId o : p.plan.layer_norms[s.group].reads())
        if (read(o)) return false;
    } else {
      const auto& ops = g.nodes()[s.node].operands;
      if (std::any_of(ops.begin(), ops.end(), read)) return false;
    }
  }
  return true;
}

}  // namespace lazyjit::executor
