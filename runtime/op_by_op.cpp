#include "runtime/op_by_op.h"

#include "debug/metrics.h"
#include "lowering/lower.h"
#include "runtime/traced_node.h"

namespace lazyjit::runtime {

namespace {
// Op-by-op plans kept (OpByOpRuns::plans_), a few KB each.
constexpr size_t kMaxOpByOpPlans = 256;
}  // namespace

executor::Executable OpByOpRuns::program(const ir::Graph& graph, bool keep_values) const {
  lowering::LowerOptions opts;
  opts.plan.disabled = config_.disabled_passes;
  // Op by op, as eager runs them: no folding, no merged duplicates, every op
  // run. The graph passes cost more than they save here (~70 of ~750 us per
  // sync of a 25-op MLP block), and background compiles run this per sync.
  for (const char* pass : {"dce", "fold", "cse", "gemm_epilogue"}) opts.plan.disabled.push_back(pass);
  opts.plan.buffers = !keep_values;
  // A decomposed layer norm as ATen's one op; not when every value is kept
  // (NaN pinning reports the op that made one).
  opts.plan.op_by_op_groups = !keep_values;
  opts.op_by_op = true;
  if (keep_values) return executor::Executable(lowering::lower(ir::Graph(graph), target_, opts), execution_);
  // A structure run op by op before (new sizes while its program compiles in
  // the background): its plan, no lowering (~30 of ~40 us per sync).
  const ir::Hash128 structure = graph.hashes().structure;
  std::shared_ptr<const Plan> known;
  {
    std::lock_guard<std::mutex> lock(plans_mu_);
    auto it = plans_.find(structure);
    if (it != plans_.end()) known = it->second;
  }
  if (known && known->nodes == graph.nodes().size() && known->values == graph.values().size()) {
    auto program = std::make_shared<lowering::Program>();
    program->graph = graph;
    program->plan = known->plan;
    return executor::Executable(std::move(program), execution_);
  }
  std::shared_ptr<const lowering::Program> program = lowering::lower(ir::Graph(graph), target_, opts);
  auto made = std::make_shared<Plan>(Plan{program->plan, graph.nodes().size(), graph.values().size()});
  {
    std::lock_guard<std::mutex> lock(plans_mu_);
    if (plans_.size() >= kMaxOpByOpPlans) plans_.clear();
    plans_[structure] = std::move(made);
  }
  return executor::Executable(std::move(program), execution_);
}

RunResult OpByOpRuns::run(const ir::Graph& graph, const Bindings& bindings, SyncNote::How how, int threads) const {
  executor::Executable e = program(graph, /*keep_values=*/false);
  debug::Metrics::get().add(how == SyncNote::How::Background ? debug::Counter::BackgroundSyncs
                                                             : debug::Counter::OpByOpSyncs);
  RunResult r = e.run(bindings, threads);
  to_traced_nodes(r, graph, e.program().graph);
  return r;
}

void OpByOpRuns::clear() {
  std::lock_guard<std::mutex> lock(plans_mu_);
  plans_.clear();
}

}  // namespace lazyjit::runtime
