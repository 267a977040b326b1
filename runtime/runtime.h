// The runtime: what the tracer hands a finished graph to. It owns the
// configuration, the compile target and the compile cache, and drives a sync
// from graph to results (pipeline.cpp is the map; the tiers it names are in
// sync_tiers.cpp, recompile_policy.cpp, op_by_op.cpp and nan_pinning.cpp).
//
// Layering: tracer -> runtime -> {executor, lowering, cache} -> graph_ir. The
// tracer reaches the layers below only through this header.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "cache/compile_cache.h"
#include "executor/executable.h"
#include "executor/store_in_place.h"
#include "graph_ir/graph.h"
#include "lowering/interrupt.h"
#include "runtime/backend.h"
#include "runtime/background_compiles.h"
#include "runtime/config.h"
#include "runtime/observed_run.h"
#include "runtime/recompile_explainer.h"
#include "runtime/run_io.h"
#include "runtime/shape_binder.h"
#include "runtime/sync_log.h"

namespace lazyjit::lowering {
class Target;
}

namespace lazyjit::runtime {

class DiskTier;
// A run's result and how its program was found (a hit, compiled, loaded, ...).
struct SyncResult : RunResult {
  SyncNote note;
};
// Which of a program's outputs may be stored into an input (torch.compile's in-place updates).
using executor::can_store_into_input;
// Ctrl-C during a compile (lowering/interrupt.h).
using lowering::clear_interrupt;
using lowering::interrupt_seen;
using lowering::Interrupted;
using lowering::set_interrupt_handlers;
// Exact or shape-generic kernels (LAZYJIT_DYNAMIC; lowering/shapes.h).
using lowering::Shapes;

// Thrown by Runtime::run, before anything runs, when the calling thread has
// forbidden compiles (a strict region) and the graph misses the cache.
struct CompileRefused : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// While one lives, Runtime::run on this thread refuses to build a program
// (lazyjit.strict()); nests.
struct NoCompileScope {
  NoCompileScope();
  ~NoCompileScope();
  NoCompileScope(const NoCompileScope&) = delete;
  NoCompileScope& operator=(const NoCompileScope&) = delete;
};
// False while a NoCompileScope lives on this thread (read once per sync).
bool compiles_allowed_here();

class Runtime {
 public:
  // The process's runtime, configured from the environment on first use.
  static Runtime& get();
  // The runtime if get() has made it, else nullptr (starts nothing).
  static Runtime* if_started();
  explicit Runtime(Config config);
  ~Runtime();

  const Config& config() const { return config_; }
  // The target programs run on (backend.h).
  const Backend& target_backend() const { return *backend_; }

  // Runs `graph` (whose outputs are set) on `bindings`: compiles it on a miss
  // of every cache tier. `site` is the sync's call site (kept with what it
  // compiles). Returns one CPU tensor per graph output, dense with its declared
  // layout, except those that depend on a step that threw; each failure's
  // `node` is the node of `graph` the failed step runs (kNoNode when none can be
  // told). Throws on a malformed graph or a failed compile.
  // `shapes`, when set, overrides LAZYJIT_DYNAMIC for the kernels compiled
  // (lazyjit.mark_dynamic / mark_static on an input).
  // `node_sites`, when set, names where a node was recorded (explanations).
  // `observer`, when set, sees every value the run computed, per node, and
  // each step's time (observed_run.h: the program then stores every result).
  // With the check on, every value computed by generated code is compared with
  // eager's and RunResult::check_report says where they first differ.
  // The result says how its program was found (SyncResult::note, for the
  // sync log: runtime/sync_log.h).
  SyncResult run(const ir::Graph& graph, const Bindings& bindings, const std::string& site = {},
                 std::optional<lowering::Shapes> shapes = std::nullopt, const NodeSites& node_sites = {},
                 const RunObserver& observer = {});
  static constexpr uint32_t kNoNode = ~uint32_t{0};

  // The program for `graph` (whose outputs are set), from the cache or compiled
  // on a miss, to be run many times on bindings of the graph's input types
  // (torch.compile's captured graphs, tracer/capture.h). Past the recompile
  // limit with LAZYJIT_ON_RECOMPILE_LIMIT=op_by_op: a program that runs each op through ATen.
  std::shared_ptr<const executor::Executable> prepare(const ir::Graph& graph, const std::string& site,
                                                      std::optional<lowering::Shapes> shapes = std::nullopt);
  // The threads of ATen's OpenMP pool a run's kernels split over.
  int threads() const;

