// Reading a scalar (.item(), bool(), int()) from a small part of the pending
// graph without cutting it. transformers' mask helpers ask `mask.all()` of the
// attention mask before the model runs: the answer needs a handful of ops on
// the inputs, but a sync would run (and end) the whole graph recorded so far.
// Here the ops the value depends on are copied into a graph of their own, which
// is compiled (and cached) like any other and run on the same inputs; the
// storage read gets its data (as from a sync), and the pending graph keeps
// recording. Only a part that nothing else recorded so far reads (checked
// below) runs apart. Every other storage whose value the part computes takes
// it from the part's program too, so the pending graph does not compute it
// again (generate's stop check computes the next token and the ids it extends).
#include <algorithm>
#include <chrono>
#include <unordered_map>
#include <unordered_set>

#include "debug/metrics.h"
#include "graph_ir/effects.h"

#include "runtime/runtime.h"
#include "tracer/lazyjit.h"
#include "tracer/shared_storage.h"
#include "tracer/trace_context.h"

namespace lazyjit::tracer {

using ir::OpKind;
using ir::ValueId;

namespace {
// A part is small: at most this many ops, touching at most this many elements
// (operands and results, summed over its ops).
constexpr size_t kMaxOps = 64;
constexpr int64_t kMaxElements = int64_t{1} << 17;
}  // namespace

std::optional<at::Tensor> TraceContext::evaluate_apart(const at::Tensor& t) {
  std::lock_guard<std::recursive_mutex> lock(mutex());
  LazyStorage& s = storage_of(t);
  // A strict region promises that nothing runs implicitly: the read syncs, and
  // the sync raises there.
  if (s.epoch != epoch_ || reads_only(s) || s.dtype != t.scalar_type() || capturing() || wants_op_origins() ||
      in_strict_region())
    return std::nullopt;
  const ir::Graph& g = *graph_;
  auto source = [&](uint32_t n) {
    return g.nodes()[n].kind == OpKind::Input || g.nodes()[n].kind == OpKind::Scalar;
  };
  // The ops s's value depends on, within the limits.
  std::vector<bool> part(g.nodes().size(), false);
  std::vector<uint32_t> work{g.value(s.value).node};
  size_t ops = 0;
  int64_t elements = 0;
  while (!work.empty()) {
    uint32_t n = work.back();
    work.pop_back();
    if (part[n]) continue;
    part[n] = true;
    if (source(n)) continue;
    const ir::Node& node = g.nodes()[n];
    // A collective (ir::has_effects) talks to other processes: it runs once,
    // in program order, with the rest of the graph.
    if (ir::has_effects(node) || ++ops > kMaxOps) return std::nullopt;
    for (ValueId v : node.outputs) elements += g.value(v).type.numel();
    for (ValueId v : node.operands) {
      elements += g.value(v).type.numel();
      work.push_back(g.value(v).node);
    }
    if (elements > kMaxElements) return std::nullopt;
  }
  // The part must stand apart from the rest: when an op outside it reads a
  // value the part computes (a loss read after its backward was recorded), the
  // rest would compute the part again, and a training step's graph would be
  // split at the read (its backward and update left pending into the next
  // step's graph): that read syncs, as a step's end.
  // Only what the graph still has to compute counts: the ops the other
  // storages it changed need (a value an earlier read apart took is dead).
  std::vector<ValueId> roots;
  for (const LazyStorage* o : touched_)
    if (o != &s && o->epoch == epoch_) roots.push_back(o->value);
  const std::vector<bool> live = ir::live_nodes(g, roots);
  size_t pending_ops = 0;
  for (uint32_t n = 0; n < g.nodes().size(); ++n) {
    if (source(n) || part[n] || !live[n]) continue;
    ++pending_ops;
    for (ValueId v : g.nodes()[n].operands)
      if (part[g.value(v).node] && !source(g.value(v).node)) return std::nullopt;
  }
  if (pending_ops == 0) return std::nullopt;  // the whole graph: a sync computes it once

  // The part as a graph of its own, in recording order, bound to the same data.
  ir::Graph sub;
  runtime::Bindings b;
  std::unordered_map<ValueId, ValueId> map;
  for (uint32_t n = 0; n < g.nodes().size(); ++n) {
    if (!part[n]) continue;
    const ir::Node& node = g.nodes()[n];
    if (node.kind == OpKind::Input) {
      map[node.outputs[0]] = sub.add_input(g.value(node.outputs[0]).type);
      b.inputs.push_back(inputs_.at(std::get<int64_t>(node.attrs[0].value)));
    } else if (node.kind == OpKind::Scalar) {
      map[node.outputs[0]] = sub.add_scalar(g.value(node.outputs[0]).type.dtype, std::get<bool>(node.attrs[1].value));
      b.scalars.push_back(scalars_.at(std::get<int64_t>(node.attrs[0].value)));
    } else {
      std::vector<ValueId> operands;
      for (ValueId v : node.operands) operands.push_back(map.at(v));
      std::vector<ir::TensorType> types;
      for (ValueId v : node.outputs) types.push_back(g.value(v).type);
      std::vector<ValueId> outs = sub.add_node(node.kind, std::move(operands), node.attrs, std::move(types));
      for (size_t i = 0; i < outs.size(); ++i) map[node.outputs[i]] = outs[i];
    }
  }
  // The storage's whole value: it becomes the storage's data. So does the
  // value of every other storage the graph changed that the part computes
  // (generate's next tokens, the ids they are appended to, the unfinished
  // mask, read by the stop check): the part's program has it anyway, and the
  // pending graph would otherwise compute it again at its sync.
  sub.add_output(map.at(s.value));
  std::vector<std::pair<LazyStorage*, size_t>> also;  // storage, output index
  std::unordered_map<ValueId, size_t> output_of{{s.value, 0}};
  for (LazyStorage* o : touched_) {
    if (o == &s || o->epoch != epoch_) continue;
    const uint32_t n = g.value(o->value).node;
    if (!part[n] || source(n)) continue;
    auto [it, fresh] = output_of.emplace(o->value, output_of.size());
    if (fresh) sub.add_output(map.at(o->value));
    also.emplace_back(o, it->second);
  }
  const auto t0 = std::chrono::steady_clock::now();
  runtime::RunResult r;
  try {
    r = runtime::Runtime::get().run(sub, b, call_site());
  } catch (const std::exception&) {
    if (runtime::interrupt_seen()) throw;
    return std::nullopt;  // a compile that failed or was refused: the sync says why
  }
  // A failing op: the usual sync raises its error where it was recorded.
  if (!r.failures.empty() || r.outputs.size() != output_of.size() ||
      std::any_of(r.outputs.begin(), r.outputs.end(), [](const at::Tensor& o) { return !o.defined(); }))
    return std::nullopt;
  debug::Metrics::get().time("read apart (.item() without a cut)",
                             std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  // The storages hold their values now, as after a sync: reading them again
  // runs nothing (later ops read their data as inputs), and the pending graph
  // stops writing them. Each owns its elements (a result may be an input's
  // memory, or shared by two storages), as after a sync (take_result).
  std::unordered_set<const void*> taken;
  for (const at::Tensor& in : b.inputs) taken.insert(in.storage().data());
  untouch(s);
  take_result(s, r.outputs[0], taken);
  for (auto [o, i] : also) {
    untouch(*o);
    take_result(*o, r.outputs[i], taken);
  }
  return s.data.as_strided(t.sizes(), t.strides(), s.data.storage_offset() + t.storage_offset());
}

}  // namespace lazyjit::tracer
