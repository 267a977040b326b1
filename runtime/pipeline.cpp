// The map of a sync: from a finished graph (its outputs chosen by the tracer,
// tracer/trace_context.cpp) and its bindings to one CPU tensor per output.
// Read top to bottom, this file is the whole path; each step names the
// function (and file) that does it.
//
//   Runtime::run
//     key      structure hash, shape signature, code hash (cache/cache_key.h); request()
//     memory   the in-memory compile cache (cache/compile_cache.h): a hit runs at once.
//              On a miss, resolve() asks these tiers in order (tiers(), below; each a
//              class of runtime/tiers.h); the first that answers ends it:
//       1 background result  a program a background compile finished for this key: taken,
//                            not a miss (its miss was counted when it started)       sync_tiers.cpp
//       2 bind               a program of this structure compiled for other sizes,
//                            bound to these, no compile (runtime/shape_binder.h)      sync_tiers.cpp
//       3 pending            its structure still compiling in the background: this
//                            sync runs op by op, not a miss                           sync_tiers.cpp
//       4 sibling on disk    a new process: a program stored for other sizes, bound  sync_tiers.cpp
//       5 policy             a strict region refuses (CompileRefused); past the
//                            recompile limit with LAZYJIT_ON_RECOMPILE_LIMIT=op_by_op:
//                            op by op                                                recompile_policy.cpp
//       6 background start   stored on disk: loaded; else queued on the compile worker
//                            (runtime/background_compiles.h) and this sync runs op by op
//                                                                                    sync_tiers.cpp
//       7 disk, remote, compile  under the key's file lock: the disk entry, else the
//                            Redis entry, else lowering (runtime/compiler.h), written to
//                            both (runtime/disk_tier.h); entries are verified for their
//                            key before linking (runtime/program_entry.h)            sync_tiers.cpp
//              A program found (1, 2, 4, 6, 7) is cached in memory; op by op (3, 5, 6) is not.
//              Calls go one way: the tiers ask the stores, which call nothing back.
//     run      kernels and ATen steps (executor/executable.cpp), or op by op through ATen
//              (op_by_op.cpp); with NaN checks on, a NaN or Inf is pinned to its op
//              (debug_runs/nan_pinning.cpp)
//     note     how the program was found, for the sync log (runtime/sync_log.h)
//
// With hooks on compiled ops or the compiled-vs-eager check, run() goes through
// run_observed() instead: the same lookup, then every value kept
// (debug_runs/observed_run.cpp).
#include <ATen/Context.h>
#include <ATen/Parallel.h>

#include <filesystem>
#include <optional>

#include "debug/metrics.h"
#include "debug/notice.h"
#include "debug/trace.h"
#include "executor/buffer_pool.h"
#include "executor/gemm.h"
#include "lowering/compile_threads.h"
#include "lowering/lower.h"
#include "lowering/program_bytes.h"
#include "runtime/background_compiles.h"
#include "runtime/compiler.h"
#include "runtime/debug_runs/debug_runs.h"
#include "runtime/disk_tier.h"
#include "runtime/op_by_op.h"
#include "runtime/runtime.h"
#include "runtime/tiers.h"

