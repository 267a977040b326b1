// bind_plan (plan_bind.h): a plan re-derived for a graph of the same structure
// at other sizes, each kernel's nodes, loads and stores kept, its loads made
// again and coalesced as plan_graph's are (plan.cpp, plan_coalesce.cpp).
#include "lowering/plan_bind.h"

#include "lowering/plan_internal.h"

namespace lazyjit::lowering {

using ir::Graph;
using ir::Node;
using plan_internal::coalesce;
using plan_internal::make_load;
using plan_internal::reduce_rank_of;
using plan_internal::row_sizes;

std::optional<Plan> bind_plan(const Graph& g, const Plan& from) {
  Plan p;
  p.steps = from.steps;
  p.kernel_fns = from.kernel_fns;
  p.check_stores = from.check_stores;
  p.kernels.reserve(from.kernels.size());
  for (const FusedKernel& f : from.kernels) {
    if (f.nodes.empty()) return std::nullopt;
    FusedKernel k;
    k.nodes = f.nodes;
    k.stores = f.stores;
    k.row = f.row;
    k.row_space = f.row_space;
    k.name = f.name;
    k.launch = f.launch;  // the launch its code was compiled for (a hint, valid at any sizes)
    // The iteration space place_node gave it: its first node's output, or the
    // input of its first node when that is a reduction.
    const Node& first = g.nodes()[f.nodes[0]];
    k.sizes = g.value(ir::is_reduction(first.kind) ? first.operands[0] : first.outputs[0]).type.sizes;
    for (int64_t s : k.sizes)
      if (s == 0) return std::nullopt;  // no iteration: planned anew (coalescing folds it)
    if (k.row)
      for (uint32_t ni : k.nodes)
        if (ir::is_reduction(g.nodes()[ni].kind)) {
          k.reduce_rank = reduce_rank_of(g.nodes()[ni]);
          break;
        }
    // Every node still sits in the kernel as place_node put it there.
    const std::vector<int64_t> rows = k.row ? row_sizes(k) : std::vector<int64_t>();
    for (size_t j = 0; j < k.nodes.size(); ++j) {
      const Node& n = g.nodes()[k.nodes[j]];
      bool fits;
      if (ir::is_reduction(n.kind))
        fits = k.row && k.row_space[j] && g.value(n.operands[0]).type.sizes == k.sizes &&
               reduce_rank_of(n) == k.reduce_rank;
      else if (k.row && k.row_space[j])
        fits = g.value(n.outputs[0]).type.sizes == rows;
      else
        fits = g.value(n.outputs[0]).type.sizes == k.sizes;
      if (!fits) return std::nullopt;
    }
    for (const Access& a : f.loads) k.loads.push_back(make_load(g, a.operand, a.piece, k));
    coalesce(g, k);
    if (k.row) k.schedule = schedule_row(g, k);
    p.kernels.push_back(std::move(k));
  }
  if (!from.frees.empty()) plan_buffers(g, p);
  return p;
}

}  // namespace lazyjit::lowering
