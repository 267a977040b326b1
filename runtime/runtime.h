// The runtime: what the tracer hands a finished graph to. A facade: it owns
// the configuration, the backend and its compile target, and the parts a sync
// goes through, and drives a sync from graph to results. Its files:
//
//   runtime.cpp          construction: the backend LAZYJIT_TARGET names, its
//                        target, the caches, the tiers, the background worker
//   pipeline.cpp         the map of a sync: key, memory cache, the tier list
//                        resolve() walks, run, note
//   tiers.h              the tiers (sync_tiers.cpp; the policy tier in
//                        recompile_policy.cpp, recompile_policy.h)
//   compiler.h           lowering with the Config's switches (pipeline.cpp)
//   op_by_op.h/.cpp      syncs run op by op through ATen
//   disk_tier.h/.cpp, remote_tier.h/.cpp   the on-disk and Redis stores
//   shape_binder.h, background_compiles.h, recompile_explainer.h   what the tiers ask
//   debug_runs/          observed runs, compiled vs eager, repros, NaN pinning
//   heap_trim.cpp        giving freed heap back
//
// Layering: tracer -> runtime -> {executor, lowering, cache} -> graph_ir.
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
#include "runtime/config.h"
#include "runtime/debug_runs/observed_run.h"
#include "runtime/recompile_explainer.h"
#include "runtime/recompile_policy.h"
#include "runtime/run_io.h"
#include "runtime/shape_binder.h"
#include "runtime/sync_log.h"
#include "runtime/traced_node.h"

namespace lazyjit::lowering {
class Target;
}

namespace lazyjit::runtime {

class BackgroundCompiles;
class Compiler;
class DebugRuns;
class DiskTier;
class OpByOpRuns;
class Tier;
struct Resolved;
struct SyncRequest;
struct TierParts;
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
  static constexpr uint32_t kNoNode = kNoTracedNode;

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

  // NaN/Inf checks of every run's outputs (runtime/debug_runs/nan_check.h); a run whose
  // outputs hold one comes back with RunResult::nan_report set. Starts as
  // LAZYJIT_DEBUG_NANS says.
  void set_debug_nans(bool on);
  bool debug_nans() const;
  // The compiled-vs-eager check (runtime/debug_runs/graph_check.h; LAZYJIT_CHECK=1): a run
  // whose generated code disagrees with eager's on some op comes back with
  // RunResult::check_report set, and a standalone repro written under
  // `repro_dir` (unchanged when empty; default ./lazyjit_repro).
  void set_check_graphs(bool on, const std::string& repro_dir = {});
  bool check_graphs() const;
  std::string repro_dir() const;
  // The check on one graph, whatever the switch says, writing no repro (what a
  // repro runs): the report, or "" when generated code agrees with eager.
  std::string check_graph(const ir::Graph& graph, const Bindings& bindings);

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
  // The names of the tiers a sync that misses the memory cache goes through,
  // in the order it asks them (the map in pipeline.cpp).
  std::vector<std::string> tier_names() const;

 private:
  SyncRequest request(const ir::Graph& graph, const std::string& site, std::optional<lowering::Shapes> shapes,
                      const NodeSites& node_sites, bool background) const;
  // The program for a request: from memory, else from resolve(); null when it
  // runs op by op. `*note` says how it was found.
  std::shared_ptr<const executor::Executable> program_for(SyncRequest& s, SyncNote* note);
  // The tiers after a memory miss, in order (pipeline.cpp); `why_missed` is the
  // memory cache's reason, recorded when the sync counts as a miss.
  Resolved resolve(SyncRequest& s, const std::string& why_missed);
  // The tier list resolve() walks, in the map's order (pipeline.cpp).
  static std::vector<std::unique_ptr<Tier>> tiers(const TierParts& parts);
  // A run that keeps every value (debug_runs/observed_run.h): its program found
  // as any sync's, then run by the debug runs.
  RunResult run_observed(const ir::Graph& graph, const Bindings& bindings, const std::string& site,
                         std::optional<lowering::Shapes> shapes, const NodeSites& node_sites,
                         const RunObserver& observer, bool check, bool repro, SyncNote* note);
  static void count_sync(SyncNote::How how);
  void say_where_dumps_go() const;

  Config config_;
  std::unique_ptr<Backend> backend_;  // before target_: it makes it
  std::unique_ptr<lowering::Target> target_;
  executor::ExecutionTarget execution_;  // the backend's: how programs' steps run
  std::string code_fingerprint_;  // target fingerprint + lazyjit version + codegen switches
  uint64_t code_hash_ = 0;        // its hash: the key's target part
  uint64_t checked_code_hash_ = 0;  // the same, for programs whose kernels test their stores (NaN checks on)
  std::unique_ptr<Compiler> compiler_;
  std::unique_ptr<DiskTier> disk_;  // null when the on-disk cache is off
  RecompilePolicy policy_;
  ShapeBinder binder_;  // new sizes of a compiled structure, bound without compiling
  std::unique_ptr<OpByOpRuns> op_by_op_;
  std::unique_ptr<DebugRuns> debug_;
  cache::CompileCache<executor::Executable> cache_;
  std::vector<std::unique_ptr<Tier>> tiers_;
  // Last: destroyed first, its worker joined while what its jobs use still lives.
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
