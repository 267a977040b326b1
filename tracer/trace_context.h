// A graph being recorded, the storages it touches and the arguments it will be
// run with. sync() chooses the graph's outputs, hands it to the runtime
// (runtime/pipeline.cpp: key, cache, lower, run) and writes the results back.
//
// One context per recording thread, so that threads running separate work
// record the same graphs (and hit the same programs) as sequential code; the
// contexts, their threads and the choice of a context for an op live in
// trace_threads.cpp. A storage's pending value belongs to one context's graph
// (LazyStorage::owner). An op of another context that reads it or writes it
// first syncs that graph, unless that graph only reads the storage's elements
// (a weight two threads read): then both graphs read the same CPU data, and a
// write leaves the other graph reading the elements it read. Ops autograd runs
// for backward() (on its device thread, while the caller waits) record into the
// context of the pending storages they read: a training step stays one graph.
//
// All contexts share one recursive mutex (a storage dying while an op is
// recorded re-enters through forget()): recording and syncs are serialized.
#pragma once
#include <ATen/core/Tensor.h>

#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "graph_ir/graph.h"
#include "runtime/run_io.h"
#include "tracer/lazy_storage.h"

namespace lazyjit::runtime {
struct SyncResult;
}
namespace c10 {
struct IValue;
}
namespace lazyjit {
class Capture;
struct OpEvent;
}

namespace lazyjit::tracer {

class TraceContext {
 public:
  // The context the calling thread records into: inside an op, the one chosen
  // for it (OpScope); otherwise the thread's own.
  static TraceContext& get();
  // The lock of every context.
  static std::recursive_mutex& mutex();

  // Chooses the context an op records into, for its duration (nested ops keep
  // the outer one): the thread's own, or, on a thread without user code, the
  // context the op's arguments (`args`, the last `n` entries of a stack) are
  // pending in. Hold mutex().
  class OpScope {
   public:
    OpScope(const c10::IValue* args, size_t n);
    ~OpScope();
    OpScope(const OpScope&) = delete;
    OpScope& operator=(const OpScope&) = delete;

   private:
    bool outer_;
  };

  ir::Graph& graph() { return *graph_; }
  // The value `t` reads (an AsStrided view of its storage's value when needed).
  // A view's value is declared contiguous (the layout kernels read it in),
  // except with `own_layout`: then with t's own strides, dense or not (a
  // channels-last tensor, a transpose, a slice with gaps, an expand), which is
  // how an ATen step gets it (executor/aten_call.h). Such a value is a view of
  // its storage's value and never a storage's value itself.
  ir::ValueId read(const at::Tensor& t, bool own_layout = false);
  // Makes `t`'s elements equal `v` (which has t's sizes); views of the same
  // storage see the change.
  void write(const at::Tensor& t, ir::ValueId v);
  // Replaces every element of `t`'s storage with the dense tensor `cpu`, moved
  // to data_device() if it is elsewhere (on the CPU target: a CPU tensor, kept).
  void assign_data(const at::Tensor& t, const at::Tensor& cpu);
  // True when `t` covers all of a storage that holds nothing yet (from empty()).
  bool is_fresh(const at::Tensor& t);
  // A fresh storage holding `v`, and a tensor over it laid out like `v`, or with
  // `geometry`'s sizes and strides when `v` holds its elements in memory order.
  at::Tensor new_tensor(ir::ValueId v, const at::Tensor& geometry = {});
  ir::ValueId scalar(const c10::Scalar& s);
  ir::ValueId input(const at::Tensor& cpu);  // a tensor on data_device() read by the graph
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
  // The context whose graph holds `s`'s pending value, or null.
  // Makes `point` name this context's graph as recorded now (an event's point,
  // tracer/streams.cpp): pending_owner(point) is this context until that graph
  // runs. `point` is not one of the graph's storages; nothing is recorded.
  void mark_pending(LazyStorage& point) {
    point.owner = this;
    point.epoch = epoch_;
  }
  static TraceContext* pending_owner(const LazyStorage& s) {
    return s.owner && s.epoch == s.owner->epoch_ ? s.owner : nullptr;
  }
  // True when this graph holds `s`'s elements unchanged (read, not written).
  bool reads_only(const LazyStorage& s) const;

