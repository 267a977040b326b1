#include "debug/metrics.h"

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
  return s;
}

void Metrics::reset() {
  std::lock_guard<std::mutex> g(mu_);
  for (auto& c : counters_) c.store(0, std::memory_order_relaxed);
  maps_ = MetricsSnapshot{};
}

std::string Metrics::report() const {
  MetricsSnapshot s = snapshot();
  std::ostringstream os;
  os << "lazyjit metrics\n";
  for (const auto& [k, v] : s.counters) os << "  " << k << ": " << v << "\n";
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
