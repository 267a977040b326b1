// In-memory compile cache: thread-safe, LRU-bounded, and never compiles one key
// twice at once (a second caller waits for the first one's result).
//
// On a miss it says why: a structure never seen ("new graph"), or a known
// structure on new shapes ("new shapes for a known graph") — the seed of
// recompile explanations.
#pragma once
#include <functional>
#include <future>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "cache/cache_key.h"

namespace lazyjit::cache {

struct Hash128Hash {
  size_t operator()(const ir::Hash128& h) const { return h.lo ^ h.hi; }
};

// What the cache holds; the lowering layer derives its program from it.
struct CacheEntry {
  virtual ~CacheEntry() = default;
};

struct Lookup {
  std::shared_ptr<CacheEntry> entry;
  bool hit = false;
  std::string miss_reason;  // empty on a hit
};

class CompileCache {
 public:
  explicit CompileCache(size_t capacity = 1024) : capacity_(capacity) {}

  // Returns the entry for `key`, calling `compile` on a miss. If `compile`
  // throws, nothing is cached and the exception reaches every waiting caller.
  Lookup get_or_compile(const CacheKey& key,
                        const std::function<std::shared_ptr<CacheEntry>()>& compile);

  size_t size() const;
  void clear();
  void set_capacity(size_t n);

 private:
  struct Slot {
    std::shared_future<std::shared_ptr<CacheEntry>> result;
    uint64_t confirm;
    std::list<CacheKey>::iterator lru;
  };
  std::string explain_miss(const CacheKey& key) const;
  void evict_locked();

  mutable std::mutex mu_;
  size_t capacity_;
  std::unordered_map<CacheKey, Slot, CacheKeyHash> map_;
  std::list<CacheKey> lru_;  // front = most recent
  std::unordered_set<ir::Hash128, Hash128Hash> structures_seen_;
};

}  // namespace lazyjit::cache