  // `t`'s value (a tensor on data_device()) when it depends on a small part of this graph
  // (read_apart.cpp): that part runs as a program of its own, and the graph
  // records on; nullopt when it does not apply (then cpu_view syncs).
  std::optional<at::Tensor> evaluate_apart(const at::Tensor& t);
  // A tensor viewing `t`'s materialized elements, on data_device() (a CPU
  // tensor on the CPU target, a CUDA one under the CUDA target); syncs first
  // if needed.
  at::Tensor cpu_view(const at::Tensor& t, const char* reason);
  // Whether `s`'s elements can be read now, without running anything: not
  // lost, and pending in no graph except as an input that graph only reads.
  static bool readable_now(const LazyStorage& s) {
    const TraceContext* o = pending_owner(s);
    return !s.lost && (!o || (s.data.defined() && o->reads_only(s)));
  }
  // cpu_view's tensor when `t`'s data is on hand (readable now, materialized,
  // of t's dtype), made without a sync or a dispatcher call; nullopt otherwise.
  static std::optional<at::Tensor> on_hand_view(const at::Tensor& t);
  // Before an eager kernel writes `t`'s materialized elements in place: no graph
  // may still read them (another graph that read them keeps a copy).
  void prepare_write(const at::Tensor& t);
  // Before memory `mem` is overwritten in place (a storage in shared memory,
  // tracer/shared_storage.h): every graph not yet run that reads it through an
  // input reads a copy of its elements as they are now instead.
  static void detach_inputs(const c10::StorageImpl* mem);

  // While a torch.compile capture is open (tracer/capture.h): the input just
  // added holds a random draw, which each run of the captured program draws
  // again with `redraw`.
  bool capturing() const { return redraws_ != nullptr; }

  // Eager around compiled programs (record_op.cpp, docs/torch_compile.md): from
  // a call of a torch.compile'd program on lazyjit tensors until the thread's
  // next lazyjit.sync() (the end of a step), its small ops whose tensors are
  // all on hand run at once through the data device's kernels, as eager's
  // would, instead of being recorded. The code around a compiled model
  // (generate's loop, a scheduler's step) is made of such ops; recording each
  // and running them as small graphs costs more than running them.
  void note_program_call() { around_programs_ = true; }
  void note_step_end() { around_programs_ = false; }
  bool around_programs() const { return around_programs_; }
  void note_redraw(std::function<at::Tensor()> redraw);

  static void forget(LazyStorage* s);
  static std::string call_site();
  static void set_call_site_provider(std::function<std::string()> p);

