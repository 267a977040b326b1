#include "tracer/trace_context.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <optional>
#include <atomic>
#include <chrono>
#include <unordered_map>

#include "debug/metrics.h"
#include "debug/trace.h"
#include "bridge/aten_ir.h"
#include "graph_ir/effects.h"
#include "graph_ir/node_name.h"
#include "runtime/config.h"
#include "runtime/runtime.h"
#include "runtime/sync_log.h"
#include "tracer/call_site.h"
#include "tracer/input_names.h"
#include "tracer/lazyjit.h"
#include "tracer/op_events.h"
#include "tracer/shared_storage.h"
#include "tracer/step_mode.h"

namespace lazyjit::tracer {

using ir::OpKind;
using ir::TensorType;
using ir::ValueId;

namespace {
// Epochs are unique across contexts, so a storage's epoch names one graph.
uint64_t new_epoch() {
  static std::atomic<uint64_t> last{0};
  return ++last;
}
}  // namespace

TraceContext::TraceContext() : graph_(std::make_unique<ir::Graph>()), epoch_(new_epoch()) {}

bool TraceContext::reads_only(const LazyStorage& s) const {
  if (!s.data.defined()) return false;
  const ir::Node& p = graph_->producer(s.value);
  return p.kind == OpKind::Input && input_owner_[std::get<int64_t>(p.attrs[0].value)] == &s;
}

void TraceContext::claim(LazyStorage& s, bool write, const char* reason) {
  TraceContext* o = pending_owner(s);
  if (!o || o == this) return;
  if (!o->reads_only(s)) return o->run_pending(reason, call_site());
  if (!write) return;
  o->untouch(s);  // it keeps reading the elements it read, through its input
  s.epoch = 0;
}

std::optional<ValueId> TraceContext::shared_input(const LazyStorage& s) {
  if (shared_.empty()) return std::nullopt;
  auto it = shared_.find(const_cast<LazyStorage*>(&s));
  if (it == shared_.end()) return std::nullopt;
  size_t k = std::get<int64_t>(graph_->producer(it->second).attrs[0].value);
  const at::Tensor* bound = k < inputs_.size() ? &inputs_[k] : nullptr;
  if (bound && s.data.defined() && bound->storage().unsafeGetStorageImpl() == s.data.storage().unsafeGetStorageImpl() &&
      bound->storage_offset() == s.data.storage_offset())
    return it->second;
  shared_.erase(it);  // its data was replaced since
  return std::nullopt;
}

void TraceContext::touch(LazyStorage& s) {
  s.epoch = epoch_;
  s.owner = this;
  if (s.touched_epoch == epoch_) return;
  s.touched_epoch = epoch_;
  s.touched_index = touched_.size();
  touched_.push_back(&s);
}

void TraceContext::untouch(LazyStorage& s) {
  if (s.touched_epoch != epoch_) return;
  LazyStorage* last = touched_.back();
  touched_[s.touched_index] = last;
  last->touched_index = s.touched_index;
  touched_.pop_back();
  s.touched_epoch = 0;
}

static bool dense_cover(const at::Tensor& t, int64_t storage_numel) {
  return t.storage_offset() == 0 && t.numel() == storage_numel && t.is_non_overlapping_and_dense();
}

static void check_not_lost(const LazyStorage& s) {
  TORCH_CHECK(!s.lost, "lazyjit: this tensor's value was lost because the sync that computed it failed: ",
              *s.lost);
}

ValueId TraceContext::storage_value(LazyStorage& s, const at::Tensor* hint) {
  if (hint && s.dtype != hint->scalar_type() && (s.epoch == epoch_ || s.data.defined())) {
    // A tensor set_ onto a storage of another dtype (at::storage_copy's byte
    // views, Tensor.set_): the graph has no bitcast, and reading the elements
    // as the other dtype would give wrong numbers. Such a tensor can be copied
    // (copy_, .cpu()); nothing else.
    TORCH_CHECK(false, "lazyjit: an op reads a ", hint->scalar_type(), " tensor whose storage holds ", s.dtype,
                " elements (a dtype-reinterpreting view, e.g. from set_); lazyjit can only copy such a "
                "tensor (copy_, .cpu()), at ", call_site());
  }
  if (s.epoch == epoch_) return s.value;
  claim(s, false);
  check_not_lost(s);
  if (auto v = shared_input(s)) return *v;
  if (hint && s.dtype != hint->scalar_type()) {
    s.numel = static_cast<int64_t>(hint->storage().nbytes() / hint->element_size());
    s.dtype = hint->scalar_type();
  }
  TensorType type{bridge::from_aten(s.dtype), {s.numel}, {1}};
  if (hint && dense_cover(*hint, s.numel)) {
    type.sizes = hint->sizes().vec();
    type.strides = hint->strides().vec();
  }
  if (s.data.defined()) {
    // Another graph that reads it unchanged keeps it; this one shares its data.
    bool shared = pending_owner(s) != nullptr;
    ValueId v = graph_->add_input(type);
    marks_ |= s.marks;
    inputs_.push_back(s.data.as_strided(type.sizes, type.strides, s.data.storage_offset()));
    input_owner_.push_back(shared ? nullptr : &s);
    if (shared) return shared_[&s] = v;
    s.value = v;
  } else {
    // Uninitialized memory (any content is valid): zeros made where data lives,
    // read as an input like any storage's data, so that a graph reading a fresh
    // storage is the graph that reads it once it holds data (DDP's gradient
    // buckets, new at its first steps, then filled: one program for both).
    s.data = at::zeros({s.numel}, on_device(s.dtype));
    return storage_value(s, hint);
  }
  touch(s);
  return s.value;
}

ValueId TraceContext::read(const at::Tensor& t, bool own_layout) {
  LazyStorage& s = storage_of(t);
  ValueId base = storage_value(s, &t);
  const TensorType& bt = graph_->value(base).type;
  if (t.storage_offset() == 0 && t.sizes().equals(bt.sizes) && t.strides().equals(bt.strides))
    return base;
  TensorType view{bt.dtype, t.sizes().vec(), ir::contiguous_strides(t.sizes().vec())};
  if (own_layout) view.strides = t.strides().vec();
  return graph_->add_node1(OpKind::AsStrided, {base},
                           {{t.sizes().vec(), true}, {t.strides().vec(), true}, {t.storage_offset(), true}},
                           view);
}

void TraceContext::write(const at::Tensor& t, ValueId v) {
  LazyStorage& s = storage_of(t);
  if (s.epoch != epoch_) claim(s, true);
  const TensorType& vt = graph_->value(v).type;
  if (dense_cover(t, s.numel) && t.sizes().equals(vt.sizes) && t.strides().equals(vt.strides) &&
      vt.dtype == bridge::from_aten(s.dtype)) {
    s.value = v;
  } else {
    ValueId base = storage_value(s, &t);
    s.value = graph_->add_node1(OpKind::AsStridedScatter, {base, v},
                                {{t.sizes().vec(), true}, {t.strides().vec(), true}, {t.storage_offset(), true}},
                                graph_->value(base).type);
  }
  touch(s);
}

bool TraceContext::is_fresh(const at::Tensor& t) {
  LazyStorage& s = storage_of(t);
  claim(s, true);
  return s.epoch != epoch_ && !s.data.defined() && t.storage_offset() == 0 &&
         t.is_non_overlapping_and_dense() &&
         static_cast<size_t>(t.numel() * t.element_size()) == t.storage().nbytes();
}

void TraceContext::assign_data(const at::Tensor& t, const at::Tensor& cpu) {
  LazyStorage& s = storage_of(t);
  claim(s, true);
  // Data lives where programs run (a CPU result of a kernel run op by op under
  // the CUDA target moves there; on the CPU target nothing moves).
  const c10::Device dev = data_device();
  at::Tensor d = cpu.device() == dev ? cpu : cpu.to(dev);
  set_storage_data(s, data_alias(d, {d.numel()}, {1}, d.storage_offset()));
  s.numel = cpu.numel();
  s.dtype = cpu.scalar_type();
  s.epoch = 0;
  s.owner = this;
  s.lost.reset();
  untouch(s);
}

at::Tensor TraceContext::new_tensor(ValueId v, const at::Tensor& geometry) {
  const TensorType& type = graph_->value(v).type;
  at::ScalarType dt = bridge::to_aten(type.dtype);
  bool regeom = geometry.defined() && (!geometry.sizes().equals(type.sizes) || !geometry.strides().equals(type.strides));
  at::Tensor t = regeom ? make_tensor(make_storage(type.numel(), dt), dt, geometry.sizes(), geometry.strides(), 0)
                        : make_tensor(make_storage(type.numel(), dt), dt, type.sizes, type.strides, 0);
  LazyStorage& s = storage_of(t);
  s.value = v;
  touch(s);
  return t;
}

ValueId TraceContext::input(const at::Tensor& cpu) {
  ValueId v = graph_->add_input(TensorType{bridge::from_aten(cpu.scalar_type()), cpu.sizes().vec(),
                                           cpu.strides().vec()});
  inputs_.push_back(cpu);
  input_owner_.push_back(nullptr);
  return v;
}

ValueId TraceContext::scalar(const c10::Scalar& sc) {
  ir::DType dt = sc.isFloatingPoint() ? ir::DType::Float64 : sc.isBoolean() ? ir::DType::Bool : ir::DType::Int64;
  scalars_.push_back(bridge::slot_from_scalar(sc));
  return graph_->add_scalar(dt);
}

ValueId TraceContext::scalar_tensor(const at::Tensor& cpu) {
  ir::DType dt = bridge::from_aten(cpu.scalar_type());
  TORCH_CHECK(ir::is_floating(dt) || ir::is_integral(dt, true),
              "lazyjit: 0-d CPU tensor operand of dtype ", cpu.scalar_type(), " is not supported yet");
  // Read the element directly: item() would go through the dispatcher (~1 us).
  // Only a CPU tensor's element can be read here (check_devices refuses others).
  TORCH_CHECK(cpu.is_cpu(), "lazyjit: a 0-d tensor operand on ", cpu.device(),
              " (only 0-d CPU tensors may join lazyjit tensors)");
  c10::Scalar value;
  switch (cpu.scalar_type()) {
    case at::kDouble: value = *cpu.const_data_ptr<double>(); break;
    case at::kFloat: value = static_cast<double>(*cpu.const_data_ptr<float>()); break;
    case at::kLong: value = *cpu.const_data_ptr<int64_t>(); break;
    case at::kInt: value = static_cast<int64_t>(*cpu.const_data_ptr<int32_t>()); break;
    case at::kBool: value = *cpu.const_data_ptr<bool>(); break;
    default: value = cpu.item();
  }
  scalars_.push_back(bridge::slot_from_scalar(value));
  return graph_->add_scalar(dt, cpu.unsafeGetTensorImpl()->is_wrapped_number());
}

void TraceContext::note_redraw(std::function<at::Tensor()> redraw) {
  if (redraws_) redraws_->emplace_back(inputs_.size() - 1, std::move(redraw));
}

void TraceContext::note_fallible_node(uint32_t node) {
  origins_.push_back({node, std::this_thread::get_id(), call_site(), node, {}});
}

bool TraceContext::wants_op_origins() {
  const runtime::Runtime& rt = runtime::Runtime::get();
  return rt.debug_nans() || rt.check_graphs() || has_lazy_op_hooks() || runtime::process_config().op_timing;
}

void TraceContext::note_op_nodes(uint32_t first, const std::string& op) {
  const auto end = static_cast<uint32_t>(graph_->nodes().size());
  if (first >= end) return;
  // Kept in node order: the op's own library node may already be noted.
  while (!origins_.empty() && origins_.back().node >= first) origins_.pop_back();
  std::string site = call_site();
  for (uint32_t n = first; n < end; ++n) origins_.push_back({n, std::this_thread::get_id(), site, first, op});
}

const TraceContext::NodeOrigin* TraceContext::origin(uint32_t node) const {
  auto it = std::lower_bound(origins_.begin(), origins_.end(), node,
                             [](const NodeOrigin& o, uint32_t n) { return o.node < n; });
  return it != origins_.end() && it->node == node ? &*it : nullptr;
}

void TraceContext::reset() {
  // The next graph reuses this one's node and value lists (no regrowth while
  // recording, no freeing them at each sync), unless they grew big.
  constexpr size_t kKeptNodes = 4096;
  if (graph_->nodes().capacity() <= kKeptNodes && graph_->values().capacity() <= 2 * kKeptNodes) graph_->clear();
  else graph_ = std::make_unique<ir::Graph>();
  epoch_ = new_epoch();
  origins_.clear();
  shared_.clear();
  inputs_.clear();
  input_owner_.clear();
  scalars_.clear();
  marks_ = 0;
  touched_.clear();
}

void TraceContext::sync(const std::string& reason, const std::string& site) {
  std::lock_guard<std::recursive_mutex> lock(mutex());
  raise_deferred();
  run_pending(reason, site);
}

// A sync, step by step: refuse it in a strict region, choose the outputs,
// run the graph through the runtime (runtime/pipeline.cpp is the map from
// there), give each storage its result, then report what the run found.
void TraceContext::run_pending(const std::string& reason, const std::string& site) {
  std::lock_guard<std::recursive_mutex> lock(mutex());
  if (graph_->nodes().empty()) return;
  refuse_in_strict_region(reason, site);
  const ir::Graph::OutputMark mark = graph_->output_mark();
  Results results = choose_outputs();
  // Nothing to compute for a live tensor: the graph is dropped, unless it holds
  // a collective, which runs whether or not anything reads it (ir::has_effects).
  if (results.empty() && !ir::holds_effects(*graph_)) {
    reset();
    return;
  }
  debug::Metrics::get().sync(reason, site);
  std::vector<OpEvent> events;
  runtime::Bindings b{std::move(inputs_), std::move(scalars_)};
  offer_overwrites(b, results);
  runtime::SyncResult r = run_graph(reason, site, b, results, mark, &events);
  write_back(r, b, results);
  if (!r.failures.empty()) return fail_steps(r, results, site);
  reset();
  // After the reset: a hook may record ops, or raise, on a clean graph.
  report_run(events, r, site);
}

void TraceContext::refuse_in_strict_region(const std::string& reason, const std::string& site) const {
  if (in_strict_region() && reason != "lazyjit.sync()")
    throw StrictError("lazyjit.strict: an implicit sync in a strict region (" + reason + ")" +
                      (site.empty() ? std::string() : " at " + site) +
                      "; call lazyjit.sync() where the region may sync (nothing ran)");
}

TraceContext::Results TraceContext::choose_outputs() {
  // Live storages whose elements the graph changed, ordered by the value each
  // holds: value numbers follow the trace, so the same program gets the same
  // output order (and key) whichever tensors the caller happens to keep.
  std::vector<LazyStorage*> live(touched_.begin(), touched_.end());
  std::sort(live.begin(), live.end(), [](auto* a, auto* b) {
    return a->value != b->value ? a->value < b->value : a->seq < b->seq;
  });
  Results results;
  std::unordered_map<ValueId, size_t> output_index;
  for (LazyStorage* s : live) {
    const ir::Node& p = graph_->producer(s->value);
    if (p.kind == OpKind::Input && input_owner_[std::get<int64_t>(p.attrs[0].value)] == s) continue;
    auto [it, fresh] = output_index.emplace(s->value, graph_->outputs().size());
    if (fresh) graph_->add_output(s->value);
    results.emplace_back(s, it->second);
  }
  return results;
}

runtime::SyncResult TraceContext::run_graph(const std::string& reason, const std::string& site,
                                            runtime::Bindings& b, const Results& results,
                                            const ir::Graph::OutputMark& mark, std::vector<OpEvent>* events) {
  // LAZYJIT_LOG=syncs / LAZYJIT_DEBUG>=1: one line per sync (runtime/sync_log.h).
  static const bool log_syncs = runtime::process_config().log_syncs;
  const size_t log_ops = log_syncs ? graph_->nodes().size() - graph_->inputs().size() - graph_->scalars().size() : 0;
  const auto log_t0 = log_syncs ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point();
  std::optional<debug::TraceSpan> span;
  if (debug::trace_enabled())
    span.emplace("sync", "sync " + reason,
                 debug::TraceArgs{{"reason", reason}, {"site", site}, {"nodes", graph_->nodes().size()},
                                  {"outputs", graph_->outputs().size()}, {"inputs", b.inputs.size()}});
  runtime::SyncResult r;
  try {
    // Inputs marked dynamic get shape-generic kernels from the first compile;
    // marked static, kernels for their exact sizes (dynamic wins if both).
    std::optional<runtime::Shapes> shapes;
    if (marks_ & LazyStorage::kMarkStatic) shapes = runtime::Shapes::Off;
    if (marks_ & LazyStorage::kMarkDynamic) shapes = runtime::Shapes::All;
    // Hooks on compiled ops and the per-op timing table see every op's values.
    runtime::RunObserver observer;
    const bool hooks = has_lazy_op_hooks();
    if (hooks || runtime::process_config().op_timing)
      observer = [&](const runtime::ObservedRun& run) {
        *events = op_events(run, [this](uint32_t node) {
          const NodeOrigin* o = origin(node);
          return o ? NodeOp{o->first, o->op, o->site} : NodeOp{};
        }, /*copy=*/hooks);
      };
    // An input's node answers with the input's name in the user's code
    // (tracer/input_names.h), looked up on the first ask: only a compile asks.
    auto names = std::make_shared<std::optional<std::vector<std::string>>>();
    r = runtime::Runtime::get().run(*graph_, b, site, shapes, [this, names](uint32_t node) {
      const NodeOrigin* o = origin(node);
      if (o) return o->site;
      if (node >= graph_->nodes().size() || graph_->nodes()[node].kind != OpKind::Input) return std::string();
      if (!*names) {
        std::vector<const LazyStorage*> storages(input_owner_.begin(), input_owner_.end());
        for (const auto& [s, v] : shared_) {
          size_t k = static_cast<size_t>(std::get<int64_t>(graph_->nodes()[graph_->value(v).node].attrs[0].value));
          if (k < storages.size()) storages[k] = s;
        }
        *names = input_names(storages);
      }
      size_t k = static_cast<size_t>(std::get<int64_t>(graph_->nodes()[node].attrs[0].value));
      return k < (*names)->size() ? (**names)[k] : std::string();
    }, observer);
  } catch (const std::exception& e) {
    if (runtime::interrupt_seen() || dynamic_cast<const runtime::CompileRefused*>(&e)) {
      // Ctrl-C stopped the compile: nothing ran, so the graph goes back to
      // recording as it was before this sync, and everything stays pending.
      if (runtime::interrupt_seen()) runtime::clear_interrupt();
      graph_->rewind_outputs(mark);
      inputs_ = std::move(b.inputs);
      scalars_ = std::move(b.scalars);
      throw;
    }
    // The program could not be made: the graph is dropped and every storage it
    // was to compute remembers why, so later reads raise instead of lying.
    auto why = std::make_shared<const std::string>(e.what());
    for (auto [s, i] : results) {
      s->lost = why;
      s->epoch = 0;
      s->data = at::Tensor();
    }
    reset();
    throw;
  }
  if (log_syncs)
    std::fprintf(stderr, "lazyjit: %s\n",
                 runtime::sync_line(reason, site, log_ops, r.note,
                                    std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - log_t0).count())
                     .c_str());
  return r;
}