namespace lazyjit::runtime {

SyncResult Runtime::run(const ir::Graph& graph, const Bindings& bindings, const std::string& site,
                        std::optional<lowering::Shapes> shapes, const NodeSites& node_sites,
                        const RunObserver& observer) {
  SyncResult r;
  // Hooks on compiled ops or the compiled-vs-eager check: every value kept (observed_run.cpp).
  if (observer || debug_->check_graphs()) {
    static_cast<RunResult&>(r) = run_observed(graph, bindings, site, shapes, node_sites, observer,
                                              debug_->check_graphs(), /*repro=*/true, &r.note);
    count_sync(r.note.how);
    return r;
  }
  // Under torch.use_deterministic_algorithms(True) a new graph waits for its
  // program instead of running op by op: every call gives the same bits.
  const bool background = background_ && !at::globalContext().deterministicAlgorithms();
  SyncRequest s = request(graph, site, shapes, node_sites, background);
  std::shared_ptr<const executor::Executable> program = program_for(s, &r.note);
  count_sync(r.note.how);
  if (!program) {
    static_cast<RunResult&>(r) = op_by_op_->run(graph, bindings, r.note.how, threads());
    return r;
  }
  static_cast<RunResult&>(r) = program->run(bindings, threads());
  // A program is kept when a run fails: its data was bad, not its code.
  to_traced_nodes(r, graph, program->program().graph);
  debug_->check_nans(r, program->program(), graph, bindings, node_sites, threads());
  return r;
}

RunResult Runtime::run_observed(const ir::Graph& graph, const Bindings& bindings, const std::string& site,
                                std::optional<lowering::Shapes> shapes, const NodeSites& node_sites,
                                const RunObserver& observer, bool check, bool repro, SyncNote* note) {
  ObservedGraph g = every_value_an_output(graph);
  // Hooks and the check see the compiled program: it is compiled now.
  SyncRequest s = request(g.all, site, shapes, node_sites, /*background=*/false);
  std::shared_ptr<const executor::Executable> compiled = program_for(s, note);
  std::optional<executor::Executable> op_by_op;
  if (!compiled) {  // past the recompile limit with LAZYJIT_ON_RECOMPILE_LIMIT=op_by_op
    op_by_op.emplace(op_by_op_->program(g.all, /*keep_values=*/false));
    debug::Metrics::get().add(debug::Counter::OpByOpSyncs);
  }
  return debug_->run_observed(compiled ? *compiled : *op_by_op, g, graph, bindings, threads(), node_sites, observer,
                              check, repro);
}

void Runtime::set_check_graphs(bool on, const std::string& repro_dir) { debug_->set_check_graphs(on, repro_dir); }
bool Runtime::check_graphs() const { return debug_->check_graphs(); }
void Runtime::set_debug_nans(bool on) { debug_->set_nans(on); }
bool Runtime::debug_nans() const { return debug_->nans(); }

std::string Runtime::repro_dir() const { return debug_->repro_dir(); }

std::string Runtime::check_graph(const ir::Graph& graph, const Bindings& bindings) {
  SyncNote note;
  RunResult r =
      run_observed(graph, bindings, "lazyjit.repro", std::nullopt, {}, {}, /*check=*/true, /*repro=*/false, &note);
  return r.check_report;
}

std::shared_ptr<const executor::Executable> Runtime::prepare(const ir::Graph& graph, const std::string& site,
                                                             std::optional<lowering::Shapes> shapes) {
  // Called to run the program many times: it is compiled now, not in the background.
  SyncNote note;
  SyncRequest s = request(graph, site, shapes, {}, /*background=*/false);
  if (auto program = program_for(s, &note)) return program;
  return std::make_shared<const executor::Executable>(op_by_op_->program(graph, /*keep_values=*/false));
}

// Each sync counted once, by how it ran (metrics()["syncs_by_how"]); the
// thread remembers its last (lazyjit.last_sync()).
void Runtime::count_sync(SyncNote::How how) {
  using debug::SyncHow;
  SyncHow h = SyncHow::CacheHit;
  switch (how) {
    case SyncNote::How::Hit: h = SyncHow::CacheHit; break;
    case SyncNote::How::Compiled: h = SyncHow::Compiled; break;
    case SyncNote::How::Loaded: h = SyncHow::LoadedFromDisk; break;
    case SyncNote::How::Remote: h = SyncHow::LoadedFromRemote; break;
    case SyncNote::How::OpByOp: h = SyncHow::OpByOpPastLimit; break;
    case SyncNote::How::Bound: h = SyncHow::BoundToNewSizes; break;
    case SyncNote::How::Background: h = SyncHow::OpByOpWhileCompiling; break;
    case SyncNote::How::Ready: h = SyncHow::CompiledInBackground; break;
  }
  debug::Metrics::get().sync_ran(h);
}

SyncRequest Runtime::request(const ir::Graph& graph, const std::string& site,
                                      std::optional<lowering::Shapes> shapes, const NodeSites& node_sites,
                                      bool background) const {
  std::optional<debug::TraceSpan> span;
  if (debug::trace_enabled()) span.emplace("hash", "cache key", debug::TraceArgs{{"nodes", graph.nodes().size()}});
  SyncRequest s{graph, site, shapes, node_sites,
                // With NaN checks on, kernels test what they store: other code, another key.
                cache::CacheKey::make(graph.hashes(), debug_->nans() ? checked_code_hash_ : code_hash_)};
  s.checked = debug_->nans();
  s.generic = shapes.value_or(config_.dynamic) != lowering::Shapes::Off;
  // NaN checks pin a bad value on a compiled program's outputs: compiled now.
  s.background = background && !s.checked;
  s.may_compile = compiles_allowed_here();
  return s;
}

std::shared_ptr<const executor::Executable> Runtime::program_for(SyncRequest& s, SyncNote* note) {
  cache::CompileCache<executor::Executable>::Found found = cache_.find_or_claim(s.key);
  const cache::Lookup<executor::Executable>& lookup = found.lookup;
  std::shared_ptr<const executor::Executable> program = lookup.entry;
  Resolved resolved;
  if (!lookup.hit) {
    try {
      resolved = resolve(s, lookup.miss_reason);
    } catch (...) {
      found.claim.fail(std::current_exception());  // every caller waiting for this key sees it
      throw;
    }
    if (resolved.program) program = std::make_shared<const executor::Executable>(resolved.program, execution_);
    found.claim.settle(program);  // null: op by op, nothing cached
  }
  *note = lookup.hit ? SyncNote{} : resolved.note;
  if (!lookup.hit && program && backend_->captures_graphs()) note->graph_replay = program->graph_replay().text();
  // A miss explained was traced then; one run op by op says so in the sync log.
  if (debug::trace_enabled() && program && (lookup.hit || !resolved.explained))
    debug::trace_instant("cache", lookup.hit ? "cache hit" : "cache miss",
                         lookup.hit ? debug::TraceArgs{{"key", s.key.str()}, {"site", s.site}}
                                    : debug::TraceArgs{{"key", s.key.str()}, {"site", s.site}, {"reason", lookup.miss_reason},
                                                       {"kind", sync_how_text(note->how)}});
  return program;  // null: op by op
}

// The tiers after a memory miss, in the map's order (tests/e2e/sync_map_test.cpp
// holds this list against the map above).
std::vector<std::unique_ptr<Tier>> Runtime::tiers(const TierParts& p) {
  std::vector<std::unique_ptr<Tier>> t;
  t.push_back(std::make_unique<BackgroundResult>(p));  // 1
  t.push_back(std::make_unique<Bind>(p));              // 2
  t.push_back(std::make_unique<Pending>());            // 3
  t.push_back(std::make_unique<SiblingOnDisk>(p));     // 4
  t.push_back(std::make_unique<Policy>(p));            // 5
  t.push_back(std::make_unique<BackgroundStart>(p));   // 6
  t.push_back(std::make_unique<DiskRemoteCompile>(p)); // 7
  return t;
}

// The first tier that answers ends it. A cache miss is counted where no tier
// had the program: taking or loading one is not a miss.
Resolved Runtime::resolve(SyncRequest& s, const std::string& why_missed) {
  if (!config_.dump_dir.empty()) say_where_dumps_go();
  for (const std::unique_ptr<Tier>& tier : tiers_)
    if (std::optional<Resolved> r = tier->try_resolve(s)) {
      if (r->miss) {
        debug::Metrics::get().add(debug::Counter::CacheMisses);
        debug::Metrics::get().cache_miss(why_missed);
      }
      return std::move(*r);
    }
  throw std::logic_error("lazyjit: no sync tier resolved " + s.key.str() + " (the last one always does)");
}

std::vector<std::string> Runtime::tier_names() const {
  std::vector<std::string> names;
  for (const std::unique_ptr<Tier>& tier : tiers_) names.emplace_back(tier->name());
  return names;
}

// LAZYJIT_DEBUG=2-4 and LAZYJIT_DUMP: where the dumps go, said once.
void Runtime::say_where_dumps_go() const {
  std::error_code ec;
  std::filesystem::path dir = std::filesystem::absolute(config_.dump_dir, ec);
  // One that cannot be made is said by the dump writer instead (debug/dump.cpp).
  if (std::error_code made; !std::filesystem::create_directories(dir, made) && made) return;
  debug::notice("dumps", "debug dumps of each compiled program (graph, passes, plan" +
                             std::string(config_.dump_llvm ? ", LLVM IR, assembly" : "") + ") go to " +
                             (ec ? config_.dump_dir : dir.string()) + " (LAZYJIT_DEBUG>=2 / LAZYJIT_DUMP)");
}

std::shared_ptr<const lowering::Program> Runtime::compile(ir::Graph graph, const std::string& dump_name,
                                                          std::optional<lowering::Shapes> shapes,
                                                          bool check_stores) const {
  return compiler_->compile(std::move(graph), dump_name, shapes, check_stores);
}

std::shared_ptr<const lowering::Program> Compiler::compile(ir::Graph graph, const std::string& dump_name,
                                                           std::optional<lowering::Shapes> shapes,
                                                           bool check_stores) const {
  lowering::LowerOptions opts;
  opts.plan.disabled = config_.disabled_passes;
  opts.plan.check_stores = check_stores;
  opts.dump_dir = config_.dump_dir;
  opts.dump_name = dump_name;
  opts.shapes = shapes.value_or(config_.dynamic);
  opts.pass_rules = backend_.pass_rules();
  return lowering::lower(std::move(graph), target_, opts);
}

std::string Runtime::to_bytes(const lowering::Program& program) const { return lowering::program_to_bytes(program); }

int64_t Runtime::wait_for_compiles() { return background_ ? background_->wait_all() : 0; }

void Runtime::stop_background_compiles() {
  if (background_) background_->stop();
}

void Runtime::clear_cache() {
  if (background_) background_->clear();  // none finishes into the binder after it is cleared
  cache_.clear();
  binder_.clear();
  op_by_op_->clear();
  target_->clear_kernels();
  executor::trim_buffer_pool();
}

int Runtime::threads() const { return config_.num_threads ? config_.num_threads : at::get_num_threads(); }

bool kernels_support(ir::DType t) { return lowering::lowerable_dtype(t); }

}  // namespace lazyjit::runtime
