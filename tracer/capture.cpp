#include "tracer/capture.h"

#include <algorithm>

#include <ATen/ATen.h>

#include <c10/util/SmallVector.h>

#include <unordered_map>

#include "bridge/aten_ir.h"
#include "debug/metrics.h"
#include "graph_ir/hash.h"
#include "runtime/backend.h"
#include "runtime/runtime.h"
#include "tracer/lazyjit.h"
#include "tracer/trace_context.h"

namespace lazyjit {

using tracer::TraceContext;

namespace {
// The elements a strided tensor can reach from its first one.
int64_t span_of(at::IntArrayRef sizes, at::IntArrayRef strides) {
  int64_t span = 1;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 0) return 0;
    span += (sizes[d] - 1) * strides[d];
  }
  return span;
}
// A signature's words, hashed with the graph's hasher (graph_ir/hash.h). Per
// argument a kind, 0 (ignored), 1 (an int) or 2 (a CPU tensor), then its
// value, or dtype, rank, sizes and strides; a tensor on another device is kind
// 3, fitting no capture.
struct Signature {
  c10::SmallVector<int64_t, 512> words;
  void tensor(at::ScalarType dtype, at::IntArrayRef sizes, at::IntArrayRef strides) {
    words.append({2, static_cast<int64_t>(dtype), static_cast<int64_t>(sizes.size())});
    words.append(sizes.begin(), sizes.end());
    words.append(strides.begin(), strides.end());
  }
  uint64_t hash() const { return ir::hash64(words.data(), words.size() * sizeof(int64_t)); }
};
}  // namespace

uint64_t capture_signature(const std::vector<CaptureArg>& args) {
  Signature s;
  for (const CaptureArg& a : args) {
    if (const int64_t* v = std::get_if<int64_t>(&a)) {
      s.words.append({1, *v});
    } else if (const at::Tensor* t = std::get_if<at::Tensor>(&a)) {
      if (t->defined() && t->device() == tracer::data_device()) s.tensor(t->scalar_type(), t->sizes(), t->strides());
      else s.words.push_back(3);
    } else {
      s.words.push_back(0);
    }
  }
  return s.hash();
}

uint64_t CapturedGraph::signature() const {
  // An argument captured as ignored (ArgSpec::Other) came as neither a tensor
  // nor a number (dynamo.py's _arg_key), as its fitting arguments do.
  Signature s;
  for (const ArgSpec& a : args_) {
    if (a.kind == ArgSpec::Int) s.words.append({1, a.value});
    else if (a.kind == ArgSpec::Tensor) s.tensor(a.dtype, a.sizes, a.strides);
    else s.words.push_back(0);
  }
  return s.hash();
}

Capture::Capture() : g_(std::make_shared<CapturedGraph>()) {
  TraceContext& ctx = TraceContext::get();
  std::lock_guard<std::recursive_mutex> lock(TraceContext::mutex());
  ctx.sync("torch.compile capture", TraceContext::call_site());
  ctx.redraws_ = &g_->redraws_;
  strict_enter();
}

Capture::~Capture() {
  TraceContext& ctx = TraceContext::get();
  std::lock_guard<std::recursive_mutex> lock(TraceContext::mutex());
  ctx.redraws_ = nullptr;
  strict_exit();
  if (open_) ctx.reset();  // dropped unfinished: nothing of it runs
}

at::Tensor Capture::placeholder(const at::Tensor& example) {
  TraceContext& ctx = TraceContext::get();
  std::lock_guard<std::recursive_mutex> lock(TraceContext::mutex());
  CapturedGraph::ArgSpec spec;
  spec.kind = CapturedGraph::ArgSpec::Tensor;
  spec.dtype = example.scalar_type();
  spec.sizes = example.sizes().vec();
  spec.strides = example.strides().vec();
  spec.span = span_of(example.sizes(), example.strides());
  // A tensor over a storage of just its span, with the example's geometry: read
  // now, so that tensor argument k is bound to graph input k.
  at::Tensor t = tracer::make_tensor(tracer::make_storage(spec.span, spec.dtype), spec.dtype, spec.sizes,
                                     spec.strides, 0);
  ctx.assign_data(t, at::empty({spec.span}, tracer::on_device(spec.dtype)));
  const size_t input = ctx.inputs_.size();
  ir::ValueId v = ctx.read(t);
  TORCH_CHECK(ctx.inputs_.size() == input + 1, "lazyjit: a torch.compile placeholder was not read as an input");
  spec.flat = v != ctx.graph_->inputs()[input];  // not dense over its span: bound as the span
  g_->args_.push_back(spec);
  g_->arg_input_.push_back(input);
  placeholders_.push_back(t);
  return t;
}

void Capture::other_arg(std::optional<int64_t> value) {
  CapturedGraph::ArgSpec spec;
  if (value) {
    spec.kind = CapturedGraph::ArgSpec::Int;
    spec.value = *value;
  }
  g_->args_.push_back(spec);
}

