// An observed run: the traced graph with every result as an output, compiled
// like any graph (the pipeline finds its program), run with each step timed
// (observed_run.h); and the compiled-vs-eager check's switches (LAZYJIT_CHECK,
// debug_runs/graph_check.h).
#include <ATen/ATen.h>

#include <chrono>
#include <unordered_map>

#include "bridge/aten_ir.h"
#include "debug/metrics.h"
#include "lowering/step_label.h"
#include "runtime/debug_runs/debug_runs.h"
#include "runtime/debug_runs/graph_check.h"
#include "runtime/debug_runs/repro.h"
#include "runtime/traced_node.h"

namespace lazyjit::runtime {

namespace {

using Clock = std::chrono::steady_clock;

// Names each step of `p` and ties the nodes of `all` (the traced graph with
// every result an output) to the step that computed them: output i of the
// program's graph is output i of `all`.
void map_steps(const lowering::Program& p, const ir::Graph& all, ObservedRun& obs) {
  const ir::Graph& pg = p.graph;
  const size_t nsteps = p.plan.steps.size();
  obs.step_ms.assign(nsteps, 0.0);
  obs.step_name.assign(nsteps, "");
  obs.step_ops.assign(nsteps, "");
  obs.step_is_kernel.assign(nsteps, false);
  obs.step.assign(all.nodes().size(), -1);
  std::unordered_map<ir::ValueId, std::vector<uint32_t>> outputs_of;
  for (uint32_t i = 0; i < pg.outputs().size(); ++i) outputs_of[pg.outputs()[i]].push_back(i);
  const bool aligned = pg.outputs().size() == all.outputs().size();
  for (size_t si = 0; si < nsteps; ++si) {
    const lowering::Step& s = p.plan.steps[si];
    std::vector<uint32_t> nodes = {s.node};
    obs.step_name[si] = lowering::step_label(p, s).first;
    if (s.kind == lowering::Step::Kind::Kernel) {
      nodes = p.plan.kernels[s.kernel].nodes;
      obs.step_is_kernel[si] = true;
      for (uint32_t n : nodes)
        obs.step_ops[si] += (obs.step_ops[si].empty() ? "" : ", ") + std::string(ir::op_name(pg.nodes()[n].kind));
    }
    if (!aligned) continue;
    for (uint32_t pn : nodes)
      for (ir::ValueId pv : pg.nodes()[pn].outputs) {
        auto it = outputs_of.find(pv);
        if (it == outputs_of.end()) continue;
        for (uint32_t i : it->second) obs.step[all.value(all.outputs()[i]).node] = static_cast<int32_t>(si);
      }
  }
}

}  // namespace

ObservedGraph every_value_an_output(const ir::Graph& graph) {
  ObservedGraph g{graph, std::vector<int64_t>(graph.values().size(), -1)};
  for (size_t i = 0; i < graph.outputs().size(); ++i)
    if (g.out_of[graph.outputs()[i]] < 0) g.out_of[graph.outputs()[i]] = static_cast<int64_t>(i);
  for (const ir::Node& n : graph.nodes()) {
    if (n.kind == ir::OpKind::Input || n.kind == ir::OpKind::Scalar) continue;
    for (ir::ValueId v : n.outputs)
      if (g.out_of[v] < 0) {
        g.out_of[v] = static_cast<int64_t>(g.all.outputs().size());
        g.all.add_output(v);
      }
  }
  return g;
}

RunResult DebugRuns::run_observed(const executor::Executable& exe, const ObservedGraph& g, const ir::Graph& graph,
                                  const Bindings& bindings, int threads, const NodeSites& node_sites,
                                  const RunObserver& observer, bool check, bool repro) const {
  const ir::Graph& all = g.all;
  const std::vector<int64_t>& out_of = g.out_of;
  const size_t n_out = graph.outputs().size();
  ObservedRun obs;
  obs.graph = &graph;
  map_steps(exe.program(), all, obs);
  Clock::time_point last = Clock::now();
  RunResult r = exe.run(bindings, threads, [&](size_t si, const std::vector<at::Tensor>&) {
    Clock::time_point now = Clock::now();
    obs.step_ms[si] = std::chrono::duration<double, std::milli>(now - last).count();
    last = now;
  });
  to_traced_nodes(r, graph, exe.program().graph);

  obs.values.assign(graph.values().size(), at::Tensor());
  for (size_t i = 0; i < graph.inputs().size() && i < bindings.inputs.size(); ++i)
    obs.values[graph.inputs()[i]] = bindings.inputs[i];
  for (const ir::Node& n : graph.nodes()) {
    if (n.kind == ir::OpKind::Scalar) {
      ir::DType t = graph.value(n.outputs[0]).type.dtype;
      c10::Scalar s = bridge::scalar_from_slot(bindings.scalars.at(std::get<int64_t>(n.attrs[0].value)), t);
      obs.values[n.outputs[0]] = at::scalar_tensor(s, at::TensorOptions().dtype(bridge::to_aten(t)));
      continue;
    }
    if (n.kind == ir::OpKind::Input) continue;
    for (ir::ValueId v : n.outputs) obs.values[v] = r.outputs[out_of[v]];
  }
  r.outputs.resize(n_out);
  if (!r.lost_by.empty()) r.lost_by.resize(n_out);

  if (check && r.failures.empty()) {
    Mismatch m = check_against_eager(obs, bindings.scalars, eager_device_, [&](uint32_t node) { return describe_node(graph, node, node_sites); });
    if (m.node >= 0 && !repro) r.check_report = m.report;
    if (m.node >= 0 && repro) {
      std::string dir;
      std::string where = write_repro(repro_dir(), graph, bindings, m.report, &dir);
      r.check_report = m.report + (dir.empty() ? "; no repro written: " + where
                                               : "; a standalone repro is in " + dir + " (python -m lazyjit.repro " + dir +
                                                     ", or lazyjit-repro " + dir + ")");
    }
  }
  check_nans(r, exe.program(), graph, bindings, node_sites, threads);
  if (observer) observer(obs);
  return r;
}

void DebugRuns::set_check_graphs(bool on, const std::string& repro_dir) {
  std::lock_guard<std::mutex> lock(repro_mu_);
  if (!repro_dir.empty()) repro_dir_ = repro_dir;
  check_graphs_ = on;
}

std::string DebugRuns::repro_dir() const {
  std::lock_guard<std::mutex> lock(repro_mu_);
  return repro_dir_;
}

}  // namespace lazyjit::runtime
