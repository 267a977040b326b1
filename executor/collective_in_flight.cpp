#include "executor/collective_in_flight.h"

#include <algorithm>

#include "executor/collective_step.h"

namespace lazyjit::executor {

bool CollectivesInFlight::read_by(const lowering::Program& p, const lowering::Step& s) const {
  const ir::Graph& g = p.graph;
  auto hit = [&](ir::ValueId v) {
    for (;;) {  // a view read through (a folded AsStrided) reads its base
      if (std::find(values_.begin(), values_.end(), v) != values_.end()) return true;
      const ir::Node& pr = g.producer(v);
      if (pr.kind != ir::OpKind::AsStrided || pr.operands.empty()) return false;
      v = pr.operands[0];
    }
  };
  if (s.kind == lowering::Step::Kind::Kernel) {
    for (const lowering::Access& a : p.plan.kernels[s.kernel].loads)
      if (a.scalar_index < 0 && hit(a.value)) return true;
    return false;
  }
  for (ir::ValueId v : g.nodes()[s.node].operands)
    if (hit(v)) return true;
  return false;
}

void CollectivesInFlight::wait_all(std::vector<at::Tensor>& env) {
  for (ir::ValueId v : values_)
    if (env[v].defined()) wait_collective(env[v]);
  values_.clear();
}

}  // namespace lazyjit::executor