 private:
  friend struct ContextRegistry;  // trace_threads.cpp
  friend class lazyjit::Capture;  // capture.cpp takes the recorded graph
  TraceContext();
  // Makes storage `s`, pending in another context's graph, usable by an op of
  // this one (a tensor one thread recorded and another reads or writes): that
  // graph is run first, unless it only reads `s` (then a read here shares the
  // data, and a write here leaves that graph reading the old elements).
  void claim(LazyStorage& s, bool write, const char* reason = "a tensor another thread recorded");
  // The input this graph reads `s`'s current data through, while another
  // graph holds `s` (shared_).
  std::optional<ir::ValueId> shared_input(const LazyStorage& s);
  // Every context (trace_threads.cpp).
  static const std::vector<TraceContext*>& contexts();
  // sync() without raising the calling thread's deferred error first.
  void run_pending(const std::string& reason, const std::string& site);
  ir::ValueId storage_value(LazyStorage& s, const at::Tensor* hint);
  void touch(LazyStorage& s);
  void untouch(LazyStorage& s);
  void reset();
  struct NodeOrigin {
    uint32_t node;
    std::thread::id thread;
    std::string site;  // the user's file:line; empty on a thread without user frames (autograd's)
    uint32_t first;    // the first node of the op that recorded it
    std::string op;    // that op's schema name; empty when not noted
  };
  const NodeOrigin* origin(uint32_t node) const;
 public:
  // Every node from `first` on, recorded by the current op `op`, gets its call
  // site (with NaN checks, the compiled-vs-eager check or lazy op hooks on, so
  // a report or a hook can name the op and line of any node).
  void note_op_nodes(uint32_t first, const std::string& op);
  // Whether note_op_nodes is wanted (one of those is on).
  static bool wants_op_origins();
 private:
  // The steps of run_pending, in order. A sync's outputs: each storage it
  // computes and the graph output that holds its result.
  using Results = std::vector<std::pair<LazyStorage*, size_t>>;
  void refuse_in_strict_region(const std::string& reason, const std::string& site) const;
  Results choose_outputs();
  // Runs the graph through the runtime (and logs the sync): on Ctrl-C or a
  // refused compile the graph is rewound and still pending; on a failed
  // compile every storage it was to compute is lost, saying why; both rethrow.
  runtime::SyncResult run_graph(const std::string& reason, const std::string& site, runtime::Bindings& b,
                                const Results& results, const ir::Graph::OutputMark& mark,
                                std::vector<OpEvent>* events);
  void offer_overwrites(runtime::Bindings& b, const Results& results) const;
  void write_back(const runtime::SyncResult& r, const runtime::Bindings& b, const Results& results);
  // Storage s holds t, a run's result, as its data from now on (epoch 0). A
  // result may be an input's memory or shared by two storages: each storage owns
  // its elements, so t is cloned when its memory is in `taken` (the run's inputs
  // and what earlier storages took), unless `own` (computed in s's own memory).
  static void take_result(LazyStorage& s, at::Tensor t, std::unordered_set<const void*>& taken, bool own = false);
  // Hooks, the per-op timing table, then the check's and NaN checks' reports (raised).
  void report_run(const std::vector<OpEvent>& events, const runtime::SyncResult& r, const std::string& site);
  // After a run with failed steps: loses what depends on them, resets, raises.
  void fail_steps(runtime::RunResult& r, const Results& results, const std::string& site);
  // Raises an error of an op this thread recorded that failed in another thread's sync.
  static void raise_deferred();
  // Keeps `error` for `thread`'s next sync; dropped if that thread has exited
  // (or exits first): the storages computed from the failed op still raise it.
  static void defer(std::thread::id thread, std::exception_ptr error);

  std::unique_ptr<ir::Graph> graph_;
  uint64_t epoch_;  // unique among all contexts' graphs, past and present
  bool attached_ = false;  // recorded into by a live thread (trace_threads.cpp)
  bool in_free_list_ = false;
  std::vector<at::Tensor> inputs_;          // bound to the graph's inputs
  std::vector<LazyStorage*> input_owner_;   // whose data each input is
  std::vector<int64_t> scalars_;
  uint8_t marks_ = 0;  // the LazyStorage::marks of the graph's inputs, or'ed
  std::vector<LazyStorage*> touched_;  // storages the graph changed; see LazyStorage::touched_index
  std::vector<NodeOrigin> origins_;  // the graph's fallible nodes, by node
  // Storages this graph reads while another graph holds them unchanged: the
  // input bound to their data here (valid while their data is that input's).
  std::unordered_map<LazyStorage*, ir::ValueId> shared_;
  // Set while capturing: (graph input, its draw) per random draw made.
  std::vector<std::pair<size_t, std::function<at::Tensor()>>>* redraws_ = nullptr;
  bool around_programs_ = false;
};

}  // namespace lazyjit::tracer
