#include "debug/metrics.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

namespace lazyjit::debug {

const char* counter_name(Counter c) {
  switch (c) {
    case Counter::OpsTraced: return "ops_traced";
    case Counter::GraphsExecuted: return "graphs_executed";
    case Counter::Compiles: return "compiles";
    case Counter::LlvmCompiles: return "llvm_compiles";
    case Counter::KernelHits: return "kernel_hits";
    case Counter::GenericCompiles: return "generic_compiles";
    case Counter::DynamicDims: return "dynamic_dims";
    case Counter::ShapeBinds: return "shape_binds";
    case Counter::OpByOpSyncs: return "op_by_op_syncs";
    case Counter::BackgroundSyncs: return "background_syncs";
    case Counter::BackgroundCompiles: return "background_compiles";
    case Counter::BackgroundFinished: return "background_finished";
    case Counter::BackgroundTaken: return "background_taken";
    case Counter::CacheHits: return "cache_hits";
    case Counter::CacheMisses: return "cache_misses";
    case Counter::Syncs: return "syncs";
    case Counter::HashCollisions: return "hash_collisions";
    case Counter::StepOps: return "step_ops";
    case Counter::OpsAtOnce: return "ops_at_once";
    case Counter::LayoutCopies: return "layout_copies";
    case Counter::ArgumentCopies: return "argument_copies";
    case Counter::DiskHits: return "disk_hits";
    case Counter::DiskMisses: return "disk_misses";
    case Counter::DiskWrites: return "disk_writes";
    case Counter::DiskErrors: return "disk_errors";
    case Counter::RemoteHits: return "remote_hits";
    case Counter::RemoteMisses: return "remote_misses";
    case Counter::RemoteErrors: return "remote_errors";
    case Counter::RemoteRefused: return "remote_refused";
    case Counter::RemoteWrites: return "remote_writes";
    case Counter::RemoteSkipped: return "remote_skipped";
    case Counter::GraphReplayable: return "graph_replayable_programs";
    case Counter::GraphNotReplayable: return "graph_not_replayable_programs";
    case Counter::CudaGraphsCaptured: return "cuda_graphs_captured";
    case Counter::CudaGraphReplays: return "cuda_graph_replays";
    case Counter::DeviceKernelLaunches: return "device_kernel_launches";
    case Counter::kCount: break;
  }
  return "?";
}

const char* sync_how_name(SyncHow h) {
  switch (h) {
    case SyncHow::CacheHit: return "cache_hit";
    case SyncHow::Compiled: return "compiled";
    case SyncHow::CompiledInBackground: return "compiled_in_background";
    case SyncHow::OpByOpWhileCompiling: return "op_by_op_while_compiling";
    case SyncHow::OpByOpPastLimit: return "op_by_op_past_recompile_limit";
    case SyncHow::LoadedFromDisk: return "loaded_from_disk";
    case SyncHow::LoadedFromRemote: return "loaded_from_remote";
    case SyncHow::BoundToNewSizes: return "bound_to_new_sizes";
    case SyncHow::kCount: break;
  }
  return "?";
}

namespace {
thread_local int t_last_sync_how = -1;

// The summary's words for each way a sync ran.
const char* sync_how_words(SyncHow h) {
  switch (h) {
    case SyncHow::CacheHit: return "program in memory";
    case SyncHow::Compiled: return "compiled, waited for";
    case SyncHow::CompiledInBackground: return "program compiled in the background";
    case SyncHow::OpByOpWhileCompiling: return "op by op while compiling";
    case SyncHow::OpByOpPastLimit: return "op by op past the recompile limit";
    case SyncHow::LoadedFromDisk: return "loaded from disk";
    case SyncHow::LoadedFromRemote: return "loaded from the remote cache";
    case SyncHow::BoundToNewSizes: return "bound to new sizes";
    case SyncHow::kCount: break;
  }
  return "?";
}

std::string ms_text(double ms) {
  char buf[40];
  if (ms >= 1000) std::snprintf(buf, sizeof buf, "%.2f s", ms / 1000);
  else std::snprintf(buf, sizeof buf, "%.1f ms", ms);
  return buf;
}
}  // namespace

void Metrics::sync_ran(SyncHow how) {
  by_how_[static_cast<int>(how)].fetch_add(1, std::memory_order_relaxed);
  t_last_sync_how = static_cast<int>(how);
}

const char* Metrics::last_sync_how() {
  return t_last_sync_how < 0 ? "" : sync_how_name(static_cast<SyncHow>(t_last_sync_how));
}

Metrics::Metrics() = default;

Metrics& Metrics::get() {
  static Metrics* m = new Metrics();  // never destroyed: used from static destructors
  return *m;
}

void Metrics::fallback(const std::string& op, const std::string& reason, const std::string& site) {
  std::lock_guard<std::mutex> g(mu_);
  ++maps_.fallbacks[op];
  ++maps_.fallback_sites[op + ": " + reason + (site.empty() ? "" : " @ " + site)];
}

void Metrics::sync(const std::string& reason, const std::string& site) {
  add(Counter::Syncs);
  std::lock_guard<std::mutex> g(mu_);
  ++maps_.syncs[site.empty() ? reason : reason + " @ " + site];
}

void Metrics::cache_miss(const std::string& why) {
  std::lock_guard<std::mutex> g(mu_);
  ++maps_.cache_misses[why];
}

void Metrics::disk_error(const std::string& kind) {
  add(Counter::DiskErrors);
  std::lock_guard<std::mutex> g(mu_);
  ++maps_.disk_errors[kind];
}

void Metrics::remote_error(const std::string& kind) {
  add(Counter::RemoteErrors);
  std::lock_guard<std::mutex> g(mu_);
  ++maps_.remote_errors[kind];
}

void Metrics::recompile(RecompileRecord r) {
  std::lock_guard<std::mutex> g(mu_);
  if (maps_.recompiles.size() >= kMaxRecompiles) maps_.recompiles.erase(maps_.recompiles.begin());
  maps_.recompiles.push_back(std::move(r));
}

void Metrics::graph_replay(const std::string& why) {
  add(why.empty() ? Counter::GraphReplayable : Counter::GraphNotReplayable);
  if (why.empty()) return;
  std::lock_guard<std::mutex> g(mu_);
  ++maps_.graph_replay_blocked[why];
}

void Metrics::graph_replay_refused(const std::string& why) {
  std::lock_guard<std::mutex> g(mu_);
  ++maps_.graph_replay_blocked[why];
}

void Metrics::time(const std::string& what, double ms) {
  std::lock_guard<std::mutex> g(mu_);
  Timing& t = maps_.timings[what];
  ++t.count;
  t.total_ms += ms;
  if (ms > t.max_ms) t.max_ms = ms;
}

MetricsSnapshot Metrics::snapshot() const {
  std::lock_guard<std::mutex> g(mu_);
  MetricsSnapshot s = maps_;
  for (int i = 0; i < static_cast<int>(Counter::kCount); ++i)
    s.counters[counter_name(static_cast<Counter>(i))] = counters_[i].load(std::memory_order_relaxed);
  for (int i = 0; i < static_cast<int>(SyncHow::kCount); ++i)
    s.syncs_by_how[sync_how_name(static_cast<SyncHow>(i))] = by_how_[i].load(std::memory_order_relaxed);
  return s;
}

void Metrics::reset() {
  std::lock_guard<std::mutex> g(mu_);
  for (auto& c : counters_) c.store(0, std::memory_order_relaxed);
  for (auto& c : by_how_) c.store(0, std::memory_order_relaxed);
  maps_ = MetricsSnapshot{};
}

std::string Metrics::report(bool all) const {
  MetricsSnapshot s = snapshot();
  std::ostringstream os;
  os << "lazyjit metrics\n";
  // The summary: how syncs ran, compiles and their time, fallbacks by op,
  // programs found by cache tier (at most 8 lines with the title).
  {
    std::string parts;
    for (int i = 0; i < static_cast<int>(SyncHow::kCount); ++i) {
      auto h = static_cast<SyncHow>(i);
      if (int64_t n = s.syncs_by_how[sync_how_name(h)])
        parts += (parts.empty() ? "" : ", ") + std::to_string(n) + " " + sync_how_words(h);
    }
    os << "syncs: " << s.counters["syncs"] << (parts.empty() ? "" : " (" + parts + ")") << "\n";
    auto codegen = s.timings.find("codegen");
    os << "compiles: " << s.counters["compiles"];
    if (codegen != s.timings.end() && s.counters["compiles"])
      os << " in " << ms_text(codegen->second.total_ms) << " of codegen (longest " << ms_text(codegen->second.max_ms)
         << ")";
    if (int64_t pending = s.counters["background_compiles"] - s.counters["background_finished"]; pending > 0)
      os << "; " << pending << " still compiling in the background";
    os << "\n";
    int64_t fallbacks = 0;
    std::vector<std::pair<int64_t, std::string>> ops;
    for (const auto& [op, n] : s.fallbacks) {
      fallbacks += n;
      ops.emplace_back(-n, op);
    }
    std::sort(ops.begin(), ops.end());
    os << "fallbacks (ops run on the CPU): " << fallbacks;
    for (size_t i = 0; i < ops.size() && i < 4; ++i) os << (i ? ", " : " (") << ops[i].second << " " << -ops[i].first;
    if (ops.size() > 4) os << ", " << ops.size() - 4 << " more ops";
    if (!ops.empty()) os << ")";
    os << "\n";
    os << "programs found: " << s.counters["cache_hits"] << " in memory, " << s.counters["disk_hits"]
       << " on disk";
    if (remote_cache_ || all || s.counters["remote_hits"]) os << ", " << s.counters["remote_hits"] << " remote";
    os << ", " << s.counters["background_taken"] << " from background compiles, " << s.counters["shape_binds"]
       << " bound to new sizes; " << s.counters["cache_misses"] << " cache misses\n";
  }
  // Counters of features this process does not use, while zero: the GPU's
  // under the cpu target, the remote tier's without LAZYJIT_REMOTE_CACHE.
  auto hidden = [&](const std::string& k, int64_t v) {
    if (all || v != 0) return false;
    if (!gpu_target_ && (k.rfind("cuda_graph", 0) == 0 || k == "device_kernel_launches")) return true;
    if (!remote_cache_ && k.rfind("remote_", 0) == 0) return true;
    return false;
  };
  os << "counters" << (all ? "" : " (those of features off left out: metrics_report(all=True) has every one)")
     << ":\n";
  for (const auto& [k, v] : s.counters)
    if (!hidden(k, v)) os << "  " << k << ": " << v << "\n";
  if (int64_t pending = s.counters["background_compiles"] - s.counters["background_finished"]; pending > 0)
    os << pending << " compile" << (pending == 1 ? " is" : "s are")
       << " still queued or running in the background: compiles and disk_writes may not count "
       << (pending == 1 ? "it" : "them") << " yet (lazyjit.wait_for_compiles() waits)\n";
  auto section = [&](const char* title, const std::map<std::string, int64_t>& m) {
    if (m.empty()) return;
    os << title << "\n";
    for (const auto& [k, v] : m) os << "  " << v << "x " << k << "\n";
  };
  section("fallbacks (op: reason @ call site, run by its eager CPU kernel):", s.fallback_sites);
  section("syncs (reason @ call site):", s.syncs);
  section("cache misses (why; each then compiled, loaded, or bound to new sizes):", s.cache_misses);
  section("on-disk cache faults (each one a miss, never run):", s.disk_errors);
  // The remote tier, when it was used: its counters above, its time here.
  bool remote = false;
  for (const char* k : {"remote_hits", "remote_misses", "remote_errors", "remote_writes", "remote_skipped"})
    remote |= s.counters[k] != 0;
  if (remote) {
    auto t = s.timings.find("remote");
    char buf[200];
    std::snprintf(buf, sizeof buf,
                  "remote cache: %lld hits, %lld misses, %lld writes, %lld errors (%lld entries refused), "
                  "%lld skipped while backing off; remote_ms %.3f\n",
                  (long long)s.counters["remote_hits"], (long long)s.counters["remote_misses"],
                  (long long)s.counters["remote_writes"], (long long)s.counters["remote_errors"],
                  (long long)s.counters["remote_refused"], (long long)s.counters["remote_skipped"],
                  t == s.timings.end() ? 0.0 : t->second.total_ms);
    os << buf;
  }
  section("remote cache faults (each one a miss; refused entries never run):", s.remote_errors);
  // Collectives on lazyjit tensors (tracer/collectives.cpp): each is a step of
  // the program that ran it, timed as "collective <op>".
  {
    int64_t n = 0;
    double ms = 0;
    std::string parts;
    double wait_ms = 0;
    for (const auto& [k, t] : s.timings) {
      if (k.rfind("collective ", 0) != 0) continue;
      if (k == "collective wait") {  // waiting for collectives in flight
        wait_ms = t.total_ms;
        continue;
      }
      n += t.count;
      ms += t.total_ms;
      parts += (parts.empty() ? "" : ", ") + k.substr(11) + " " + std::to_string(t.count);
    }
    if (n) {
      char buf[120];
      std::snprintf(buf, sizeof buf, "; %.3f ms starting them, %.3f ms waiting for them", ms, wait_ms);
      os << "collectives on lazyjit tensors (" << n << ", each a step of the program that ran it): " << parts << buf
         << "\n";
    }
  }
  // CUDA graphs: the verdicts hold under any target (under the CPU target, what
  // the cuda target would do); captures and replays happen under cuda only.
  if (int64_t yes = s.counters["graph_replayable_programs"], no = s.counters["graph_not_replayable_programs"];
      yes || no || !s.graph_replay_blocked.empty()) {
    os << "CUDA graph replay (cuda target): " << yes << " program" << (yes == 1 ? "" : "s") << " replayable, " << no
       << " not; " << s.counters["cuda_graphs_captured"] << " captured, " << s.counters["cuda_graph_replays"]
       << " replays\n";
    for (const auto& [k, v] : s.graph_replay_blocked) os << "  " << v << "x no — " << k << "\n";
  }
  if (!s.recompiles.empty()) {
    os << "recompiles by call site (what differed from the nearest earlier program there):\n";
    std::map<std::string, std::vector<const RecompileRecord*>> by_site;
    for (const RecompileRecord& r : s.recompiles) by_site[r.site.empty() ? "(unknown site)" : r.site].push_back(&r);
    for (const auto& [site, rs] : by_site) {
      os << "  " << site << ": " << rs.size() << " compile" << (rs.size() == 1 ? "" : "s") << "\n";
      for (const RecompileRecord* r : rs) os << "    " << r->kind << (r->detail.empty() ? "" : ": " + r->detail) << "\n";
    }
  }
  if (!s.timings.empty()) {
    os << "timings:\n";
    for (const auto& [k, t] : s.timings) {
      char buf[160];
      std::snprintf(buf, sizeof buf, "  %s: %lld calls, total %.3f ms, mean %.3f ms, max %.3f ms\n",
                    k.c_str(), (long long)t.count, t.total_ms, t.count ? t.total_ms / t.count : 0.0,
                    t.max_ms);
      os << buf;
    }
  }
  return os.str();
}

}  // namespace lazyjit::debug
