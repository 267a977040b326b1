// plan_op_by_op (plan.h): the op-by-op plan, every node a step of its own and no
// kernels, decomposed layer norms found as one step (op_by_op_groups.h) when asked,
// then the buffer plan (plan_buffers.cpp).
#include "lowering/plan.h"

namespace lazyjit::lowering {

using ir::Graph;
using ir::OpKind;

Plan plan_op_by_op(const Graph& g, const PlanOptions& opts) {
  Plan plan;
  plan.op_by_op = true;
  std::vector<bool> live = ir::live_nodes(g);
  std::vector<int32_t> group_of(g.nodes().size(), -1);
  if (opts.op_by_op_groups) {
    for (OpByOpLayerNorm& ln : find_layer_norms(g)) {
      bool any_live = false;
      for (uint32_t n : ln.nodes) any_live |= live[n];
      if (!any_live) continue;
      for (uint32_t n : ln.nodes) group_of[n] = static_cast<int32_t>(plan.layer_norms.size());
      plan.layer_norms.push_back(std::move(ln));
    }
  }
  for (uint32_t i = 0; i < g.nodes().size(); ++i) {
    if (int32_t j = group_of[i]; j >= 0) {
      if (plan.layer_norms[j].nodes.front() == i) plan.steps.push_back(Step{Step::Kind::OpByOp, i, -1, j});
      continue;
    }
    if (!live[i]) continue;
    switch (g.nodes()[i].kind) {
      case OpKind::Input:
      case OpKind::Scalar: break;
      case OpKind::AsStrided: plan.steps.push_back(Step{Step::Kind::AsStrided, i, -1}); break;
      case OpKind::AsStridedScatter: plan.steps.push_back(Step{Step::Kind::AsStridedScatter, i, -1}); break;
      case OpKind::Aten: plan.steps.push_back(Step{Step::Kind::Aten, i, -1}); break;
      default: plan.steps.push_back(Step{Step::Kind::OpByOp, i, -1}); break;
    }
  }
  if (opts.buffers) plan_buffers(g, plan);
  return plan;
}

}  // namespace lazyjit::lowering
