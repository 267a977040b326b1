#include "cache/compile_cache.h"

#include "debug/metrics.h"

namespace lazyjit::cache {

using debug::Counter;
using debug::Metrics;

void CacheStats::count_hit() { Metrics::get().add(Counter::CacheHits); }

std::string CacheStats::miss_reason(const CacheKey& key, bool collided) {
  std::string reason;
  if (collided) {
    Metrics::get().add(Counter::HashCollisions);
    reason = "hash collision refused";
  } else {
    reason = structures_seen_.count(key.structure) ? "new shapes for a known graph" : "new graph";
  }
  structures_seen_.insert(key.structure);
  return reason;
}

}  // namespace lazyjit::cache
