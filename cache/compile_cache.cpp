#include "cache/compile_cache.h"

#include "debug/metrics.h"

namespace lazyjit::cache {

using debug::Counter;
using debug::Metrics;

std::string CompileCache::explain_miss(const CacheKey& key) const {
  if (structures_seen_.count(key.structure)) return "new shapes for a known graph";
  return "new graph";
}

Lookup CompileCache::get_or_compile(
    const CacheKey& key, const std::function<std::shared_ptr<CacheEntry>()>& compile) {
  std::promise<std::shared_ptr<CacheEntry>> promise;
  std::string reason;
  {
    std::unique_lock<std::mutex> lock(mu_);
    auto it = map_.find(key);
    if (it != map_.end() && it->second.confirm == key.confirm) {
      lru_.splice(lru_.begin(), lru_, it->second.lru);
      auto fut = it->second.result;
      lock.unlock();
      Metrics::get().add(Counter::CacheHits);
      return Lookup{fut.get(), true, {}};
    }
    if (it != map_.end()) {
      // Same 128+64-bit key, different confirming hash: two graphs collided.
      // Never serve the other program; compile this one and let it replace.
      Metrics::get().add(Counter::HashCollisions);
      reason = "hash collision refused";
      lru_.erase(it->second.lru);
      map_.erase(it);
    } else {
      reason = explain_miss(key);
    }
    structures_seen_.insert(key.structure);
    lru_.push_front(key);
    map_.emplace(key, Slot{promise.get_future().share(), key.confirm, lru_.begin()});
    evict_locked();
  }
  Metrics::get().add(Counter::CacheMisses);
  Metrics::get().cache_miss(reason);
  try {
    auto entry = compile();
    promise.set_value(entry);
    return Lookup{entry, false, reason};
  } catch (...) {
    promise.set_exception(std::current_exception());
    std::lock_guard<std::mutex> lock(mu_);
    auto it = map_.find(key);
    if (it != map_.end()) {
      lru_.erase(it->second.lru);
      map_.erase(it);
    }
    throw;
  }
}

void CompileCache::evict_locked() {
  while (map_.size() > capacity_ && !lru_.empty()) {
    map_.erase(lru_.back());
    lru_.pop_back();
  }
}

size_t CompileCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return map_.size();
}

void CompileCache::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  map_.clear();
  lru_.clear();
  structures_seen_.clear();
}

void CompileCache::set_capacity(size_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  capacity_ = n;
  evict_locked();
}

}  // namespace lazyjit::cache
