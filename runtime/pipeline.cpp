// The map of a sync, from a finished graph to its results:
//
//   graph + bindings
//     -> key      structure hash, shape signature, target and codegen switches (cache/cache_key.h)
//     -> lookup   in-memory compile cache: a hit skips everything up to `run` (cache/compile_cache.h)
//     -> bind     on a miss, a structure compiled (or stored on disk) before: its program bound
//                 to these sizes, no compile (runtime/shape_binder.h)
//     -> load     on a miss, from the on-disk cache: the object is linked, no codegen (runtime/disk_tier.h)
//     -> lower    on a miss of both: graph passes, plan, LLVM codegen to an object (lowering/lower.h),
//                 then written to disk for the next process; by default on a worker thread while
//                 this sync runs op by op (runtime/background_compiles.h)
//     -> prepare  an Executable: kernels linked, ATen operators resolved once (executor/executable.h)
//     -> run      kernels on oneTBB, library steps through ATen (executor/executable.cpp)
//     -> one CPU tensor per graph output
//
// The tracer (tracer/trace_context.cpp) decides which values are outputs before
// this and writes the results back into its storages after it.
#include <ATen/Parallel.h>

#include <chrono>
#include <cstdio>
#include <optional>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>

#include "debug/metrics.h"
#include "debug/trace.h"
#include "executor/buffer_pool.h"
#include "executor/gemm.h"
#include "graph_ir/hash.h"
#include "graph_ir/node_name.h"
#include "lowering/compile_threads.h"
#include "lowering/lower.h"
#include "lowering/program_bytes.h"
#include "runtime/disk_tier.h"
#include "runtime/nan_check.h"
#include "runtime/runtime.h"
#include "runtime/sync_log.h"
#include "runtime/traced_node.h"

