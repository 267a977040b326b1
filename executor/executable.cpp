#include "executor/executable.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "debug/metrics.h"
#include "debug/trace.h"
#include "executor/buffer_pool.h"
#include "executor/collective_in_flight.h"
#include "executor/op_by_op_node.h"
#include "executor/step_thunks.h"
#include "executor/store_in_place.h"
#include "executor/tensor_layout.h"
#include "lowering/step_label.h"

namespace lazyjit::executor {

at::Tensor with_layout(const at::Tensor& t, const ir::TensorType& type) {
  if (t.sizes().equals(type.sizes) && t.strides().equals(type.strides)) return t;
  debug::Metrics::get().add(debug::Counter::LayoutCopies);
  at::Tensor out = at::empty_strided(type.sizes, type.strides, t.options());
  out.copy_(t);
  return out;
}

struct Executable::OverwriteChecks {
  std::mutex mu;
  // (output << 32 | input): the step after which the output may be computed
  // into the input (0 for a compiled plan: where its kernel stores), or -1;
  // and (op-by-op plans) the input's last reader.
  std::unordered_map<uint64_t, std::pair<int64_t, int64_t>> allowed;
};

Executable::Executable(std::shared_ptr<const lowering::Program> program, const ExecutionTarget& target)
    : program_(std::move(program)), overwrites_(std::make_unique<OverwriteChecks>()) {
  const lowering::Program& p = *program_;
  thunks_ = make_step_thunks(p, target);
  replay_ = graph_replay_verdict(p, thunks_);
  // An op-by-op plan is transient (its compile is pending): not a program to count.
  if (!p.plan.op_by_op) debug::Metrics::get().graph_replay(replay_.why());
  if (replay_.replayable && target.replays) replays_ = target.replays(target.device);
}

Executable::~Executable() = default;
Executable::Executable(Executable&&) noexcept = default;

void Executable::run_step(size_t si, StepRun& r) const {
  std::optional<debug::TraceSpan> span;
  if (debug::trace_enabled()) {
    auto [name, kind] = lowering::step_label(*program_, program_->plan.steps[si]);
    span.emplace("execute", std::move(name), debug::TraceArgs{{"step", si}, {"kind", kind}});
  }
  thunks_[si]->run(r);
}

int32_t Executable::failed_operand(size_t si, const std::vector<int32_t>& failed_by) const {
  for (ir::ValueId v : thunks_[si]->reads())
    if (failed_by[v] >= 0) return failed_by[v];
  return -1;
}

void Executable::mark_results(size_t si, int32_t failure, std::vector<int32_t>& failed_by) const {
  for (ir::ValueId v : thunks_[si]->writes()) failed_by[v] = failure;
}

void Executable::add_overwrites(Bindings& b) const {
  const lowering::Program& p = *program_;
  // How many inputs hold each storage: an input whose memory another input
  // also reads is not written.
  std::unordered_map<const void*, int> holders;
  for (const at::Tensor& t : b.inputs)
    if (t.defined() && t.has_storage()) ++holders[t.storage().unsafeGetStorageImpl()];
  std::lock_guard<std::mutex> lock(overwrites_->mu);  // once per run, not per offered tensor
  for (auto [out, in] : b.may_overwrite) {
    if (out >= p.graph.outputs().size() || in >= b.inputs.size() || in >= p.graph.inputs().size()) continue;
    const at::Tensor& t = b.inputs[in];
    if (!t.defined() || !t.has_storage() || holders[t.storage().unsafeGetStorageImpl()] != 1) continue;
    auto [it, fresh] = overwrites_->allowed.emplace(uint64_t(out) << 32 | in, std::pair<int64_t, int64_t>{-1, -1});
    if (fresh)
      it->second = p.plan.op_by_op ? copy_step(out, in)
                                   : std::pair<int64_t, int64_t>{can_store_into_input(p, out, in) ? 0 : -1, -1};
    const auto [step, last_read] = it->second;
    if (step < 0) continue;
    if (p.plan.op_by_op) {
      b.copies.push_back({static_cast<size_t>(step), {p.graph.outputs()[out], t}});
      if (last_read >= 0) b.released.push_back({static_cast<size_t>(last_read), t});
    } else {
      b.into.emplace_back(p.graph.outputs()[out], t);
    }
  }
  // In step order: the run walks them with one cursor.
  auto by_step = [](const auto& x, const auto& y) { return x.first < y.first; };
  std::stable_sort(b.copies.begin(), b.copies.end(), by_step);
  std::stable_sort(b.released.begin(), b.released.end(), by_step);
  b.may_overwrite.clear();
}

std::pair<int64_t, int64_t> Executable::copy_step(size_t out, size_t in) const {
  const std::pair<int64_t, int64_t> no{-1, -1};
  const ir::Graph& g = program_->graph;
  const ir::ValueId v = g.outputs()[out], x = g.inputs()[in];
  if (std::count(g.outputs().begin(), g.outputs().end(), v) != 1) return no;
  const ir::TensorType &vt = g.value(v).type, &xt = g.value(x).type;
  if (vt.dtype != xt.dtype || vt.sizes != xt.sizes || vt.strides != ir::contiguous_strides(vt.sizes) ||
      xt.strides != vt.strides || g.producer(v).kind == ir::OpKind::AsStrided)
    return no;
  // The input and what may alias it: its views and what library steps make from it.
  std::vector<bool> alias(g.values().size(), false);
  alias[x] = true;
  for (const ir::Node& n : g.nodes()) {
    if (!may_alias_operand(n)) continue;
    if (std::any_of(n.operands.begin(), n.operands.end(), [&](ir::ValueId o) { return alias[o]; }))
      for (ir::ValueId o : n.outputs) alias[o] = true;
  }
  for (ir::ValueId o : g.outputs())
    if (alias[o]) return no;
  int64_t made = -1, last_read = -1;
  for (size_t si = 0; si < thunks_.size(); ++si) {
    for (ir::ValueId w : thunks_[si]->writes())
      if (w == v) made = static_cast<int64_t>(si);
    for (ir::ValueId r : thunks_[si]->reads())
      if (alias[r]) last_read = static_cast<int64_t>(si);
  }
  if (made < 0) return no;
  return {std::max(made, last_read), last_read};
}

RunResult Executable::run(const Bindings& b, int threads) const {
  if (!b.may_overwrite.empty()) {
    Bindings x{b.inputs, b.scalars, b.into, b.may_overwrite, b.copies, b.released};
    add_overwrites(x);
    return run(x, threads);
  }
  if (replays_) return replays_->run(b, [this, threads](const Bindings& x) { return run(x, threads, StepObserver()); });
  return run(b, threads, StepObserver());
}

namespace {
bool in_memory_of(const at::Tensor& t, const at::Tensor& input) {
  return t.has_storage() && t.storage().is_alias_of(input.storage()) && t.storage_offset() == input.storage_offset();
}

// Whether a value other than `v` and the graph's inputs still holds the
// memory of `input`: a step computed it there (Bindings::released) and a
// later step reads it. An input itself is not counted (its memory is what
// is released).
bool read_later(const std::vector<at::Tensor>& env, ir::ValueId v, const at::Tensor& input) {
  for (size_t w = 0; w < env.size(); ++w)
    if (w != v && env[w].defined() && env[w].has_storage() && env[w].storage().is_alias_of(input.storage()) &&
        !env[w].is_same(input))
      return true;
  return false;
}
}  // namespace

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
  StepRun step_run{env, b, threads, r.stored_nonfinite, in_flight};
  size_t next_copy = 0, next_release = 0;  // b.copies and b.released are in step order (add_overwrites)
  std::unordered_set<const c10::StorageImpl*> released;
  if (!b.released.empty()) step_run.released = &released;
  for (size_t si = 0; si < p.plan.steps.size(); ++si) {
    for (; next_release < b.released.size() && b.released[next_release].first <= si; ++next_release)
      released.insert(b.released[next_release].second.storage().unsafeGetStorageImpl());
    // A step waits for the collectives in flight it reads, the others go on
    // (collective_in_flight.h); a step observer sees every result: all of them.
    if (after)
      in_flight.wait_all(env, static_cast<int64_t>(si));
    else
      in_flight.wait_read(g, thunks_[si]->reads(), env, static_cast<int64_t>(si));
    int32_t skip = failed_by.empty() ? -1 : failed_operand(si, failed_by);
    if (skip >= 0) {
      mark_results(si, skip, failed_by);
    } else {
      try {
        run_step(si, step_run);
      } catch (...) {
        if (failed_by.empty()) failed_by.assign(g.values().size(), -1);
        r.failures.push_back({thunks_[si]->node(), std::current_exception()});
        mark_results(si, static_cast<int32_t>(r.failures.size() - 1), failed_by);
      }
    }
    if (after && skip < 0) after(si, env);
    // The buffer plan: results no later step reads go back to the pool now,
    // but for a collective's still in flight (one whose result nothing reads,
    // run for its effect on the other processes): the end of the run waits
    // for it, and the transport writes its buffer until then.
    if (si < p.plan.frees.size())
      for (ir::ValueId v : p.plan.frees[si])
        if (in_flight.empty() || !in_flight.holds(v)) env[v].reset();
    // Then the outputs to store into inputs (after the frees: a value computed in
    // an input's memory and read last by this step no longer holds it).
    for (; next_copy < b.copies.size() && b.copies[next_copy].first <= si; ++next_copy) {
      const auto& c = b.copies[next_copy].second;
      if (b.copies[next_copy].first == si && skip < 0 && env[c.first].defined() &&
          (in_memory_of(env[c.first], c.second) || !read_later(env, c.first, c.second))) {
        if (!in_memory_of(env[c.first], c.second)) c.second.copy_(env[c.first]);
        env[c.first] = c.second;
      }
    }
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