  // A compiled program as bytes (what a cache entry's payload holds). The way
  // back is only through a verified entry (runtime/program_entry.h).
  std::string to_bytes(const lowering::Program& program) const;
  // Lowers without running or caching (tests, tools). `check_stores`: kernels
  // test what they store for NaN/Inf (lowering::Plan::check_stores).
  std::shared_ptr<const lowering::Program> compile(ir::Graph graph, const std::string& dump_name,
                                                   std::optional<lowering::Shapes> shapes = std::nullopt,
                                                   bool check_stores = false) const;

  // NaN/Inf checks of every run's outputs (runtime/nan_check.h); a run whose
  // outputs hold one comes back with RunResult::nan_report set. Starts as
  // LAZYJIT_DEBUG_NANS says.
  void set_debug_nans(bool on) { debug_nans_ = on; }
  bool debug_nans() const { return debug_nans_; }
  // The compiled-vs-eager check (runtime/graph_check.h; LAZYJIT_CHECK=1): a run
  // whose generated code disagrees with eager's on some op comes back with
  // RunResult::check_report set, and a standalone repro written under
  // `repro_dir` (unchanged when empty; default ./lazyjit_repro).
  void set_check_graphs(bool on, const std::string& repro_dir = {});
  bool check_graphs() const { return check_graphs_; }
  std::string repro_dir() const;
  // The check on one graph, whatever the switch says, writing no repro (what a
  // repro runs): the report, or "" when generated code agrees with eager.
  std::string check_graph(const ir::Graph& graph, const Bindings& bindings);
  // "mul (op #7 of the graph) at model.py:12".
  static std::string describe_node(const ir::Graph& graph, uint32_t node, const NodeSites& node_sites);

  // Waits for the programs compiling in the background (LAZYJIT_BACKGROUND_COMPILE)
  // to be ready; returns how many it waited for. The next sync of each takes it.
  int64_t wait_for_compiles();
  // Drops the queued background compiles and waits for the running one; no more
  // start (at exit: before what they use is torn down).
  void stop_background_compiles();

  // Empties the in-memory cache (the disk tier keeps its entries).
  // Drops every program (their JIT code with them) and the pooled buffers.
  void clear_cache();
  size_t cache_size() const { return cache_.size(); }

 private:
  // One sync's request, as every tier of resolve() sees it (pipeline.cpp).
  struct SyncRequest {
    const ir::Graph& graph;
    const std::string& site;
    std::optional<lowering::Shapes> shapes;
    const NodeSites& node_sites;
    cache::CacheKey key;
    bool generic = false;      // shape-generic code: may bind to another size's program
    bool background = false;   // a miss may compile on the worker while the sync runs op by op
    bool checked = false;      // NaN checks on: kernels test their stores (another key)
    bool may_compile = true;   // false in a strict region (lazyjit.strict(), NoCompileScope)
  };
  SyncRequest request(const ir::Graph& graph, const std::string& site, std::optional<lowering::Shapes> shapes,
                      const NodeSites& node_sites, bool background) const;
  // What resolved a sync that missed the memory cache: a program, or (null)
  // "run op by op", and how, for the sync log.
  struct Resolved {
    std::shared_ptr<const lowering::Program> program;
    SyncNote note;
    bool explained = false;  // a recompile explanation was recorded (and traced) for it
  };
  // The program for a request: from memory, else from resolve(); null when it
  // runs op by op. `*note` says how it was found.
  std::shared_ptr<const executor::Executable> program_for(const SyncRequest& s, SyncNote* note);
  // The tiers after a memory miss, in order (pipeline.cpp); `why_missed` is the
  // memory cache's reason, recorded when the sync counts as a miss.
  Resolved resolve(const SyncRequest& s, const std::string& why_missed);

  // The tiers (sync_tiers.cpp); each resolves the sync or returns nullopt.
  struct BackgroundLook {
    bool pending = false;  // a compile of this structure is queued or running
    bool failed = false;   // the one that finished for this key threw
  };
  std::optional<Resolved> background_result(const SyncRequest& s, BackgroundLook* look);
  std::optional<Resolved> bound_to_sizes(const SyncRequest& s);
  std::optional<Resolved> sibling_on_disk(const SyncRequest& s);
  std::optional<Resolved> by_policy(const SyncRequest& s);  // recompile_policy.cpp
  Resolved start_in_background(const SyncRequest& s);
  Resolved stored_or_compiled(const SyncRequest& s);
  static Resolved op_by_op(SyncNote::How how, std::string why = {});
  static void count_miss(const std::string& why_missed);
  static void count_sync(SyncNote::How how);
  void say_where_dumps_go() const;