std::shared_ptr<CapturedGraph> Capture::finish(const std::vector<at::Tensor>& outputs, const std::string& site,
                                                     bool dynamic) {
  TraceContext& ctx = TraceContext::get();
  std::lock_guard<std::recursive_mutex> lock(TraceContext::mutex());
  ir::Graph& graph = *ctx.graph_;
  std::unordered_map<ir::ValueId, size_t> index;
  auto output = [&](ir::ValueId v) {
    auto [it, fresh] = index.emplace(v, graph.outputs().size());
    if (fresh) graph.add_output(v);
    return it->second;
  };
  std::unordered_map<const tracer::LazyStorage*, size_t> arg_of;
  for (size_t k = 0; k < placeholders_.size(); ++k) arg_of[&tracer::storage_of(placeholders_[k])] = k;
  std::vector<const CapturedGraph::ArgSpec*> specs;  // per tensor argument, as it came
  for (const CapturedGraph::ArgSpec& a : g_->args_)
    if (a.kind == CapturedGraph::ArgSpec::Tensor) specs.push_back(&a);
  for (const at::Tensor& t : outputs) {
    CapturedGraph::Output out;
    const tracer::LazyStorage& s = tracer::storage_of(t);
    auto arg = arg_of.find(&s);
    if (arg != arg_of.end() && t.is_same(placeholders_[arg->second]) &&
        t.sizes().equals(specs[arg->second]->sizes) && t.strides().equals(specs[arg->second]->strides)) {
      // The argument itself (return x, return x.mul_(2)): as in eager, the
      // caller's tensor, the same object.
      out.kind = CapturedGraph::Output::Arg;
      out.index = arg->second;
    } else if (arg != arg_of.end() && t.scalar_type() == placeholders_[arg->second].scalar_type()) {
      // A view of an argument (x.t(), x[1:]), written or not: as in eager, a
      // view of the caller's tensor, not a copy. What the function wrote into
      // the argument is in its memory when run() returns (write_back_).
      out.kind = CapturedGraph::Output::ArgView;
      out.index = arg->second;
      out.sizes = t.sizes().vec();
      out.strides = t.strides().vec();
      out.offset = t.storage_offset();
    } else {
      // A dense result keeps its strides (a channels-last activation saved for
      // the backward graph, which reads it as the FX graph's meta says).
      ir::ValueId v = ctx.read(t, /*own_layout=*/t.is_non_overlapping_and_dense());
      const ir::Node& p = graph.producer(v);
      // An input returned as it is (a constant): no step computes it.
      if (p.kind == ir::OpKind::Input) {
        out.kind = CapturedGraph::Output::Input;
        out.index = static_cast<size_t>(std::get<int64_t>(p.attrs[0].value));
      } else {
        out.index = output(v);
      }
    }
    g_->outputs_.push_back(std::move(out));
  }
  // An argument the function wrote into (an in-place op on it): its new
  // elements are an output, written back into the argument after each run.
  for (size_t k = 0; k < placeholders_.size(); ++k) {
    tracer::LazyStorage& s = tracer::storage_of(placeholders_[k]);
    ir::ValueId in = graph.inputs()[g_->arg_input_[k]];
    if (TraceContext::pending_owner(s) == &ctx && s.value != in) g_->write_back_.emplace_back(k, output(s.value));
  }
  g_->ops_ = graph.nodes().size() - graph.inputs().size() - graph.scalars().size();
  g_->fixed_inputs_ = ctx.inputs_;
  // Programs run where the runtime runs them: under the CUDA target, what the
  // trace read (constants, data moved to lazyjit while tracing) moves to the
  // GPU once, here, not on every run.
  g_->device_ = tracer::data_device();
  if (!runtime::backend().data_on_host())
    for (at::Tensor& t : g_->fixed_inputs_)
      if (t.defined() && t.device() != g_->device_) t = t.to(g_->device_);
  g_->scalars_ = ctx.scalars_;
  runtime::Runtime& rt = runtime::Runtime::get();
  g_->threads_ = rt.threads();
  std::optional<runtime::Shapes> shapes;
  if (dynamic) shapes = runtime::Shapes::All;
  strict_exit();  // the compile is wanted: the strict region only guarded the trace
  try {
    if (!graph.outputs().empty()) g_->program_ = rt.prepare(graph, site, shapes);
    for (const auto& [k, out] : g_->write_back_)
      g_->in_place_.push_back(g_->program_ &&
                              runtime::can_store_into_input(g_->program_->program(), out, g_->arg_input_[k]));
  } catch (...) {
    strict_enter();
    throw;
  }
  strict_enter();
  open_ = false;
  ctx.reset();
  return g_;
}

