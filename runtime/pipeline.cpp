// The map of a sync: from a finished graph (its outputs chosen by the tracer,
// tracer/trace_context.cpp) and its bindings to one CPU tensor per output.
// Read top to bottom, this file is the whole path; each step names the
// function (and file) that does it.
//
//   Runtime::run
//     key      structure hash, shape signature, code hash (cache/cache_key.h); request()
//     memory   the in-memory compile cache (cache/compile_cache.h): a hit runs at once.
//              On a miss, resolve() asks these tiers in order; the first that answers ends it:
//       1 background result  a program a background compile finished for this key: taken,
//                            not a miss (its miss was counted when it started)       sync_tiers.cpp
//       2 bind               a program of this structure compiled for other sizes,
//                            bound to these, no compile (runtime/shape_binder.h)      sync_tiers.cpp
//       3 pending            its structure still compiling in the background: this
//                            sync runs op by op, not a miss                           op_by_op.cpp
//       4 sibling on disk    a new process: a program stored for other sizes, bound  sync_tiers.cpp
//       5 policy             a strict region refuses (CompileRefused); past the
//                            recompile limit with LAZYJIT_ON_RECOMPILE_LIMIT=op_by_op:
//                            op by op                                                recompile_policy.cpp
//       6 background start   stored on disk: loaded; else queued on the compile worker
//                            (runtime/background_compiles.h) and this sync runs op by op
//       7 disk, remote, compile  under the key's file lock: the disk entry, else the
//                            Redis entry, else lowering (lowering/lower.h), written to
//                            both (runtime/disk_tier.h); entries are verified for their
//                            key before linking (runtime/program_entry.h)
//              A program found (1, 2, 4, 6, 7) is cached in memory; op by op (3, 5, 6) is not.
//     run      kernels and ATen steps (executor/executable.cpp), or op by op through ATen
//              (op_by_op.cpp); with NaN checks on, a NaN or Inf is pinned to its op
//              (nan_pinning.cpp)
//     note     how the program was found, for the sync log (runtime/sync_log.h)
//
// With hooks on compiled ops or the compiled-vs-eager check, run() goes through
// run_observed() instead (observed_run.cpp): the same lookup, every value kept.
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
#include "runtime/disk_tier.h"
#include "runtime/runtime.h"
#include "runtime/traced_node.h"