// A storage whose old value the graph reads as an input and whose new value
// it computes, with nothing else holding the old value's memory (no other
// graph's input, no other input of this one, no shared memory): the program
// may compute the new value in that memory (Bindings::may_overwrite), as
// eager's in-place ops do. Without it an optimizer step held every parameter
// and state tensor twice at its end: GPT-2-small widths' AdamW step peaked at
// 2.99 GB against eager's 1.99.
void TraceContext::offer_overwrites(runtime::Bindings& b, const Results& results) const {
  runtime::Runtime& rt = runtime::Runtime::get();
  // NaN pinning reruns the graph from its inputs: they must stay as they were.
  if (results.empty() || rt.debug_nans()) return;
  std::unordered_map<const LazyStorage*, size_t> input_of;
  for (size_t k = 0; k < input_owner_.size() && k < b.inputs.size(); ++k)
    if (input_owner_[k]) input_of.emplace(input_owner_[k], k);
  for (auto [s, i] : results) {
    auto it = input_of.find(s);
    if (it == input_of.end() || s->shm.defined() || !s->data.defined()) continue;
    const at::Tensor& in = b.inputs[it->second];
    // Held by the storage and by this input alone.
    if (!in.defined() || !in.has_storage() ||
        in.storage().unsafeGetStorageImpl() != s->data.storage().unsafeGetStorageImpl() ||
        s->data.storage().use_count() != 2 || s->data.use_count() != 1 || in.use_count() != 1)
      continue;
    b.may_overwrite.emplace_back(i, it->second);
  }
}

