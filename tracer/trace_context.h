// The graph being recorded, the storages it touches and the arguments it will be
// run with. sync() chooses the graph's outputs, hands it to the runtime
// (runtime/pipeline.cpp: key, cache, lower, run) and writes the results back.
//
// One context per process, guarded by a recursive mutex (a storage dying while
// an op is recorded re-enters through forget()).
#pragma once
#include <ATen/core/Tensor.h>

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

#include "graph_ir/graph.h"
#include "tracer/lazy_storage.h"

namespace lazyjit::tracer {

class TraceContext {
 public:
  static TraceContext& get();
  std::recursive_mutex& mutex() { return mu_; }

  ir::Graph& graph() { return *graph_; }
  // The value `t` reads (an AsStrided view of its storage's value when needed).
  ir::ValueId read(const at::Tensor& t);
  // Makes `t`'s elements equal `v` (which has t's sizes); views of the same
  // storage see the change.
  void write(const at::Tensor& t, ir::ValueId v);
  // Replaces every element of `t`'s storage with the CPU tensor `data` (dense).
  void assign_data(const at::Tensor& t, const at::Tensor& cpu);
  // True when `t` covers all of a storage that holds nothing yet (from empty()).
  bool is_fresh(const at::Tensor& t);
  // A fresh storage holding `v`, and a tensor over it laid out like `v`, or with
  // `geometry`'s sizes and strides when `v` holds its elements in memory order.
  at::Tensor new_tensor(ir::ValueId v, const at::Tensor& geometry = {});
  ir::ValueId scalar(const c10::Scalar& s);
  ir::ValueId input(const at::Tensor& cpu);  // a CPU tensor read by the graph
  ir::ValueId scalar_tensor(const at::Tensor& cpu0d);  // a 0-d CPU tensor operand

  // Runs everything pending. `reason` and `site` are recorded in the metrics.
  void sync(const std::string& reason, const std::string& site = {});
  bool has_pending() const { return !graph_->nodes().empty(); }

  // A CPU tensor viewing `t`'s materialized elements; syncs first if needed.
  at::Tensor cpu_view(const at::Tensor& t, const char* reason);

  void forget(LazyStorage* s);
  std::string call_site();
  void set_call_site_provider(std::function<std::string()> p) { site_provider_ = std::move(p); }

 private:
  TraceContext();
  ir::ValueId storage_value(LazyStorage& s, const at::Tensor* hint);
  void touch(LazyStorage& s);
  void untouch(LazyStorage& s);
  void reset();

  std::recursive_mutex mu_;
  std::unique_ptr<ir::Graph> graph_;
  uint64_t epoch_ = 1;
  std::vector<at::Tensor> inputs_;          // bound to the graph's inputs
  std::vector<LazyStorage*> input_owner_;   // whose data each input is
  std::vector<int64_t> scalars_;
  std::vector<LazyStorage*> touched_;  // storages the graph changed; see LazyStorage::touched_index
  std::function<std::string()> site_provider_;
};

}  // namespace lazyjit::tracer
