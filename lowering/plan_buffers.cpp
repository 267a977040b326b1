// plan_buffers (plan.h), the last phase of plan_graph and plan_op_by_op: each
// step's result freed after its last reader (Plan::frees), and the bytes made
// and the planned peak.
#include <algorithm>

#include "lowering/plan.h"

namespace lazyjit::lowering {

using ir::Graph;
using ir::Node;

void plan_buffers(const Graph& g, Plan& plan) {
  const size_t nsteps = plan.steps.size();
  std::vector<int32_t> made(g.values().size(), -1), last(g.values().size(), -1);
  std::vector<int64_t> bytes(g.values().size(), 0);
  // A view step's result shares its base's memory: using the view uses the base.
  std::vector<ValueId> base(g.values().size());
  for (ValueId v = 0; v < base.size(); ++v) base[v] = v;
  auto use = [&](ValueId v, int32_t s) {
    for (;;) {
      if (made[v] >= 0) last[v] = std::max(last[v], s);
      if (base[v] == v) break;
      v = base[v];
    }
  };
  for (size_t si = 0; si < nsteps; ++si) {
    const Step& s = plan.steps[si];
    int32_t step = static_cast<int32_t>(si);
    if (s.kind == Step::Kind::Kernel) {
      const FusedKernel& k = plan.kernels[s.kernel];
      for (const Access& a : k.loads)
        if (a.scalar_index < 0) use(a.value, step);
      for (ValueId v : k.stores) {
        made[v] = last[v] = step;
        bytes[v] = g.value(v).type.numel() * ir::element_size(g.value(v).type.dtype);
      }
      continue;
    }
    if (s.group >= 0) {
      const OpByOpLayerNorm& ln = plan.layer_norms[s.group];
      for (ValueId v : ln.reads()) use(v, step);
      for (ValueId v : ln.makes()) {
        made[v] = last[v] = step;
        bytes[v] = g.value(v).type.numel() * ir::element_size(g.value(v).type.dtype);
      }
      continue;
    }
    const Node& n = g.nodes()[s.node];
    for (ValueId v : n.operands) use(v, step);
    for (ValueId v : n.outputs) {
      made[v] = last[v] = step;
      // A view shares its operand's memory; everything else is new memory.
      if (s.kind == Step::Kind::AsStrided) base[v] = n.operands[0];
      else bytes[v] = g.value(v).type.numel() * ir::element_size(g.value(v).type.dtype);
    }
  }
  std::vector<bool> is_output(g.values().size(), false);
  for (ValueId v : g.outputs())
    for (ValueId w = v;; w = base[w]) {  // an output view keeps its base
      is_output[w] = true;
      if (base[w] == w) break;
    }
  plan.frees.assign(nsteps, {});
  std::vector<int64_t> freed_after(nsteps, 0), made_at(nsteps, 0);
  plan.result_bytes = 0;
  for (ValueId v = 0; v < g.values().size(); ++v) {
    if (made[v] < 0) continue;
    plan.result_bytes += bytes[v];
    made_at[made[v]] += bytes[v];
    if (is_output[v]) continue;
    plan.frees[last[v]].push_back(v);
    freed_after[last[v]] += bytes[v];
  }
  int64_t live = 0;
  plan.planned_peak_bytes = 0;
  for (size_t si = 0; si < nsteps; ++si) {
    live += made_at[si];
    plan.planned_peak_bytes = std::max(plan.planned_peak_bytes, live);
    live -= freed_after[si];
  }
}

}  // namespace lazyjit::lowering