  static void trim_heap();  // heap_trim.cpp
  static void to_traced_nodes(RunResult& r, const ir::Graph& traced, const ir::Graph& program);
  RunResult run_observed(const ir::Graph& graph, const Bindings& bindings, const std::string& site,
                         std::optional<lowering::Shapes> shapes, const NodeSites& node_sites,
                         const RunObserver& observer, bool check, bool repro, SyncNote* note);
  // With NaN checks on: sets r.nan_report when an output holds a NaN or Inf.
  // Outputs that kernels with checked stores (Plan::check_stores) wrote were
  // tested as stored; the others are scanned (nan_pinning.cpp).
  void check_nans(RunResult& r, const lowering::Program& program, const ir::Graph& graph, const Bindings& bindings,
                  const NodeSites& node_sites);
  // Records (and with LAZYJIT_LOG=recompiles prints) why the request's graph is
  // compiled, or, past the recompile limit with LAZYJIT_ON_RECOMPILE_LIMIT=op_by_op,
  // run op by op; returns the kind of miss (recompile_policy.cpp). A refused
  // miss (a strict region) throws CompileRefused with the explanation.
  enum class Miss { Compile, Background, OpByOp, Refused };
  std::string explain_miss(const SyncRequest& s, Miss miss);
  // `graph` as a program without kernels: every node run op by op through ATen
  // (lowering::plan_op_by_op); `keep_values`: no buffer frees (op_by_op.cpp).
  executor::Executable op_by_op_program(const ir::Graph& graph, bool keep_values) const;
  // Past the limit with LAZYJIT_ON_RECOMPILE_LIMIT=op_by_op, or while its program
  // compiles in the background (`how` says which): `graph` runs op by op,
  // uncompiled and uncached.
  RunResult run_op_by_op(const ir::Graph& graph, const Bindings& bindings, SyncNote::How how);
  // `graph` bound to a program of its structure compiled before (shape_binder.h),
  // or null; never when `shapes` (or LAZYJIT_DYNAMIC) asks for exact code.
  std::shared_ptr<const lowering::Program> bind_sizes(const ir::Graph& graph, std::optional<lowering::Shapes> shapes,
                                                      uint64_t code_hash);

  Config config_;
  std::unique_ptr<Backend> backend_;  // before target_: it makes it
  std::unique_ptr<lowering::Target> target_;
  executor::ExecutionTarget execution_;  // the backend's: how programs' steps run
  std::string code_fingerprint_;  // target fingerprint + lazyjit version + codegen switches
  uint64_t code_hash_ = 0;        // its hash: the key's target part
  uint64_t checked_code_hash_ = 0;  // the same, for programs whose kernels test their stores (NaN checks on)
  std::unique_ptr<DiskTier> disk_;  // null when the on-disk cache is off
  RecompileExplainer explainer_;
  ShapeBinder binder_;  // new sizes of a compiled structure, bound without compiling
  std::atomic<bool> debug_nans_{false};
  std::atomic<bool> check_graphs_{false};
  mutable std::mutex repro_mu_;
  std::string repro_dir_ = "lazyjit_repro";
  // With NaN checks on: the report of which op made a NaN/Inf in `graph`'s outputs.
  std::string pin_nonfinite(const ir::Graph& graph, const Bindings& bindings, const NodeSites& node_sites);
  std::mutex op_by_op_sites_mu_;
  std::set<std::string> op_by_op_sites_;  // sites whose misses run op by op (warned once each)
  // Op-by-op plans by graph structure (steps and buffer frees follow from it):
  // a structure run op by op again, at any sizes, is not planned again.
  struct OpByOpPlan {
    lowering::Plan plan;
    size_t nodes = 0, values = 0;  // of the graph it was made for (a cheap check)
  };
  mutable std::mutex op_by_op_plans_mu_;
  mutable std::unordered_map<ir::Hash128, std::shared_ptr<const OpByOpPlan>, cache::Hash128Hash> op_by_op_plans_;
  cache::CompileCache<executor::Executable> cache_;
  // Last: destroyed first, its worker joined while what it uses still lives.
  std::unique_ptr<BackgroundCompiles> background_;  // null with LAZYJIT_BACKGROUND_COMPILE=off
};

// Whether generated kernels compute elementwise ops in `t` (else the tracer
// records them as ATen library steps).
bool kernels_support(ir::DType t);

// torch.accelerator.empty_cache(): the memory kept for programs' buffers, and
// the heap's free pages, go back to the system (heap_trim.cpp).
void release_cached_memory();
// The host's (free, total) bytes of memory: where the CPU target keeps data.
std::pair<size_t, size_t> host_memory_info();

}  // namespace lazyjit::runtime