void TraceContext::write_back(const runtime::SyncResult& r, const runtime::Bindings& b, const Results& results) {
  // A result may be an input's memory or shared by two storages: each storage
  // must own its elements, so later in-place steps cannot leak between them.
  // A result computed in its own storage's memory (offer_overwrites) is that
  // storage's already.
  std::unordered_set<const void*> taken;
  for (const at::Tensor& in : b.inputs) taken.insert(in.storage().data());
  for (auto [s, i] : results) {
    at::Tensor t = r.outputs[i];
    if (!t.defined()) continue;  // depends on a failed step
    const bool own = s->data.defined() && t.data_ptr() == s->data.data_ptr() && t.is_contiguous() &&
                     std::any_of(b.may_overwrite.begin(), b.may_overwrite.end(), [&](auto o) { return o.first == i; });
    take_result(*s, std::move(t), taken, own);
  }
}

void TraceContext::take_result(LazyStorage& s, at::Tensor t, std::unordered_set<const void*>& taken, bool own) {
  if (!taken.insert(t.storage().data()).second && !own) t = t.clone(at::MemoryFormat::Preserve);
  set_storage_data(s, t.as_strided({t.numel()}, {1}, t.storage_offset()));
  s.epoch = 0;
}

void TraceContext::report_run(const std::vector<OpEvent>& events, const runtime::SyncResult& r,
                              const std::string& site) {
  if (!events.empty()) {
    if (runtime::process_config().op_timing) add_to_timing_table(events);
    if (has_lazy_op_hooks()) call_lazy_op_hooks(events);
  }
  // The tensors keep what was computed; the sync says which op's code is wrong.
  if (!r.check_report.empty())
    throw CheckError("lazyjit.check: in what the sync" + (site.empty() ? std::string() : " at " + site) +
                     " computed, " + r.check_report);
  // The tensors keep what was computed; the sync says where a NaN/Inf came from.
  if (!r.nan_report.empty())
    throw NonFiniteError("lazyjit.debug_nans: a NaN or Inf in what the sync" +
                                  (site.empty() ? std::string() : " at " + site) + " computed: " + r.nan_report);
}

