#include "targets/cuda/graph_replays.h"

#include <ATen/ATen.h>
#include <ATen/MemoryOverlap.h>

#include <atomic>
#include <stdexcept>

#include "debug/metrics.h"

namespace lazyjit::executor {

namespace {

// Sizes, strides and dtype of every input, then the scalar arguments: what a
// captured graph has baked in.
std::vector<int64_t> run_key(const Bindings& b) {
  std::vector<int64_t> k;
  for (const at::Tensor& t : b.inputs) {
    k.push_back(t.dim());
    k.insert(k.end(), t.sizes().begin(), t.sizes().end());
    k.insert(k.end(), t.strides().begin(), t.strides().end());
    k.push_back(static_cast<int64_t>(t.scalar_type()));
  }
  k.push_back(-1);
  k.insert(k.end(), b.scalars.begin(), b.scalars.end());
  return k;
}

}  // namespace

GraphReplays::GraphReplays(c10::Device device, CaptureFn capture) : device_(device), capture_(std::move(capture)) {}

GraphReplays::~GraphReplays() = default;

std::unique_ptr<ProgramReplays> cuda_graph_replays(c10::Device device) {
  return std::make_unique<GraphReplays>(device, capture_cuda_graph);
}

std::string GraphReplays::last_not_replayed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_not_replayed_;
}

RunResult GraphReplays::run(const Bindings& b, const RunFn& run_program) {
  std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
  if (!lock.owns_lock()) return run_program(b);  // another thread replays it now
  if (!refused_.empty()) {
    last_not_replayed_ = refused_;
    return run_program(b);
  }
  for (size_t i = 0; i < b.inputs.size(); ++i)
    if (!b.inputs[i].defined() || b.inputs[i].device() != device_) {
      last_not_replayed_ = "input " + std::to_string(i) + " is not on " + device_.str() +
                           " (a graph copies nothing from the host)";
      return run_program(b);
    }
  // An input whose elements share memory (expanded: stride 0) has no buffer of
  // its own shape to copy it into at each replay: such a run is not a graph.
  for (size_t i = 0; i < b.inputs.size(); ++i)
    if (at::has_internal_overlap(b.inputs[i]) != at::MemOverlap::No) {
      last_not_replayed_ = "input " + std::to_string(i) + " has elements that share memory (expanded)";
      return run_program(b);
    }
  std::vector<int64_t> key = run_key(b);
  if (key != key_) {
    // New sizes or scalars: this run warms up for a graph of its own.
    if (graph_) last_not_replayed_ = "sizes or scalar arguments changed since the capture";
    key_ = std::move(key);
    runs_with_key_ = 0;
    graph_.reset();
    static_inputs_.clear();
    static_outputs_.clear();
  }
  if (graph_) {
    // A graph reads its stable inputs where they were at the capture.
    for (size_t i = 0; i < b.inputs.size(); ++i)
      if (stable_[i] && b.inputs[i].data_ptr() != static_inputs_[i].data_ptr()) {
        // Where it was twice by chance (a caching allocator hands a freed
        // block to the next tensor of its size): copied from now on.
        last_not_replayed_ = "input " + std::to_string(i) + " moved since the capture";
        if (moved_.size() <= i) moved_.resize(b.inputs.size());
        moved_[i] = true;
        runs_with_key_ = 0;
        graph_.reset();
        static_inputs_.clear();
        static_outputs_.clear();
        break;
      }
  }
  ++runs_with_key_;
  if (runs_with_key_ == 1) {  // warm-up
    RunResult r = run_program(b);
    warm_up_devices_.clear();
    for (const at::Tensor& t : r.outputs) warm_up_devices_.push_back(t.defined() ? t.device() : device_);
    warm_up_data_.clear();
    for (const at::Tensor& t : b.inputs) warm_up_data_.push_back(t.data_ptr());
    return r;
  }
  if (!graph_) return capture_and_replay(b, run_program);
  return replay(b);
}

RunResult GraphReplays::capture_and_replay(const Bindings& b, const RunFn& run_program) {
  // What the graph reads at every replay: an input at the address it had at
  // the warm-up too (a weight, an optimizer's state) is read where it is,
  // kept alive here; any other is copied into a buffer of the graph's own.
  static_inputs_.clear();
  stable_.clear();
  for (size_t i = 0; i < b.inputs.size(); ++i) {
    const at::Tensor& t = b.inputs[i];
    stable_.push_back(i < warm_up_data_.size() && t.data_ptr() == warm_up_data_[i] &&
                      !(i < moved_.size() && moved_[i]));
    if (stable_.back()) {
      static_inputs_.push_back(t);
      continue;
    }
    static_inputs_.push_back(at::empty_strided(t.sizes(), t.strides(), t.options()));
    static_inputs_.back().copy_(t);
  }
  Bindings captured{static_inputs_, b.scalars, {}};
  // A stand-in backend may replay by running `body` again: it then writes the
  // same static outputs, as a graph's replay does.
  auto body = [this, captured, run_program]() {
    RunResult r = run_program(captured);
    if (!r.failures.empty()) std::rethrow_exception(r.failures.front().error);
    if (static_outputs_.empty()) {
      static_outputs_ = std::move(r.outputs);
      return;
    }
    for (size_t i = 0; i < r.outputs.size(); ++i) static_outputs_[i].copy_(r.outputs[i]);
  };
  try {
    graph_ = capture_(body);
    for (size_t i = 0; i < static_outputs_.size() && i < warm_up_devices_.size(); ++i)
      if (static_outputs_[i].defined() && static_outputs_[i].device() != warm_up_devices_[i])
        throw std::runtime_error("output " + std::to_string(i) + " is on " + static_outputs_[i].device().str() +
                                 " when captured but on " + warm_up_devices_[i].str() + " when run");
  } catch (const std::exception& e) {
    refused_ = std::string("capture failed: ") + e.what();
    refused_ = refused_.substr(0, refused_.find('\n'));  // c10::Error's first line
    last_not_replayed_ = refused_;
    debug::Metrics::get().graph_replay_refused(refused_);
    graph_.reset();
    static_inputs_.clear();
    static_outputs_.clear();
    return run_program(b);
  }
  debug::Metrics::get().add(debug::Counter::CudaGraphsCaptured);
  // A capture records the run without running it: the first replay computes it.
  return replay(b);
}

RunResult GraphReplays::replay(const Bindings& b) {
  for (size_t i = 0; i < b.inputs.size(); ++i)
    if (!stable_[i] && !b.inputs[i].is_same(static_inputs_[i]))
      static_inputs_[i].copy_(b.inputs[i], /*non_blocking=*/true);
  graph_->replay();
  debug::Metrics::get().add(debug::Counter::CudaGraphReplays);
  debug::Metrics::get().add(debug::Counter::GraphsExecuted);
  RunResult r;
  r.outputs.reserve(static_outputs_.size());
  for (const at::Tensor& t : static_outputs_)
    r.outputs.push_back(t.defined() ? t.clone(at::MemoryFormat::Preserve) : at::Tensor());
  last_not_replayed_.clear();
  return r;
}

}  // namespace lazyjit::executor
