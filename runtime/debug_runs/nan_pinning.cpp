// With NaN checks on (LAZYJIT_DEBUG_NANS, lazyjit.debug_nans()): a run whose
// outputs hold a NaN or Inf is rerun op by op, every value kept, to name the
// op that made it first (debug_runs/nan_check.h has the scan and the search).
#include <unordered_set>

#include "graph_ir/node_name.h"
#include "runtime/debug_runs/debug_runs.h"
#include "runtime/debug_runs/nan_check.h"
#include "runtime/traced_node.h"

namespace lazyjit::runtime {

void DebugRuns::check_nans(RunResult& r, const lowering::Program& program, const ir::Graph& graph,
                           const Bindings& bindings, const NodeSites& node_sites, int threads) const {
  if (!nans_ || !r.failures.empty()) return;
  // Outputs that a kernel with checked stores wrote were tested as they were
  // stored: when none of its stores was NaN or Inf, only the rest need a scan.
  const lowering::Plan& plan = program.plan;
  std::vector<at::Tensor> scan;
  if (plan.check_stores && !r.stored_nonfinite) {
    std::unordered_set<ir::ValueId> tested;
    for (const lowering::FusedKernel& k : plan.kernels)
      for (ir::ValueId v : k.stores) {
        ir::DType t = program.graph.value(v).type.dtype;
        if (t == ir::DType::Float32 || t == ir::DType::Float64) tested.insert(v);
      }
    for (size_t i = 0; i < r.outputs.size(); ++i)
      if (!tested.count(program.graph.outputs()[i])) scan.push_back(r.outputs[i]);
  } else {
    scan = r.outputs;
  }
  if (any_nonfinite(scan)) r.nan_report = pin_nonfinite(graph, bindings, node_sites, threads);
}

std::string describe_node(const ir::Graph& graph, uint32_t node, const NodeSites& node_sites) {
  std::string op = ir::node_op_name(graph.nodes()[node]);
  std::string site = node_sites ? node_sites(node) : "";
  return op + " (op #" + std::to_string(node) + " of the graph)" + (site.empty() ? "" : " at " + site);
}

std::string DebugRuns::pin_nonfinite(const ir::Graph& graph, const Bindings& bindings, const NodeSites& node_sites,
                                     int threads) const {
  // Every value kept: the report shows the op's inputs.
  executor::Executable e = op_by_op_.program(graph, /*keep_values=*/true);
  const ir::Graph& pg = e.program().graph;
  std::string found = find_first_nonfinite(e, bindings, threads, [&](uint32_t node) {
    int64_t t = traced_node(graph, pg, node);
    if (t >= 0) return describe_node(graph, static_cast<uint32_t>(t), node_sites);
    return ir::node_op_name(pg.nodes()[node]);
  });
  if (found.empty())
    return "the outputs hold a NaN or Inf that the op-by-op run did not make (a difference between the generated "
           "code and ATen's kernels: rerun with LAZYJIT_DISABLE_PASSES=fuse to bisect)";
  return found;
}

}  // namespace lazyjit::runtime
