// Process-wide counters: what was traced, compiled, hit, cut and why. Cheap on
// the hot path (relaxed atomics); the maps behind a mutex are touched only on
// rare events (fallbacks, syncs, compiles).
#pragma once
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace lazyjit::debug {

enum class Counter : int {
  OpsTraced,       // ops recorded into a graph
  GraphsExecuted,  // programs run (compiled or cached)
  Compiles,        // programs compiled with LLVM (on a miss of every cache tier)
  LlvmCompiles,    // LLVM code generations (one per compiled program until kernels are cached alone)
  CacheHits,
  CacheMisses,
  Syncs,           // points where pending work was run
  HashCollisions,  // cache hits refused by the confirming hash
  StepOps,         // ops run one at a time in step mode
  LayoutCopies,    // library results copied to the layout the tracer promised
  DiskHits,        // programs loaded from the on-disk cache (linked, no codegen)
  DiskMisses,      // on-disk lookups that found no usable entry
  DiskWrites,      // programs written to the on-disk cache
  DiskErrors,      // on-disk faults (by kind in disk_errors)
  kCount
};

struct Timing {
  int64_t count = 0;
  double total_ms = 0, max_ms = 0;
};

// Why one program was compiled (runtime/recompile_explainer.h).
struct RecompileRecord {
  std::string site, kind, detail;
};

struct MetricsSnapshot {
  std::map<std::string, int64_t> counters;
  std::map<std::string, int64_t> fallbacks;     // op name -> runs by its eager CPU kernel
  std::map<std::string, int64_t> fallback_sites;  // "op: reason @ call site" -> count
  std::map<std::string, int64_t> syncs;         // "reason @ call site" -> count
  std::map<std::string, int64_t> cache_misses;  // why a program was compiled -> count
  std::map<std::string, int64_t> disk_errors;   // "kind: what" -> count (corrupt, foreign, ...)
  std::map<std::string, Timing> timings;        // "compile", "execute", "trace"...
  std::vector<RecompileRecord> recompiles;      // in order, the most recent kMaxRecompiles
};

class Metrics {
 public:
  static Metrics& get();
  void add(Counter c, int64_t n = 1) { counters_[static_cast<int>(c)].fetch_add(n, std::memory_order_relaxed); }
  int64_t value(Counter c) const { return counters_[static_cast<int>(c)].load(std::memory_order_relaxed); }
  // An op run by its eager CPU kernel: counted by name, and by reason and site.
  void fallback(const std::string& op, const std::string& reason, const std::string& site);
  void sync(const std::string& reason, const std::string& site);
  void cache_miss(const std::string& why);
  void disk_error(const std::string& kind);
  void recompile(RecompileRecord r);
  static constexpr size_t kMaxRecompiles = 1000;
  void time(const std::string& what, double ms);
  MetricsSnapshot snapshot() const;
  void reset();
  std::string report() const;

 private:
  std::atomic<int64_t> counters_[static_cast<int>(Counter::kCount)] = {};
  mutable std::mutex mu_;
  MetricsSnapshot maps_;
  Metrics();
};

const char* counter_name(Counter c);

}  // namespace lazyjit::debug