bool CapturedGraph::writes_shared_argument(const std::vector<CaptureArg>& args) const {
  if (write_back_.empty()) return false;
  // (storage, written) per tensor argument, sorted by storage: one pass finds a
  // storage held by two arguments, one of them written. O(n log n), so an
  // optimizer step's hundreds of parameters cost microseconds.
  std::vector<std::pair<const void*, bool>> held;
  for (const CaptureArg& a : args)
    if (const at::Tensor* t = std::get_if<at::Tensor>(&a))
      held.emplace_back(t->defined() && t->has_storage() ? t->storage().unsafeGetStorageImpl() : nullptr, false);
  for (const auto& w : write_back_)
    if (w.first < held.size()) held[w.first].second = true;
  std::sort(held.begin(), held.end());
  for (size_t i = 0; i + 1 < held.size(); ++i)
    if (held[i].first && held[i].first == held[i + 1].first && (held[i].second || held[i + 1].second)) return true;
  return false;
}

std::optional<std::vector<at::Tensor>> CapturedGraph::run(const std::vector<CaptureArg>& args) const {
  if (args.size() != args_.size()) return std::nullopt;
  runtime::Bindings b{fixed_inputs_, scalars_};
  std::vector<const at::Tensor*> given;  // per tensor argument, the caller's tensor
  given.reserve(arg_input_.size());
  size_t tensor = 0;
  for (size_t i = 0; i < args.size(); ++i) {
    const ArgSpec& spec = args_[i];
    if (spec.kind == ArgSpec::Int) {
      const int64_t* v = std::get_if<int64_t>(&args[i]);
      if (!v || *v != spec.value) return std::nullopt;
    } else if (spec.kind == ArgSpec::Tensor) {
      const at::Tensor* t = std::get_if<at::Tensor>(&args[i]);
      if (!t || !t->defined() || t->device() != device_ || t->scalar_type() != spec.dtype ||
          !t->sizes().equals(spec.sizes) || !t->strides().equals(spec.strides))
        return std::nullopt;
      at::Tensor& in = b.inputs[arg_input_[tensor]];
      in = spec.flat ? t->as_strided({spec.span}, {1}, t->storage_offset()) : *t;
      given.push_back(t);
      ++tensor;
    }
  }
  for (const auto& [input, draw] : redraws_) {
    b.inputs[input] = draw();
    if (b.inputs[input].device() != device_) b.inputs[input] = b.inputs[input].to(device_);
  }
  // In-place updates of arguments computed where they are, unless another
  // input shares the argument's memory (it may be read after the update).
  std::vector<bool> stored(write_back_.size());
  for (size_t w = 0; w < write_back_.size(); ++w) {
    if (!in_place_[w]) continue;
    size_t input = arg_input_[write_back_[w].first];
    const at::Tensor& t = b.inputs[input];
    bool shared = t.is_inference();  // eager refuses the update: the copy below raises it
    for (size_t j = 0; j < b.inputs.size() && !shared; ++j)
      shared = j != input && b.inputs[j].defined() && b.inputs[j].is_alias_of(t);
    if (shared) continue;
    b.into.emplace_back(program_->program().graph.outputs()[write_back_[w].second], t);
    stored[w] = true;
  }
  runtime::RunResult r;
  if (program_) r = program_->run(b, threads_);
  if (!r.failures.empty()) {
    // A kernel may have updated an argument before the failing step, as eager's
    // in-place ops before the one that raises would have.
    for (size_t w = 0; w < write_back_.size(); ++w)
      if (stored[w]) b.inputs[arg_input_[write_back_[w].first]].unsafeGetTensorImpl()->bump_version();
    std::rethrow_exception(r.failures.front().error);
  }
  std::vector<at::Tensor> result;
  result.reserve(outputs_.size());
  for (const Output& o : outputs_) {
    if (o.kind == Output::Computed) result.push_back(r.outputs[o.index]);
    else if (o.kind == Output::Input) result.push_back(b.inputs[o.index]);
    else if (o.kind == Output::Arg) result.push_back(*given[o.index]);
    else {
      const at::Tensor& arg = b.inputs[arg_input_[o.index]];
      result.push_back(arg.as_strided(o.sizes, o.strides, arg.storage_offset() + o.offset));
    }
  }
  for (size_t w = 0; w < write_back_.size(); ++w) {
    const auto& [k, out] = write_back_[w];
    at::Tensor& arg = b.inputs[arg_input_[k]];
    if (stored[w] && r.outputs[out].is_same(arg))
      arg.unsafeGetTensorImpl()->bump_version();  // an in-place update, as copy_ counts it
    else {
      // The output is the argument's memory (its storage's value): its elements
      // in the order of the output's own strides are the argument's memory from
      // its first element on, whatever the argument's strides (a transposed
      // argument updated in place is written in memory order, as eager's
      // kernel writes it).
      debug::Metrics::get().add(debug::Counter::ArgumentCopies);
      const at::Tensor& value = r.outputs[out];
      arg.as_strided(value.sizes(), value.strides(), arg.storage_offset()).copy_(value);
    }
  }
  return result;
}

}  // namespace lazyjit