void TraceContext::fail_steps(runtime::RunResult& r, const Results& results, const std::string& site) {
  const std::thread::id me = std::this_thread::get_id();
  std::vector<std::shared_ptr<const std::string>> why;
  std::vector<std::thread::id> owner;
  for (const runtime::StepFailure& f : r.failures) {
    std::string op = "a step of the program";
    if (f.node != runtime::Runtime::kNoNode) {
      op = ir::node_op_name(graph_->nodes()[f.node], "lazyjit::");
    }
    const NodeOrigin* o = f.node == runtime::Runtime::kNoNode ? nullptr : origin(f.node);
    std::string recorded = o && !o->site.empty() ? ", recorded at " + o->site + "," : "";
    std::string message;
    try {
      std::rethrow_exception(f.error);
    } catch (c10::Error& e) {
      message = e.msg();
      // Eager's error, with its type and message; the context says which op it
      // was, since it surfaces at a sync rather than at the op.
      e.add_context("lazyjit: raised by " + op + recorded + " when the sync" +
                    (site.empty() ? "" : " at " + site) +
                    " ran it; the values computed from its result are lost, all others were kept");
    } catch (const std::exception& e) {
      message = e.what();
    }
    why.push_back(std::make_shared<const std::string>(op + recorded + " failed: " + message));
    // An op recorded where no user code runs (autograd's device thread) is
    // raised here, to the thread that is waiting on the sync.
    owner.push_back(o && !o->site.empty() ? o->thread : me);
  }
  for (auto [s, i] : results) {
    int32_t k = r.lost_by[i];
    if (k < 0) continue;
    s->lost = why[k];
    s->epoch = 0;
    s->data = at::Tensor();
  }
  reset();
  // Eager raises in the thread that called the op: another thread's failure
  // waits for that thread's next sync (the first one each thread caused), or,
  // when that thread has exited, is only in the storages it lost.
  std::exception_ptr mine;
  for (size_t k = 0; k < r.failures.size(); ++k) {
    if (owner[k] != me) defer(owner[k], r.failures[k].error);
    else if (!mine) mine = r.failures[k].error;
  }
  if (mine) std::rethrow_exception(mine);
}