namespace lazyjit::runtime {

Runtime& Runtime::get() {
  static Runtime* rt = new Runtime(process_config());  // outlives static tensors
  return *rt;
}

Runtime::Runtime(Config config) : config_(std::move(config)) {
  cache_.set_capacity(static_cast<size_t>(config_.max_programs));
  executor::set_small_gemm_enabled(config_.small_gemm);
  lowering::CodegenOptions codegen;
  codegen.vector_bits = config_.vector_bits;
  codegen.opt_level = config_.opt_level;
  codegen.fault = config_.fault;
  // The text of every module costs memory, its assembly a second codegen:
  // only when dumping them (LAZYJIT_DUMP, LAZYJIT_DEBUG=3; not at level 2).
  codegen.keep_llvm_ir = codegen.keep_asm = !config_.dump_dir.empty() && config_.dump_llvm;
  target_ = lowering::make_cpu_target(codegen);
  // Everything that changes the code a key stands for.
  code_fingerprint_ = target_->fingerprint() + ";lazyjit " LAZYJIT_VERSION ";" + config_.codegen_text();
  code_hash_ = ir::hash64(code_fingerprint_.data(), code_fingerprint_.size());
  const std::string checked = code_fingerprint_ + ";checked stores";
  checked_code_hash_ = ir::hash64(checked.data(), checked.size());
  disk_ = DiskTier::open(config_, code_fingerprint_, *target_);
  if (config_.background_compile) {
    background_ = std::make_unique<BackgroundCompiles>();
    // What it compiles goes to disk for the next process: finished even at exit.
    background_->finish_queued_at_stop(disk_ != nullptr);
    // The compiler's first use (LLVM's JIT, passes, code generator) on the
    // worker now, while the program is still being set up, not at its first
    // compile beside the program's first op-by-op syncs.
    background_->warm_up([t = target_.get()] {
      lowering::NoPollScope no_poll;
      lowering::SerialCompileScope serial;
      t->warm_up();
    });
  }
  explainer_.set_dynamic(config_.dynamic != lowering::Shapes::Off);
  debug_nans_ = config_.debug_nans;
  check_graphs_ = config_.check_graphs;
  // LAZYJIT_TRACE: Chrome trace events, written at exit (debug/trace.h).
  if (!config_.trace_file.empty() && debug::trace_path().empty()) debug::start_trace(config_.trace_file);
}

Runtime::~Runtime() = default;

namespace {
// Thrown out of the cache's compile callback (so nothing is cached) when the
// graph is to run op by op instead.
struct RunEagerly {};
thread_local int t_no_compile = 0;
// Set when program_for returns null because the graph's program compiles in
// the background (else it runs op by op past the recompile limit).
thread_local bool t_background = false;
// Ends a recompile log line of a compile started in the background.
constexpr const char* kBackgroundNote = " (in the background: runs op by op until ready)";
// Op-by-op plans kept (Runtime::eager_plans_), a few KB each.
constexpr size_t kMaxEagerPlans = 256;
// Set by explain_compile while tracing: the lookup that missed said why.
thread_local bool t_miss_explained = false;
}  // namespace

// A failed step names a node of the program's graph (after the graph passes);
// the caller knows its own.
void Runtime::to_traced_nodes(RunResult& r, const ir::Graph& traced, const ir::Graph& program) {
  for (executor::StepFailure& f : r.failures) {
    int64_t n = traced_node(traced, program, f.node);
    f.node = n < 0 ? Runtime::kNoNode : static_cast<uint32_t>(n);
  }
}

NoCompileScope::NoCompileScope() { ++t_no_compile; }
NoCompileScope::~NoCompileScope() { --t_no_compile; }

RunResult Runtime::run(const ir::Graph& graph, const Bindings& bindings, const std::string& site,
                       std::optional<lowering::Shapes> shapes, const NodeSites& node_sites,
                       const RunObserver& observer) {
  // Hooks on compiled ops or the compiled-vs-eager check: every value kept (observed_run.cpp).
  if (observer || check_graphs_)
    return run_observed(graph, bindings, site, shapes, node_sites, observer, check_graphs_, /*repro=*/true);
  std::shared_ptr<const executor::Executable> program =
      program_for(graph, site, shapes, node_sites, /*background=*/background_ != nullptr);
  if (!program) return run_eagerly(graph, bindings);
  RunResult r = program->run(bindings, threads());
  // A program is kept when a run fails: its data was bad, not its code.
  to_traced_nodes(r, graph, program->program().graph);
  check_nans(r, program->program(), graph, bindings, node_sites);
  return r;
}

std::shared_ptr<const executor::Executable> Runtime::prepare(const ir::Graph& graph, const std::string& site,
                                                             std::optional<lowering::Shapes> shapes) {
  // Called to run the program many times: it is compiled now.
  if (auto program = program_for(graph, site, shapes, {}, /*background=*/false)) return program;
  return std::make_shared<const executor::Executable>(eager_program(graph, /*keep_values=*/false));
}

std::shared_ptr<const executor::Executable> Runtime::program_for(const ir::Graph& graph, const std::string& site,
                                                                 std::optional<lowering::Shapes> shapes,
                                                                 const NodeSites& node_sites, bool background) {
  std::optional<debug::TraceSpan> span;
  if (debug::trace_enabled()) span.emplace("hash", "cache key", debug::TraceArgs{{"nodes", graph.nodes().size()}});
  // With NaN checks on, kernels test what they store: other code, another key.
  const bool checked = debug_nans_;
  // NaN checks pin a bad value on a compiled program's outputs: compiled now.
  background = background && !checked;
  t_background = false;
  cache::CacheKey key = cache::CacheKey::make(graph.hashes(), checked ? checked_code_hash_ : code_hash_);
  span.reset();
  t_miss_explained = false;
  cache::Lookup<executor::Executable> lookup;
  try {
    lookup = cache_
        .get_or_compile(key,
                        [&] {
                          // New sizes of a structure compiled before: no compile (shape_binder.h).
                          const bool generic = shapes.value_or(config_.dynamic) != lowering::Shapes::Off;
                          // A program of this structure compiled in the background: this graph's own.
                          bool failed_in_background = false, pending = false;
                          if (background)
                            if (auto ready = take_background(key, &failed_in_background, &pending))
                              return std::make_shared<const executor::Executable>(std::move(ready));
                          if (auto bound = bind_sizes(graph, shapes, key.target))
                            return std::make_shared<const executor::Executable>(std::move(bound));
                          // Its structure compiles on the worker: this sync runs op by op, as
                          // every one since the compile started (explained then). Null: not cached.
                          if (background && pending && !t_no_compile) {
                            t_background = true;
                            return std::shared_ptr<const executor::Executable>();
                          }
                          // A new process: the program another shape of it left on disk.
                          if (generic && disk_)
                            if (auto sibling = disk_->load_sibling(key)) {
                              binder_.remember(graph, key.target, sibling, config_.disabled_passes);
                              if (auto bound = bind_sizes(graph, shapes, key.target))
                                return std::make_shared<const executor::Executable>(std::move(bound));
                            }
                          if (t_no_compile) explain_compile(graph, site, Miss::Refused, node_sites);  // throws
                          if (config_.on_recompile_limit == RecompileStance::Eager &&
                              explainer_.budget(site) >= config_.recompile_limit &&
                              explainer_.would_count(graph, site)) {
                            explain_compile(graph, site, Miss::Eager, node_sites);
                            throw RunEagerly{};
                          }
                          // It runs op by op while its program compiles (throws RunEagerly);
                          // one that failed there compiles here, to fail where the user sees it.
                          // (A structure already compiling returned above.)
                          if (background && !failed_in_background) {
                            // Stored on disk: loaded now (a few ms), not in the background.
                            if (disk_)
                              if (auto stored = load_stored(graph, key, generic))
                                return std::make_shared<const executor::Executable>(std::move(stored));
                            compile_in_background(graph, key, site, shapes, node_sites, generic);
                          }
                          auto program = load_or_compile(graph, key, site, shapes, node_sites, checked);
                          if (generic) binder_.remember(graph, key.target, program, config_.disabled_passes);
                          return std::make_shared<const executor::Executable>(std::move(program));
                        });
  } catch (const RunEagerly&) {
    return nullptr;
  }
  if (!lookup.entry) return nullptr;  // runs op by op (above), or waited for a caller that did
  if (debug::trace_enabled() && (lookup.hit || !t_miss_explained))  // a miss explained said so already
    debug::trace_instant("cache", lookup.hit ? "cache hit" : "cache miss",
                         lookup.hit ? debug::TraceArgs{{"key", key.str()}, {"site", site}}
                                    : debug::TraceArgs{{"key", key.str()}, {"site", site}, {"reason", lookup.miss_reason},
                                                       {"kind", sync_note().how == SyncNote::How::Bound
                                                                    ? "bound to new sizes"
                                                                    : "loaded from the on-disk cache"}});
  return lookup.entry;
}

void Runtime::check_nans(RunResult& r, const lowering::Program& program, const ir::Graph& graph,
                         const Bindings& bindings, const NodeSites& node_sites) {
  if (!debug_nans_ || !r.failures.empty()) return;
  // Outputs that a kernel with checked stores wrote were tested as they were
  // stored: when none of its stores was NaN or Inf, only the rest need a scan.
  const lowering::Plan& plan = program.plan;
  std::vector<at::Tensor> scan;
  if (plan.check_stores && !r.stored_nonfinite) {
    std::unordered_set<ir::ValueId> tested;
    for (const lowering::FusedKernel& k : plan.kernels)
      for (ir::ValueId v : k.stores) {
        ir::DType t = program.graph.value(v).type.dtype;
        if (t == ir::DType::Float32 || t == ir::DType::Float64) tested.insert(v);
      }
    for (size_t i = 0; i < r.outputs.size(); ++i)
      if (!tested.count(program.graph.outputs()[i])) scan.push_back(r.outputs[i]);
  } else {
    scan = r.outputs;
  }
  if (any_nonfinite(scan)) r.nan_report = pin_nonfinite(graph, bindings, node_sites);
}

std::string Runtime::describe_node(const ir::Graph& graph, uint32_t node, const NodeSites& node_sites) {
  std::string op = ir::node_op_name(graph.nodes()[node]);
  std::string site = node_sites ? node_sites(node) : "";
  return op + " (op #" + std::to_string(node) + " of the graph)" + (site.empty() ? "" : " at " + site);
}

void Runtime::set_check_graphs(bool on, const std::string& repro_dir) {
  std::lock_guard<std::mutex> lock(repro_mu_);
  if (!repro_dir.empty()) repro_dir_ = repro_dir;
  check_graphs_ = on;
}

std::string Runtime::check_graph(const ir::Graph& graph, const Bindings& bindings) {
  RunResult r = run_observed(graph, bindings, "lazyjit.repro", std::nullopt, {}, {}, /*check=*/true, /*repro=*/false);
  return r.check_report;
}

std::string Runtime::repro_dir() const {
  std::lock_guard<std::mutex> lock(repro_mu_);
  return repro_dir_;
}

executor::Executable Runtime::eager_program(const ir::Graph& graph, bool keep_values) const {
  lowering::LowerOptions opts;
  opts.plan.disabled = config_.disabled_passes;
  // Op by op, as eager runs them: no folding, no merged duplicates, every op
  // run. The graph passes cost more than they save here (~70 of ~750 us per
  // sync of a 25-op MLP block), and background compiles run this per sync.
  for (const char* pass : {"dce", "fold", "cse"}) opts.plan.disabled.push_back(pass);
  opts.plan.buffers = !keep_values;
  // A decomposed layer norm as ATen's one op; not when every value is kept
  // (NaN pinning reports the op that made one).
  opts.plan.eager_groups = !keep_values;
  opts.eager = true;
  if (keep_values) return executor::Executable(lowering::lower(ir::Graph(graph), *target_, opts));
  // A structure run op by op before (new sizes while its program compiles in
  // the background): its plan, no lowering (~30 of ~40 us per sync).
  const ir::Hash128 structure = graph.hashes().structure;
  std::shared_ptr<const EagerPlan> known;
  {
    std::lock_guard<std::mutex> lock(eager_plans_mu_);
    auto it = eager_plans_.find(structure);
    if (it != eager_plans_.end()) known = it->second;
  }
  if (known && known->nodes == graph.nodes().size() && known->values == graph.values().size()) {
    auto program = std::make_shared<lowering::Program>();
    program->graph = graph;
    program->plan = known->plan;
    return executor::Executable(std::move(program));
  }
  std::shared_ptr<const lowering::Program> program = lowering::lower(ir::Graph(graph), *target_, opts);
  auto made = std::make_shared<EagerPlan>(EagerPlan{program->plan, graph.nodes().size(), graph.values().size()});
  {
    std::lock_guard<std::mutex> lock(eager_plans_mu_);
    if (eager_plans_.size() >= kMaxEagerPlans) eager_plans_.clear();
    eager_plans_[structure] = std::move(made);
  }
  return executor::Executable(std::move(program));
}

std::string Runtime::pin_nonfinite(const ir::Graph& graph, const Bindings& bindings, const NodeSites& node_sites) {
  // Every value kept: the report shows the op's inputs.
  executor::Executable e = eager_program(graph, /*keep_values=*/true);
  const ir::Graph& pg = e.program().graph;
  std::string found = find_first_nonfinite(e, bindings, threads(), [&](uint32_t node) {
    int64_t t = traced_node(graph, pg, node);
    if (t >= 0) return describe_node(graph, static_cast<uint32_t>(t), node_sites);
    return ir::node_op_name(pg.nodes()[node]);
  });
  if (found.empty())
    return "the outputs hold a NaN or Inf that the op-by-op run did not make (a difference between the generated "
           "code and ATen's kernels: rerun with LAZYJIT_DISABLE_PASSES=fuse to bisect)";
  return found;
}

RunResult Runtime::run_eagerly(const ir::Graph& graph, const Bindings& bindings) {
  executor::Executable e = eager_program(graph, /*keep_values=*/false);
  debug::Metrics::get().add(t_background ? debug::Counter::BackgroundSyncs : debug::Counter::EagerSyncs);
  RunResult r = e.run(bindings, threads());
  to_traced_nodes(r, graph, e.program().graph);
  sync_note().how = t_background ? SyncNote::How::Background : SyncNote::How::Eager;
  return r;
}

std::shared_ptr<const lowering::Program> Runtime::take_background(const cache::CacheKey& key, bool* failed,
                                                                  bool* pending) {
  BackgroundCompiles::State state;
  double waited_ms = 0;  // a compile pending past BackgroundCompiles::kOverdue is waited for
  std::optional<BackgroundCompiles::Done> done = background_->take(key, &state, &waited_ms);
  *pending = state == BackgroundCompiles::State::Pending;
  if (!done) return nullptr;
  if (done->error) {
    *failed = true;
    return nullptr;
  }
  if (done->key == key) {
    sync_note().how = SyncNote::How::Ready;
    sync_note().prepare_ms = waited_ms;
    if (waited_ms > 0)
      sync_note().why = "pending over " + std::to_string(BackgroundCompiles::kOverdue.count()) + " ms";
    return std::move(done->program);
  }
  // Compiled for other sizes: cached under its own key (a later sync of those
  // sizes hits it), and remembered by the binder when generic (the worker did).
  cache_.put(done->key, std::make_shared<const executor::Executable>(std::move(done->program)));
  return nullptr;
}

std::shared_ptr<const lowering::Program> Runtime::load_stored(const ir::Graph& graph, const cache::CacheKey& key,
                                                              bool generic) {
  auto t0 = std::chrono::steady_clock::now();
  auto program = disk_->load_stored(key);
  if (!program) return nullptr;
  sync_note().how = SyncNote::How::Loaded;
  sync_note().prepare_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (generic) binder_.remember(graph, key.target, program, config_.disabled_passes);
  return program;
}

void Runtime::compile_in_background(const ir::Graph& graph, const cache::CacheKey& key, const std::string& site,
                                    std::optional<lowering::Shapes> shapes, const NodeSites& node_sites,
                                    bool generic) {
  t_background = true;
  explain_compile(graph, site, Miss::Background, node_sites);
  // The worker compiles a copy of the graph; it needs no interpreter lock, and
  // a Ctrl-C at the caller is not its to answer.
  background_->start(key, [this, g = graph, key, site, shapes, generic] {
    lowering::NoPollScope no_poll;
    lowering::SerialCompileScope serial;  // the other cores are the program's
    if (debug::trace_enabled()) debug::name_trace_thread("background compile");
    auto compile_it = [&] {
      auto program = compile(ir::Graph(g), key.str(), shapes, /*check_stores=*/false);
      trim_heap();
      return program;
    };
    auto program = disk_ ? disk_->load_or_compile(key, site, compile_it) : compile_it();
    if (generic) binder_.remember(g, key.target, program, config_.disabled_passes);
    return program;
  });
  // (Not started when a job of its structure finished meanwhile: the next sync takes it.)
  throw RunEagerly{};
}

int64_t Runtime::wait_for_compiles() { return background_ ? background_->wait_all() : 0; }

void Runtime::stop_background_compiles() {
  if (background_) background_->stop();
}

std::shared_ptr<const lowering::Program> Runtime::bind_sizes(const ir::Graph& graph,
                                                             std::optional<lowering::Shapes> shapes,
                                                             uint64_t code_hash) {
  if (shapes.value_or(config_.dynamic) == lowering::Shapes::Off) return nullptr;
  std::optional<debug::TraceSpan> span;
  if (debug::trace_enabled()) span.emplace("compile", "bind to new sizes", debug::TraceArgs{{"nodes", graph.nodes().size()}});
  auto program = binder_.bind(graph, code_hash, config_.disabled_passes);
  if (!program) return nullptr;
  debug::Metrics& m = debug::Metrics::get();
  m.add(debug::Counter::ShapeBinds);
  m.time("bind", program->compile_ms);
  sync_note().how = SyncNote::How::Bound;
  sync_note().prepare_ms = program->compile_ms;
  // Each new size leaves freed blocks of its own sizes between long-lived
  // program data, as a compile does (trim_heap): a sweep over 3,000 sizes held
  // 1,056 MB against eager's ~280 MB. Trimming (once loose, see trim_heap) after
  // every 32nd binding keeps it at ~335 MB for ~0.04 ms per binding on average.
  static std::atomic<int64_t> binds{0};
  if (binds.fetch_add(1, std::memory_order_relaxed) % 32 == 31) trim_heap();
  return program;
}

std::shared_ptr<const lowering::Program> Runtime::load_or_compile(const ir::Graph& graph, const cache::CacheKey& key,
                                                                  const std::string& site,
                                                                  std::optional<lowering::Shapes> shapes,
                                                                  const NodeSites& node_sites, bool check_stores) {
  // Lowering consumes a copy: the caller keeps its graph, whose nodes name a
  // step that fails when the program runs.
  auto compile_it = [&] {
    sync_note().how = SyncNote::How::Compiled;
    explain_compile(graph, site, Miss::Compile, node_sites);  // what differs from the nearest program compiled at this site
    auto program = compile(ir::Graph(graph), key.str(), shapes, check_stores);
    trim_heap();
    return program;
  };
  auto t0 = std::chrono::steady_clock::now();
  sync_note().how = SyncNote::How::Loaded;  // unless compile_it runs
  auto program = disk_ ? disk_->load_or_compile(key, site, compile_it) : compile_it();
  sync_note().prepare_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return program;
}

// A compile leaves the heap fragmented: LLVM's short-lived objects interleave
// with long-lived program data, and freed holes between them stay mapped. With
// shapes that keep changing (every step a new, larger size) the process grew
// ~540 KB per program, against ~90 KB of actual program data. Giving the free
// pages back bounds that; doing it after every compile cost the next compile
// its page faults (a small kernel compiled in 15.8 ms on average over 89
// compiles, 13.3 ms without trimming). So the heap is trimmed only once its free
// bytes pass 32 MiB: at most that much stays mapped and unused. glibc only;
// elsewhere a no-op.
void Runtime::trim_heap() {
#ifdef __GLIBC__
  constexpr size_t kLooseBytes = size_t{32} << 20;
  if (mallinfo2().fordblks > kLooseBytes) malloc_trim(0);
#endif
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
  return lowering::lower(std::move(graph), *target_, opts);
}

std::string Runtime::to_bytes(const lowering::Program& program) const {
  return lowering::program_to_bytes(program);
}

void Runtime::explain_compile(const ir::Graph& graph, const std::string& site, Miss miss,
                              const NodeSites& node_sites) {
  Recompile r = explainer_.explain(graph, site, node_sites);
  if (miss == Miss::Eager) r.kind += " (run op by op: past the recompile limit)";
  if (miss == Miss::Background) sync_note().why = r.kind;
  if (miss == Miss::Refused) r.kind += " (refused: a strict region)";
  if (miss == Miss::Compile) sync_note().why = r.kind;
  if (debug::trace_enabled()) {
    t_miss_explained = true;
    debug::trace_instant("cache", "cache miss",
                         {{"site", site}, {"kind", r.kind}, {"detail", r.detail}, {"compiles_at_site", r.count}});
  }
  // `lazyjit-cache why-miss` reads these lines (tools/lazyjit_cache/cmd_why_miss.cpp).
  if (config_.log_recompiles && (miss == Miss::Compile || miss == Miss::Background))
    std::fprintf(stderr, "lazyjit: compiling at %s: %s%s%s%s\n", site.empty() ? "(unknown site)" : site.c_str(),
                 r.kind.c_str(), r.detail.empty() ? "" : ": ", r.detail.c_str(),
                 miss == Miss::Background ? kBackgroundNote : "");
  debug::Metrics::get().recompile({r.site, r.kind, r.detail});
  if (miss == Miss::Refused)
    throw CompileRefused("lazyjit.strict: a compile in a strict region, for the sync at " +
                         (site.empty() ? std::string("(unknown site)") : site) + ": " + r.kind +
                         (r.detail.empty() ? "" : ": " + r.detail) + " (nothing ran; the tensors are still pending)");
  if (miss == Miss::Eager) {
    std::lock_guard<std::mutex> lock(eager_mu_);
    if (eager_sites_.insert(site).second)
      std::fprintf(stderr,
                   "lazyjit: warning: %lld compiles at %s (LAZYJIT_RECOMPILE_LIMIT=%d): from now on its graphs that "
                   "miss the cache run op by op, uncompiled (LAZYJIT_ON_RECOMPILE_LIMIT=eager); this one because: "
                   "%s%s%s. lazyjit.explain_recompiles() lists them all.\n",
                   static_cast<long long>(r.budget - 1), site.empty() ? "(unknown site)" : site.c_str(),
                   config_.recompile_limit, r.kind.c_str(), r.detail.empty() ? "" : ": ", r.detail.c_str());
    return;
  }
  if (!r.counted || r.budget <= config_.recompile_limit) return;
  // New sizes of dims already dynamic are not counted: they plan, no code.
  const int64_t resized = r.count - r.budget;
  std::string what = std::to_string(r.budget) + " compiles at " + (site.empty() ? "(unknown site)" : site) +
                     (resized ? " (and " + std::to_string(resized) + " for new sizes of dynamic dims, not counted)" : "") +
                     " (LAZYJIT_RECOMPILE_LIMIT=" + std::to_string(config_.recompile_limit) + "), this one because: " +
                     r.kind + (r.detail.empty() ? "" : ": " + r.detail) +
                     ". lazyjit.explain_recompiles() lists them all.";
  if (config_.on_recompile_limit == RecompileStance::Error) throw std::runtime_error("lazyjit: recompile limit reached: " + what);
  if (r.budget == config_.recompile_limit + 1) std::fprintf(stderr, "lazyjit: warning: %s\n", what.c_str());
}

void Runtime::clear_cache() {
  if (background_) background_->clear();  // none finishes into the binder after it is cleared
  cache_.clear();
  binder_.clear();
  {
    std::lock_guard<std::mutex> lock(eager_plans_mu_);
    eager_plans_.clear();
  }
  target_->clear_kernels();
  executor::trim_buffer_pool();
}

int Runtime::threads() const { return config_.num_threads ? config_.num_threads : at::get_num_threads(); }

bool kernels_support(ir::DType t) { return lowering::lowerable_dtype(t); }

}  // namespace lazyjit::runtime
