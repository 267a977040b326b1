// The tiers a sync that missed the memory cache goes through (runtime/tiers.h),
// in the order Runtime::resolve (pipeline.cpp, where the map is) lists them.
// The policy tier is in recompile_policy.cpp.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <optional>

#include "debug/metrics.h"
#include "debug/notice.h"
#include "debug/trace.h"
#include "env/env.h"
#include "lowering/compile_threads.h"
#include "lowering/interrupt.h"
#include "runtime/background_compiles.h"
#include "runtime/compiler.h"
#include "runtime/disk_tier.h"
#include "runtime/recompile_policy.h"
#include "runtime/shape_binder.h"
#include "runtime/tiers.h"

namespace lazyjit::runtime {

namespace {
double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// A compile that took over a second is said once per call site
// (LAZYJIT_TEST_SLOW_COMPILE_MS moves the bar, for tests).
double slow_compile_ms() {
  static const double ms = env::number("LAZYJIT_TEST_SLOW_COMPILE_MS", 1000.0);
  return ms;
}

void say_slow_compile(const std::string& site, size_t nodes, double ms, bool background, bool on_disk) {
  if (ms < slow_compile_ms()) return;
  char took[40];
  std::snprintf(took, sizeof took, ms >= 1000 ? "%.2f s" : "%.0f ms", ms >= 1000 ? ms / 1000 : ms);
  const std::string where = site.empty() ? std::string("(unknown site)") : site;
  debug::notice("slow compile @ " + where,
                "compiling the graph synced at " + where + " (" + std::to_string(nodes) + " nodes) took " + took +
                    (background ? " in the background; its syncs ran op by op meanwhile"
                                : "; the sync waited for it") +
                    ". It is cached now" + (on_disk ? " (in memory and on disk)" : " (in memory)") +
                    "; lazyjit.metrics_report() has compile times");
}

// `graph` bound to a program of its structure compiled before (shape_binder.h),
// or null; never when `shapes` (or LAZYJIT_DYNAMIC) asks for exact code.
std::shared_ptr<const lowering::Program> bind_sizes(const TierParts& p, const ir::Graph& graph,
                                                    std::optional<lowering::Shapes> shapes, uint64_t code_hash) {
  if (shapes.value_or(p.config.dynamic) == lowering::Shapes::Off) return nullptr;
  std::optional<debug::TraceSpan> span;
  if (debug::trace_enabled()) span.emplace("compile", "bind to new sizes", debug::TraceArgs{{"nodes", graph.nodes().size()}});
  auto program = p.binder.bind(graph, code_hash, p.config.disabled_passes);
  if (!program) return nullptr;
  debug::Metrics& m = debug::Metrics::get();
  m.add(debug::Counter::ShapeBinds);
  m.time("bind", program->compile_ms);
  // Each new size leaves freed blocks of its own sizes between long-lived
  // program data, as a compile does (trim_heap): a sweep over 3,000 sizes held
  // 1,056 MB against eager's ~280 MB. Trimming (once loose, see trim_heap) after
  // every 32nd binding keeps it at ~335 MB for ~0.04 ms per binding on average.
  static std::atomic<int64_t> binds{0};
  if (binds.fetch_add(1, std::memory_order_relaxed) % 32 == 31) trim_heap();
  return program;
}

// What the disk and remote tiers hold for `key`: the disk entry; else, under
// the key's file lock (held by the result until the caller has compiled and
// stored, so that processes missing the key at once compile it once), the
// disk entry again (another process stored it meanwhile), else the remote one.
struct Stored {
  std::shared_ptr<const lowering::Program> program;  // null: compile, then store while `held`
  SyncNote::How how = SyncNote::How::Compiled;       // Loaded, Remote or (nothing stored) Compiled
  cache::DiskStore::KeyLock held;
};
Stored find_stored(DiskTier& disk, const cache::CacheKey& key) {
  Stored s;
  s.how = SyncNote::How::Loaded;
  if ((s.program = disk.load(key))) return s;
  s.held = disk.lock(key);
  if ((s.program = disk.load(key))) return s;
  disk.count_miss();
  // Under the key's lock: processes of this machine missing it ask the remote once.
  s.how = SyncNote::How::Remote;
  if ((s.program = disk.load_remote(key))) return s;
  s.how = SyncNote::How::Compiled;
  return s;
}
}  // namespace

Resolved op_by_op(SyncNote::How how, std::string why) {
  Resolved r;  // no program: run op by op, nothing cached
  r.note.how = how;
  r.note.why = std::move(why);
  return r;
}

// 1.
std::optional<Resolved> BackgroundResult::try_resolve(SyncRequest& s) {
  if (!s.background) return std::nullopt;
  BackgroundCompiles::State state;
  double waited_ms = 0;  // a compile pending past BackgroundCompiles::kOverdue is waited for
  std::optional<BackgroundCompiles::Done> done = p_.background->take(s.key, &state, &waited_ms);
  s.background_pending = state == BackgroundCompiles::State::Pending;
  if (!done) return std::nullopt;
  if (done->error) {
    s.background_failed = true;
    return std::nullopt;
  }
  if (!(done->key == s.key)) {
    // Compiled for other sizes: cached under its own key (a later sync of those
    // sizes hits it), and remembered by the binder when generic (the worker did).
    p_.memory.put(done->key, std::make_shared<const executor::Executable>(std::move(done->program), p_.execution));
    return std::nullopt;
  }
  debug::Metrics::get().add(debug::Counter::BackgroundTaken);
  if (done->program)
    say_slow_compile(s.site, s.graph.nodes().size(), done->program->compile_ms, true, p_.disk != nullptr);
  Resolved r;
  r.program = std::move(done->program);
  r.note.how = SyncNote::How::Ready;
  r.note.prepare_ms = waited_ms;
  if (waited_ms > 0) r.note.why = "pending over " + std::to_string(BackgroundCompiles::kOverdue.count()) + " ms";
  r.miss = false;  // counted when it started
  return r;
}

// 2.
std::optional<Resolved> Bind::try_resolve(SyncRequest& s) {
  auto program = bind_sizes(p_, s.graph, s.shapes, s.key.target);
  if (!program) return std::nullopt;
  Resolved r;
  r.note.how = SyncNote::How::Bound;
  r.note.prepare_ms = program->compile_ms;
  r.program = std::move(program);
  return r;
}

// 3.
std::optional<Resolved> Pending::try_resolve(SyncRequest& s) {
  if (!s.background_pending || !s.may_compile) return std::nullopt;
  Resolved r = op_by_op(SyncNote::How::Background);
  r.miss = false;
  return r;
}

// 4.
std::optional<Resolved> SiblingOnDisk::try_resolve(SyncRequest& s) {
  if (!s.generic || !p_.disk) return std::nullopt;
  auto sibling = p_.disk->load_sibling(s.key);
  if (!sibling) return std::nullopt;
  p_.binder.remember(s.graph, s.key.target, sibling, p_.config.disabled_passes);
  return bind_.try_resolve(s);
}

// 6. Loaded when stored on disk (a few ms); else queued on the compile worker.
std::optional<Resolved> BackgroundStart::try_resolve(SyncRequest& s) {
  if (!s.background || s.background_failed) return std::nullopt;
  auto t0 = std::chrono::steady_clock::now();
  if (p_.disk)
    if (auto stored = p_.disk->load(s.key)) {
      if (s.generic) p_.binder.remember(s.graph, s.key.target, stored, p_.config.disabled_passes);
      Resolved r;
      r.program = std::move(stored);
      r.note.how = SyncNote::How::Loaded;
      r.note.prepare_ms = ms_since(t0);
      r.miss = false;
      return r;
    }
  Resolved r = op_by_op(SyncNote::How::Background, p_.policy.explain(s, RecompilePolicy::Miss::Background));
  r.explained = true;
  // The worker compiles a copy of the graph; it needs no interpreter lock, and
  // a Ctrl-C at the caller is not its to answer. What it uses outlives it (the
  // Runtime stops the worker before its other parts go).
  bool started = p_.background->start(s.key, [p = p_, g = s.graph, key = s.key, site = s.site, shapes = s.shapes,
                                              generic = s.generic] {
    lowering::NoPollScope no_poll;
    lowering::SerialCompileScope serial;  // the other cores are the program's
    struct CountFinished {  // compiled, loaded or failed: no longer pending
      ~CountFinished() { debug::Metrics::get().add(debug::Counter::BackgroundFinished); }
    } count_finished;
    if (debug::trace_enabled()) debug::name_trace_thread("background compile");
    Stored stored;
    if (p.disk) stored = find_stored(*p.disk, key);
    std::shared_ptr<const lowering::Program> program = stored.program;
    if (!program) {
      program = p.compiler.compile(ir::Graph(g), key.str(), shapes, /*check_stores=*/false);
      trim_heap();
      if (p.disk) p.disk->store(key, *program, site);
    }
    if (generic) p.binder.remember(g, key.target, program, p.config.disabled_passes);
    return program;
  });
  // (Not started when a job of its structure finished meanwhile: the next sync takes it.)
  if (started) debug::Metrics::get().add(debug::Counter::BackgroundCompiles);
  return r;
}

// 7. Lowering consumes a copy: the caller keeps its graph, whose nodes name a
// step that fails when the program runs.
std::optional<Resolved> DiskRemoteCompile::try_resolve(SyncRequest& s) {
  Resolved r;
  auto t0 = std::chrono::steady_clock::now();
  Stored stored;
  if (p_.disk) stored = find_stored(*p_.disk, s.key);
  r.program = stored.program;
  r.note.how = stored.how;
  if (!r.program) {
    r.note.why = p_.policy.explain(s, RecompilePolicy::Miss::Compile);  // what differs from the nearest program at this site
    r.explained = true;
    r.program = p_.compiler.compile(ir::Graph(s.graph), s.key.str(), s.shapes, s.checked);
    trim_heap();
    if (p_.disk) p_.disk->store(s.key, *r.program, s.site);
  }
  r.note.prepare_ms = ms_since(t0);
  r.miss = r.note.how == SyncNote::How::Compiled;
  if (r.note.how == SyncNote::How::Compiled)
    say_slow_compile(s.site, s.graph.nodes().size(), r.note.prepare_ms, false, p_.disk != nullptr);
  if (s.generic) p_.binder.remember(s.graph, s.key.target, r.program, p_.config.disabled_passes);
  return r;
}

}  // namespace lazyjit::runtime
