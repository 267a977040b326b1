// The debug runs: what a sync does besides running its program when a user
// asks to see inside it. None is a tier of the sync's map (runtime/pipeline.cpp):
// the pipeline finds the program as for any sync, then hands the run here.
//
//   observed_run.h/.cpp  every value kept and each step timed (op hooks with
//                        lazy=True, LAZYJIT_DEBUG=4's op table, the check below)
//   graph_check.h/.cpp   compiled vs eager, op by op (LAZYJIT_CHECK=1)
//   repro.h/.cpp         a standalone repro of a mismatch the check found
//   nan_check.h/.cpp     NaN/Inf scans and the op-by-op search for the first
//   nan_pinning.cpp      a run's outputs checked, a NaN pinned to its op
//                        (LAZYJIT_DEBUG_NANS=1)
//
// They read the runtime's parts below them (the op-by-op runs) and never call
// back into the pipeline.
#pragma once
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "executor/executable.h"
#include "graph_ir/graph.h"
#include "lowering/program.h"
#include "runtime/debug_runs/observed_run.h"
#include "runtime/op_by_op.h"
#include "runtime/recompile_explainer.h"
#include "runtime/run_io.h"

namespace lazyjit::runtime {

// A traced graph widened for an observed run: every result an output, after
// the graph's own (whose indices stay).
struct ObservedGraph {
  ir::Graph all;
  std::vector<int64_t> out_of;  // per value of the traced graph: its output of `all`, -1 for inputs and scalars
};
ObservedGraph every_value_an_output(const ir::Graph& graph);

// "mul (op #7 of the graph) at model.py:12".
std::string describe_node(const ir::Graph& graph, uint32_t node, const NodeSites& node_sites);

class DebugRuns {
 public:
  // `eager_device`: where the compiled-vs-eager check runs eager (where the
  // program's ATen steps run).
  DebugRuns(bool nans, bool check_graphs, const OpByOpRuns& op_by_op, c10::Device eager_device)
      : nans_(nans), check_graphs_(check_graphs), op_by_op_(op_by_op), eager_device_(eager_device) {}

  // NaN/Inf checks of every run's outputs (LAZYJIT_DEBUG_NANS, lazyjit.debug_nans()).
  void set_nans(bool on) { nans_ = on; }
  bool nans() const { return nans_; }
  // The compiled-vs-eager check (LAZYJIT_CHECK, lazyjit.check_graphs()), and
  // where its repros go (unchanged when empty; default ./lazyjit_repro).
  void set_check_graphs(bool on, const std::string& repro_dir);
  bool check_graphs() const { return check_graphs_; }
  std::string repro_dir() const;

  // Runs `exe`, the program of `g.all`, keeping every value: `observer` sees
  // them, and with `check` the values generated code computed are compared
  // with eager's (a repro written when `repro`). The result is `graph`'s:
  // its outputs, failures named by its nodes (observed_run.cpp).
  RunResult run_observed(const executor::Executable& exe, const ObservedGraph& g, const ir::Graph& graph,
                         const Bindings& bindings, int threads, const NodeSites& node_sites,
                         const RunObserver& observer, bool check, bool repro) const;
  // With NaN checks on: sets r.nan_report when an output holds a NaN or Inf.
  // Outputs that kernels with checked stores (Plan::check_stores) wrote were
  // tested as stored; the others are scanned (nan_pinning.cpp).
  void check_nans(RunResult& r, const lowering::Program& program, const ir::Graph& graph, const Bindings& bindings,
                  const NodeSites& node_sites, int threads) const;

 private:
  // The report of which op made a NaN/Inf in `graph`'s outputs (nan_pinning.cpp).
  std::string pin_nonfinite(const ir::Graph& graph, const Bindings& bindings, const NodeSites& node_sites,
                            int threads) const;

  std::atomic<bool> nans_;
  std::atomic<bool> check_graphs_;
  mutable std::mutex repro_mu_;
  std::string repro_dir_ = "lazyjit_repro";
  const OpByOpRuns& op_by_op_;
  c10::Device eager_device_;
};

}  // namespace lazyjit::runtime