std::optional<at::Tensor> TraceContext::on_hand_view(const at::Tensor& t) {
  const LazyStorage& s = storage_of(t);
  if (!s.data.defined() || s.dtype != t.scalar_type() || !readable_now(s)) return std::nullopt;
  return data_alias(s.data, t.sizes(), t.strides(), s.data.storage_offset() + t.storage_offset());
}

at::Tensor TraceContext::cpu_view(const at::Tensor& t, const char* reason) {
  std::lock_guard<std::recursive_mutex> lock(mutex());
  raise_deferred();
  LazyStorage& s = storage_of(t);
  if (s.epoch == epoch_) sync(reason, call_site());
  else claim(s, false, reason);
  check_not_lost(s);
  if (!s.data.defined()) {
    s.dtype = t.scalar_type();
    s.numel = static_cast<int64_t>(t.storage().nbytes() / t.element_size());
    s.data = at::zeros({s.numel}, on_device(s.dtype));
  }
  if (s.dtype != t.scalar_type()) {
    // A tensor of another dtype over this storage (set_, at::storage_copy's
    // byte views): the same bytes, reinterpreted where they are.
    at::Tensor raw = at::empty({0}, s.data.options().dtype(t.scalar_type()));
    size_t byte_offset = s.data.storage_offset() * s.data.element_size();
    TORCH_CHECK(byte_offset % t.element_size() == 0, "lazyjit: misaligned dtype-reinterpreting view");
    raw.set_(s.data.storage(), byte_offset / t.element_size() + t.storage_offset(), t.sizes(), t.strides());
    return raw;
  }
  return s.data.as_strided(t.sizes(), t.strides(), s.data.storage_offset() + t.storage_offset());
}

void TraceContext::prepare_write(const at::Tensor& t) {
  std::lock_guard<std::recursive_mutex> lock(mutex());
  LazyStorage& s = storage_of(t);
  TraceContext* o = pending_owner(s);
  if (o == this && !reads_only(s)) return;  // computed here: cpu_view syncs first
  // A graph that read these elements (as they are now) keeps them: the write
  // goes to a copy.
  bool read = o && o->reads_only(s);
  if (read) {
    o->untouch(s);
    s.epoch = 0;
  } else {
    claim(s, true);  // written in another graph: computed there first
  }
  for (TraceContext* c : contexts()) read = read || c->shared_input(s);
  // A storage in shared memory keeps its memory: the graphs that read it get
  // the copy.
  if (s.shm.defined()) before_shared_write(s);
  else if (read) s.data = s.data.clone();
}

void TraceContext::detach_inputs(const c10::StorageImpl* mem) {
  for (TraceContext* c : contexts())
    for (at::Tensor& in : c->inputs_)
      if (in.defined() && in.storage().unsafeGetStorageImpl() == mem) in = in.clone(at::MemoryFormat::Preserve);
}

}  // namespace lazyjit::tracer