namespace lazyjit::runtime {

SyncResult Runtime::run(const ir::Graph& graph, const Bindings& bindings, const std::string& site,
                        std::optional<lowering::Shapes> shapes, const NodeSites& node_sites,
                        const RunObserver& observer) {
  SyncResult r;
  // Hooks on compiled ops or the compiled-vs-eager check: every value kept (observed_run.cpp).
  if (observer || check_graphs_) {
    static_cast<RunResult&>(r) =
        run_observed(graph, bindings, site, shapes, node_sites, observer, check_graphs_, /*repro=*/true, &r.note);
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
    static_cast<RunResult&>(r) = run_op_by_op(graph, bindings, r.note.how);
    return r;
  }
  static_cast<RunResult&>(r) = program->run(bindings, threads());
  // A program is kept when a run fails: its data was bad, not its code.
  to_traced_nodes(r, graph, program->program().graph);
  check_nans(r, program->program(), graph, bindings, node_sites);
  return r;
}

std::shared_ptr<const executor::Executable> Runtime::prepare(const ir::Graph& graph, const std::string& site,
                                                             std::optional<lowering::Shapes> shapes) {
  // Called to run the program many times: it is compiled now, not in the background.
  SyncNote note;
  if (auto program = program_for(request(graph, site, shapes, {}, /*background=*/false), &note)) return program;
  return std::make_shared<const executor::Executable>(op_by_op_program(graph, /*keep_values=*/false));
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

Runtime::SyncRequest Runtime::request(const ir::Graph& graph, const std::string& site,
                                      std::optional<lowering::Shapes> shapes, const NodeSites& node_sites,
                                      bool background) const {
  std::optional<debug::TraceSpan> span;
  if (debug::trace_enabled()) span.emplace("hash", "cache key", debug::TraceArgs{{"nodes", graph.nodes().size()}});
  SyncRequest s{graph, site, shapes, node_sites,
                // With NaN checks on, kernels test what they store: other code, another key.
                cache::CacheKey::make(graph.hashes(), debug_nans_ ? checked_code_hash_ : code_hash_)};
  s.checked = debug_nans_;
  s.generic = shapes.value_or(config_.dynamic) != lowering::Shapes::Off;
  // NaN checks pin a bad value on a compiled program's outputs: compiled now.
  s.background = background && !s.checked;
  s.may_compile = compiles_allowed_here();
  return s;
}

std::shared_ptr<const executor::Executable> Runtime::program_for(const SyncRequest& s, SyncNote* note) {
  Resolved resolved;
  std::string why;
  cache::Lookup<executor::Executable> lookup = cache_.get_or_compile(s.key, [&](const std::string& why_missed) {
    why = why_missed;
    resolved = resolve(s, why_missed);
    return resolved.program ? std::make_shared<const executor::Executable>(resolved.program, execution_)
                            : std::shared_ptr<const executor::Executable>();
  });
  *note = lookup.hit ? SyncNote{} : resolved.note;
  if (!lookup.hit && lookup.entry && backend_->captures_graphs()) note->graph_replay = lookup.entry->graph_replay().text();
  // A miss explained was traced then; one run op by op says so in the sync log.
  if (debug::trace_enabled() && lookup.entry && (lookup.hit || !resolved.explained))
    debug::trace_instant("cache", lookup.hit ? "cache hit" : "cache miss",
                         lookup.hit ? debug::TraceArgs{{"key", s.key.str()}, {"site", s.site}}
                                    : debug::TraceArgs{{"key", s.key.str()}, {"site", s.site}, {"reason", why},
                                                       {"kind", sync_how_text(note->how)}});
  return lookup.entry;  // null: op by op
}

// A cache miss is counted where no tier had the program: a load from disk or
// from the remote tier (6, 7) is not one.
Runtime::Resolved Runtime::resolve(const SyncRequest& s, const std::string& why_missed) {
  if (!config_.dump_dir.empty()) say_where_dumps_go();
  BackgroundLook background;
  if (auto r = background_result(s, &background)) return *r;                           // 1
  if (auto r = bound_to_sizes(s)) {                                                    // 2
    count_miss(why_missed);
    return *r;
  }
  if (background.pending && s.may_compile) return op_by_op(SyncNote::How::Background); // 3
  if (auto r = sibling_on_disk(s)) {                                                   // 4
    count_miss(why_missed);
    return *r;
  }
  if (auto r = by_policy(s)) {                                                         // 5
    count_miss(why_missed);
    return *r;
  }
  // One that failed in the background compiles here, to fail where the user sees it.
  Resolved r = s.background && !background.failed ? start_in_background(s)             // 6
                                                  : stored_or_compiled(s);             // 7
  if (r.note.how != SyncNote::How::Loaded && r.note.how != SyncNote::How::Remote) count_miss(why_missed);
  return r;
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

void Runtime::count_miss(const std::string& why_missed) {
  debug::Metrics::get().add(debug::Counter::CacheMisses);
  debug::Metrics::get().cache_miss(why_missed);
}

// A failed step names a node of the program's graph (after the graph passes);
// the caller knows its own.
void Runtime::to_traced_nodes(RunResult& r, const ir::Graph& traced, const ir::Graph& program) {
  for (executor::StepFailure& f : r.failures) {
    int64_t n = traced_node(traced, program, f.node);
    f.node = n < 0 ? Runtime::kNoNode : static_cast<uint32_t>(n);
  }
}

std::shared_ptr<const lowering::Program> Runtime::compile(ir::Graph graph, const std::string& dump_name,
                                                          std::optional<lowering::Shapes> shapes,
                                                          bool check_stores) const {
  lowering::LowerOptions opts;
  opts.plan.disabled = config_.disabled_passes;
  opts.plan.check_stores = check_stores;
  opts.dump_dir = config_.dump_dir;
  opts.dump_name = dump_name;
  opts.shapes = shapes.value_or(config_.dynamic);
  opts.pass_rules = backend_->pass_rules();
  return lowering::lower(std::move(graph), *target_, opts);
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
  {
    std::lock_guard<std::mutex> lock(op_by_op_plans_mu_);
    op_by_op_plans_.clear();
  }
  target_->clear_kernels();
  executor::trim_buffer_pool();
}

int Runtime::threads() const { return config_.num_threads ? config_.num_threads : at::get_num_threads(); }

bool kernels_support(ir::DType t) { return lowering::lowerable_dtype(t); }

}  // namespace lazyjit::runtime
