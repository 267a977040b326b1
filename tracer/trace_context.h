// The graph being recorded, the storages it touches and the arguments it will be
// run with. sync() chooses the graph's outputs, hands it to the runtime
// (runtime/pipeline.cpp: key, cache, lower, run) and writes the results back.
//
// One context per process, guarded by a recursive mutex (a storage dying while
// an op is recorded re-enters through forget()).
#pragma once
#include <ATen/core/Tensor.h>

#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "graph_ir/graph.h"
#include "tracer/lazy_storage.h"

// What runtime::Runtime::run returns (runtime::RunResult), declared here so
// that this widely included header does not pull in the executor's.
namespace lazyjit::executor {
struct RunResult;
}

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

  // Remembers where and by which thread node `node`, one that can fail on its
  // data when the graph runs, was recorded: its failure is named and raised
  // with them.
  void note_fallible_node(uint32_t node);

  // Runs everything pending. `reason` and `site` are recorded in the metrics.
  // When a step fails, everything that does not depend on it is kept, the
  // storages computed from it are lost, and its error (eager's, with the op and
  // where it was recorded) is raised in the thread that recorded the op: here,
  // or at that thread's next sync.
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
  struct NodeOrigin {
    uint32_t node;
    std::thread::id thread;
    std::string site;  // the user's file:line; empty on a thread without user frames (autograd's)
  };
  const NodeOrigin* origin(uint32_t node) const;
  // After a run with failed steps: loses what depends on them, resets, raises.
  void fail_steps(executor::RunResult& r, const std::vector<std::pair<LazyStorage*, size_t>>& results,
                  const std::string& site);
  // Raises an error of an op this thread recorded that failed in another thread's sync.
  void raise_deferred();

  std::recursive_mutex mu_;
  std::unique_ptr<ir::Graph> graph_;
  uint64_t epoch_ = 1;
  std::vector<at::Tensor> inputs_;          // bound to the graph's inputs
  std::vector<LazyStorage*> input_owner_;   // whose data each input is
  std::vector<int64_t> scalars_;
  std::vector<LazyStorage*> touched_;  // storages the graph changed; see LazyStorage::touched_index
  std::function<std::string()> site_provider_;
  std::vector<NodeOrigin> origins_;  // the graph's fallible nodes, by node
  std::unordered_map<std::thread::id, std::exception_ptr> deferred_;
};

}  // namespace lazyjit::tracer
