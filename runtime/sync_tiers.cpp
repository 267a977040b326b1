// The tiers a sync that missed the memory cache goes through, in the order
// Runtime::resolve (pipeline.cpp, where the map is) asks them. Each returns
// what it resolved (a program, or "run op by op") and how, or nothing: the
// next tier's turn. The policy tier is in recompile_policy.cpp.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>

#include "debug/metrics.h"
#include "debug/notice.h"
#include "debug/trace.h"
#include "lowering/compile_threads.h"
#include "runtime/disk_tier.h"
#include "runtime/runtime.h"

namespace lazyjit::runtime {

namespace {
double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// A compile that took over a second is said once per call site
// (LAZYJIT_TEST_SLOW_COMPILE_MS moves the bar, for tests).
double slow_compile_ms() {
  static const double ms = [] {
    const char* e = std::getenv("LAZYJIT_TEST_SLOW_COMPILE_MS");
    return e && *e ? std::atof(e) : 1000.0;
  }();
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
}  // namespace

Runtime::Resolved Runtime::op_by_op(SyncNote::How how, std::string why) {
  Resolved r;  // no program: run op by op, nothing cached
  r.note.how = how;
  r.note.why = std::move(why);
  return r;
}

// 1. A program a background compile finished for this key.
std::optional<Runtime::Resolved> Runtime::background_result(const SyncRequest& s, BackgroundLook* look) {
  if (!s.background) return std::nullopt;
  BackgroundCompiles::State state;
  double waited_ms = 0;  // a compile pending past BackgroundCompiles::kOverdue is waited for
  std::optional<BackgroundCompiles::Done> done = background_->take(s.key, &state, &waited_ms);
  look->pending = state == BackgroundCompiles::State::Pending;
  if (!done) return std::nullopt;
  if (done->error) {
    look->failed = true;
    return std::nullopt;
  }
  if (!(done->key == s.key)) {
    // Compiled for other sizes: cached under its own key (a later sync of those
    // sizes hits it), and remembered by the binder when generic (the worker did).
    cache_.put(done->key, std::make_shared<const executor::Executable>(std::move(done->program), execution_));
    return std::nullopt;
  }
  debug::Metrics::get().add(debug::Counter::BackgroundTaken);
  if (done->program) say_slow_compile(s.site, s.graph.nodes().size(), done->program->compile_ms, true, disk_ != nullptr);
  Resolved r;
  r.program = std::move(done->program);
  r.note.how = SyncNote::How::Ready;
  r.note.prepare_ms = waited_ms;
  if (waited_ms > 0) r.note.why = "pending over " + std::to_string(BackgroundCompiles::kOverdue.count()) + " ms";
  return r;
}

// 2. New sizes of a structure compiled before: bound, no compile.
std::optional<Runtime::Resolved> Runtime::bound_to_sizes(const SyncRequest& s) {
  auto program = bind_sizes(s.graph, s.shapes, s.key.target);
  if (!program) return std::nullopt;
  Resolved r;
  r.note.how = SyncNote::How::Bound;
  r.note.prepare_ms = program->compile_ms;
  r.program = std::move(program);
  return r;
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
  // Each new size leaves freed blocks of its own sizes between long-lived
  // program data, as a compile does (trim_heap): a sweep over 3,000 sizes held
  // 1,056 MB against eager's ~280 MB. Trimming (once loose, see trim_heap) after
  // every 32nd binding keeps it at ~335 MB for ~0.04 ms per binding on average.
  static std::atomic<int64_t> binds{0};
  if (binds.fetch_add(1, std::memory_order_relaxed) % 32 == 31) trim_heap();
  return program;
}

// 4. A new process: the program another size of this structure left on disk, bound.
std::optional<Runtime::Resolved> Runtime::sibling_on_disk(const SyncRequest& s) {
  if (!s.generic || !disk_) return std::nullopt;
  auto sibling = disk_->load_sibling(s.key);
  if (!sibling) return std::nullopt;
  binder_.remember(s.graph, s.key.target, sibling, config_.disabled_passes);
  return bound_to_sizes(s);
}

// 6. Loaded when stored on disk (a few ms); else queued on the compile worker,
// and this sync runs op by op.
Runtime::Resolved Runtime::start_in_background(const SyncRequest& s) {
  auto t0 = std::chrono::steady_clock::now();
  if (disk_)
    if (auto stored = disk_->load_stored(s.key)) {
      if (s.generic) binder_.remember(s.graph, s.key.target, stored, config_.disabled_passes);
      Resolved r;
      r.program = std::move(stored);
      r.note.how = SyncNote::How::Loaded;
      r.note.prepare_ms = ms_since(t0);
      return r;
    }
  Resolved r = op_by_op(SyncNote::How::Background, explain_miss(s, Miss::Background));
  r.explained = true;
  // The worker compiles a copy of the graph; it needs no interpreter lock, and
  // a Ctrl-C at the caller is not its to answer.
  bool started = background_->start(s.key, [this, g = s.graph, key = s.key, site = s.site, shapes = s.shapes,
                                            generic = s.generic] {
    lowering::NoPollScope no_poll;
    lowering::SerialCompileScope serial;  // the other cores are the program's
    struct CountFinished {  // compiled, loaded or failed: no longer pending
      ~CountFinished() { debug::Metrics::get().add(debug::Counter::BackgroundFinished); }
    } count_finished;
    if (debug::trace_enabled()) debug::name_trace_thread("background compile");
    auto compile_it = [&] {
      auto program = compile(ir::Graph(g), key.str(), shapes, /*check_stores=*/false);
      trim_heap();
      return program;
    };
    DiskTier::Source source;
    auto program = disk_ ? disk_->load_or_compile(key, site, compile_it, &source) : compile_it();
    if (generic) binder_.remember(g, key.target, program, config_.disabled_passes);
    return program;
  });
  // (Not started when a job of its structure finished meanwhile: the next sync takes it.)
  if (started) debug::Metrics::get().add(debug::Counter::BackgroundCompiles);
  return r;
}

// 7. The disk entry, else the remote one, else a compile (written to both).
// Lowering consumes a copy: the caller keeps its graph, whose nodes name a
// step that fails when the program runs.
Runtime::Resolved Runtime::stored_or_compiled(const SyncRequest& s) {
  Resolved r;
  auto compile_it = [&] {
    r.note.why = explain_miss(s, Miss::Compile);  // what differs from the nearest program compiled at this site
    r.explained = true;
    auto program = compile(ir::Graph(s.graph), s.key.str(), s.shapes, s.checked);
    trim_heap();
    return program;
  };
  auto t0 = std::chrono::steady_clock::now();
  DiskTier::Source source = DiskTier::Source::Compiled;
  r.program = disk_ ? disk_->load_or_compile(s.key, s.site, compile_it, &source) : compile_it();
  r.note.how = source == DiskTier::Source::Disk     ? SyncNote::How::Loaded
               : source == DiskTier::Source::Remote ? SyncNote::How::Remote
                                                    : SyncNote::How::Compiled;
  r.note.prepare_ms = ms_since(t0);
  if (source == DiskTier::Source::Compiled)
    say_slow_compile(s.site, s.graph.nodes().size(), r.note.prepare_ms, false, disk_ != nullptr);
  if (s.generic) binder_.remember(s.graph, s.key.target, r.program, config_.disabled_passes);
  return r;
}

}  // namespace lazyjit::runtime
