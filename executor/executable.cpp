#include "executor/executable.h"
#include "lowering/step_label.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <optional>

#include "debug/metrics.h"
#include "debug/trace.h"
#include "executor/buffer_pool.h"
#include "executor/collective_in_flight.h"
#include "executor/device_launch.h"
#include "executor/execution_device.h"
#include "executor/graph_replays.h"
#include "executor/op_by_op_node.h"
#include "executor/kernel_launch.h"
#include "executor/tensor_layout.h"

namespace lazyjit::executor {

using ir::OpKind;
using lowering::Step;

at::Tensor with_layout(const at::Tensor& t, const ir::TensorType& type) {
  if (t.sizes().equals(type.sizes) && t.strides().equals(type.strides)) return t;
  debug::Metrics::get().add(debug::Counter::LayoutCopies);
  at::Tensor out = at::empty_strided(type.sizes, type.strides, t.options());
  out.copy_(t);
  return out;
}

namespace {

// `reuse`: a scatter may write into its base's buffer instead of a copy of it
// (the base is a step result this step reads last; see run_step).
void run_view(const ir::Graph& g, const ir::Node& n, std::vector<at::Tensor>& env, bool reuse = false) {
  const auto& sizes = std::get<std::vector<int64_t>>(n.attrs[0].value);
  const auto& strides = std::get<std::vector<int64_t>>(n.attrs[1].value);
  int64_t offset = std::get<int64_t>(n.attrs[2].value);
  // Flat slots of the dense operand, in memory order.
  at::Tensor base = with_layout(env[n.operands[0]], g.value(n.operands[0]).type);
  at::Tensor flat = base.as_strided({base.numel()}, {1}, base.storage_offset());
  if (n.kind == OpKind::AsStrided) {
    env[n.outputs[0]] = flat.as_strided(sizes, strides, base.storage_offset() + offset);
    return;
  }
  at::Tensor out = reuse ? base : base.clone(at::MemoryFormat::Preserve);
  at::Tensor out_flat = out.as_strided({out.numel()}, {1}, out.storage_offset());
  out_flat.as_strided(sizes, strides, out.storage_offset() + offset).copy_(env[n.operands[1]]);
  env[n.outputs[0]] = out;
}

// The base of step `si`'s in-place work: value `v` when it is a step result
// (not an input: the caller's data) that no later step reads (the buffer plan
// frees it after `si`, and a view of it would keep it), held by nothing else,
// with its declared layout. Such a buffer may be written in place.
bool dead_after(const lowering::Program& p, size_t si, ir::ValueId v, const std::vector<at::Tensor>& env) {
  const at::Tensor& t = env[v];
  return p.graph.producer(v).kind != OpKind::Input && si < p.plan.frees.size() &&
         std::find(p.plan.frees[si].begin(), p.plan.frees[si].end(), v) != p.plan.frees[si].end() &&
         t.defined() && t.use_count() == 1 && t.storage().use_count() == 1 &&
         t.sizes().equals(p.graph.value(v).type.sizes) && t.strides().equals(p.graph.value(v).type.strides);
}

}  // namespace

Executable::Executable(std::shared_ptr<const lowering::Program> program) : program_(std::move(program)) {
  const lowering::Program& p = *program_;
  aten_.resize(p.plan.steps.size());
  collectives_.resize(p.plan.steps.size());
  for (size_t si = 0; si < p.plan.steps.size(); ++si) {
    const Step& s = p.plan.steps[si];
    if (s.kind != Step::Kind::Aten) continue;
    const ir::Node& n = p.graph.nodes()[s.node];
    if (std::optional<Collective> c = decode_collective(p.graph, n))
      collectives_[si] = std::make_unique<CollectiveStep>(p.graph, n, std::move(*c));
    else
      aten_[si] = std::make_unique<AtenCall>(p.graph, n, /*onednn_gemms=*/!p.plan.op_by_op);
  }
  for (const lowering::FusedKernel& k : p.plan.kernels) dims_.push_back(lowering::kernel_dims(k));
  // An op-by-op plan is transient (its compile is pending): not a program to count.
  replay_ = graph_replay_verdict(p);
  if (!p.plan.op_by_op) debug::Metrics::get().graph_replay(replay_.why());
  if (replay_.replayable && cuda_graphs_enabled() && execution_device().is_cuda() && cuda_graphs_built())
    graphs_ = std::make_unique<GraphReplays>(execution_device(), capture_cuda_graph);
}

Executable::~Executable() = default;
Executable::Executable(Executable&&) noexcept = default;

void Executable::run_step(size_t si, std::vector<at::Tensor>& env, const Bindings& b, int threads,
                          bool* nonfinite) const {
  const lowering::Program& p = *program_;
  const Step& s = p.plan.steps[si];
  std::optional<debug::TraceSpan> span;
  if (debug::trace_enabled()) {
    auto [name, kind] = lowering::step_label(p, s);
    span.emplace("execute", std::move(name), debug::TraceArgs{{"step", si}, {"kind", kind}});
  }
  switch (s.kind) {
    case Step::Kind::Kernel:
      // The CUDA target's kernels (loaded into the current context) run on the GPU.
      if (const lowering::DeviceKernel* dk = p.code ? p.code->device_kernel(s.kernel) : nullptr) {
        if (launch_device_kernel(p.plan.kernels[s.kernel], *dk, dims_[s.kernel], p.graph, env, b.scalars, b.into,
                                 p.plan.check_stores))
          *nonfinite = true;
        break;
      }
      if (p.plan.check_stores) {
        // The kernel's dims and, one past them, its NaN/Inf flag (this run's own).
        std::vector<int64_t> dims = dims_[s.kernel];
        dims.push_back(0);
        launch_kernel(p.plan.kernels[s.kernel], p.plan.kernel_fns[s.kernel], dims.data(), p.graph, env, b.scalars,
                      threads, b.into);
        if (dims.back()) *nonfinite = true;
        break;
      }
      launch_kernel(p.plan.kernels[s.kernel], p.plan.kernel_fns[s.kernel], dims_[s.kernel].data(), p.graph, env,
                    b.scalars, threads, b.into);
      break;
    case Step::Kind::Aten:
      if (const CollectiveStep* c = collectives_[si].get()) {
        // An input no later step reads may be reduced where it lies.
        ir::ValueId in = c->input();
        c->start(env, c->may_reuse_input() && dead_after(p, si, in, env) && env[in].is_contiguous());
        break;
      }
      aten_[si]->run(p.graph, p.graph.nodes()[s.node], env, b.scalars);
      break;
    case Step::Kind::AsStrided:
      run_view(p.graph, p.graph.nodes()[s.node], env);
      break;
    case Step::Kind::AsStridedScatter: {
      // A chain of scatters into one buffer (DDP filling a gradient bucket slice
      // by slice) copies the buffer once, not once per slice: a base that is a
      // step's result (not an input: the caller's data), that no later step
      // reads (the buffer plan frees it here, and a view of it would keep it),
      // held by nothing else, and not aliased by the value written, is written
      // in place.
      const ir::Node& n = p.graph.nodes()[s.node];
      ir::ValueId base = n.operands[0];
      bool reuse = dead_after(p, si, base, env) && !env[n.operands[1]].is_alias_of(env[base]);
      run_view(p.graph, n, env, reuse);
      break;
    }
    case Step::Kind::OpByOp:
      if (s.group >= 0) run_op_by_op_layer_norm(p.graph, p.plan.layer_norms[s.group], env, b.scalars);
      else run_op_by_op_node(p.graph, p.graph.nodes()[s.node], env, b.scalars);
      break;
  }
}

int32_t Executable::failed_operand(size_t si, const std::vector<int32_t>& failed_by) const {
  const lowering::Program& p = *program_;
  const Step& s = p.plan.steps[si];
  if (s.group >= 0) {
    for (ir::ValueId v : p.plan.layer_norms[s.group].reads())
      if (failed_by[v] >= 0) return failed_by[v];
    return -1;
  }
  if (s.kind == Step::Kind::Kernel) {
    for (const lowering::Access& a : p.plan.kernels[s.kernel].loads)
      if (a.scalar_index < 0 && failed_by[a.value] >= 0) return failed_by[a.value];
    return -1;
  }
  for (ir::ValueId v : p.graph.nodes()[s.node].operands)
    if (failed_by[v] >= 0) return failed_by[v];
  return -1;
}

void Executable::mark_results(size_t si, int32_t failure, std::vector<int32_t>& failed_by) const {
  const lowering::Program& p = *program_;
  const Step& s = p.plan.steps[si];
  if (s.group >= 0) {
    for (ir::ValueId v : p.plan.layer_norms[s.group].makes()) failed_by[v] = failure;
    return;
  }
  const auto& made = s.kind == Step::Kind::Kernel ? p.plan.kernels[s.kernel].stores : p.graph.nodes()[s.node].outputs;
  for (ir::ValueId v : made) failed_by[v] = failure;
}

RunResult Executable::run(const Bindings& b, int threads) const {
  if (graphs_) return graphs_->run(b, [this, threads](const Bindings& x) { return run(x, threads, StepObserver()); });
  return run(b, threads, StepObserver());
}

RunResult Executable::run(const Bindings& b, int threads, const StepObserver& after) const {
  auto t0 = std::chrono::steady_clock::now();
  const lowering::Program& p = *program_;
  // A compiled program's library steps take their big results from the pool
  // too; an op-by-op run (while its program compiles) is transient, and what it
  // made would only sit in the pool.
  std::optional<ProgramAllocations> pooled;
  if (!p.plan.op_by_op) pooled.emplace();
  const ir::Graph& g = p.graph;
  std::optional<debug::TraceSpan> span;
  if (debug::trace_enabled())
    span.emplace("execute", "program",
                 debug::TraceArgs{{"steps", p.plan.steps.size()}, {"kernels", p.plan.kernels.size()}, {"threads", threads}});
  std::vector<at::Tensor> env(g.values().size());
  for (size_t i = 0; i < g.inputs().size(); ++i) env[g.inputs()[i]] = b.inputs.at(i);
  RunResult r;
  // Per value, the failure it depends on (-1: none); empty until a step throws,
  // so a run without failures only tests that it is empty.
  std::vector<int32_t> failed_by;
  CollectivesInFlight in_flight;  // collectives started and not yet waited for
  for (size_t si = 0; si < p.plan.steps.size(); ++si) {
    // Every rank waits for its collectives in the same order it started them.
    if (!in_flight.empty() && (after || in_flight.read_by(p, p.plan.steps[si]))) in_flight.wait_all(env);
    int32_t skip = failed_by.empty() ? -1 : failed_operand(si, failed_by);
    if (skip >= 0) {
      mark_results(si, skip, failed_by);
    } else {
      try {
        run_step(si, env, b, threads, &r.stored_nonfinite);
        if (collectives_[si]) in_flight.started(g.nodes()[p.plan.steps[si].node].outputs);
      } catch (...) {
        const Step& s = p.plan.steps[si];
        uint32_t node = s.kind == Step::Kind::Kernel ? p.plan.kernels[s.kernel].nodes.front() : s.node;
        if (failed_by.empty()) failed_by.assign(g.values().size(), -1);
        r.failures.push_back({node, std::current_exception()});
        mark_results(si, static_cast<int32_t>(r.failures.size() - 1), failed_by);
      }
    }
    if (after && skip < 0) after(si, env);
    // The buffer plan: results no later step reads go back to the pool now.
    if (si < p.plan.frees.size())
      for (ir::ValueId v : p.plan.frees[si]) env[v].reset();
  }
  try {
    in_flight.wait_all(env);
  } catch (...) {
    // A collective that failed in flight: its results are lost (its node is the failure).
    if (failed_by.empty()) failed_by.assign(g.values().size(), -1);
    for (ir::ValueId v : in_flight.values()) {
      r.failures.push_back({g.value(v).node, std::current_exception()});
      failed_by[v] = static_cast<int32_t>(r.failures.size() - 1);
      env[v].reset();
    }
    in_flight.clear();
  }
  r.outputs.reserve(g.outputs().size());
  for (ir::ValueId v : g.outputs())
    r.outputs.push_back(env[v].defined() ? with_layout(env[v], g.value(v).type) : at::Tensor());
  if (!r.failures.empty()) {
    r.lost_by.reserve(g.outputs().size());
    for (ir::ValueId v : g.outputs()) r.lost_by.push_back(failed_by[v]);
  }
  debug::Metrics::get().add(debug::Counter::GraphsExecuted);
  debug::Metrics::get().time(
      "execute", std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  return r;
}

}  // namespace lazyjit::executor
