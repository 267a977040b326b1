// In-memory compile cache: thread-safe, LRU-bounded, and never compiles one key
// twice at once (a second caller waits for the first one's result).
//
// Generic over what it stores (the runtime stores executable programs); it
// knows neither libtorch nor LLVM. On a miss it says why: a structure never
// seen ("new graph"), or a known structure on new shapes ("new shapes for a
// known graph") — the seed of recompile explanations. It counts hits; whether
// a miss counts as one (cache_misses) is the caller's to say, since only it
// knows what resolved it (runtime/pipeline.cpp: taking a program a background
// compile finished is not a miss).
#pragma once
#include <functional>
#include <future>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>

#include "cache/cache_key.h"

namespace lazyjit::cache {

struct Hash128Hash {
  size_t operator()(const ir::Hash128& h) const { return h.lo ^ h.hi; }
};

template <class Entry>
struct Lookup {
  std::shared_ptr<const Entry> entry;
  bool hit = false;
  std::string miss_reason;  // empty on a hit
};

// The bookkeeping every CompileCache shares, whatever it stores: counters, miss
// reasons, which structures were seen. Not a type of its own for users.
class CacheStats {
 protected:
  void count_hit();
  // Returns why `key` missed (counts a hash collision); `collided`: same key, another graph.
  std::string miss_reason(const CacheKey& key, bool collided);
  std::unordered_set<ir::Hash128, Hash128Hash> structures_seen_;
};

template <class Entry>
class CompileCache : private CacheStats {
 public:
  using Ptr = std::shared_ptr<const Entry>;
  explicit CompileCache(size_t capacity = 1024) : capacity_(capacity) {}

  // Returns the entry for `key`, calling `compile` on a miss, with why it
  // missed when it takes a `const std::string&`. If `compile` throws, nothing
  // is cached and the exception reaches every waiting caller; if it returns
  // null (nothing built now: the caller runs without one), nothing is cached
  // and every waiting caller gets null.
  template <class Compile>
  Lookup<Entry> get_or_compile(const CacheKey& key, const Compile& compile) {
    std::promise<Ptr> promise;
    std::string reason;
    {
      std::unique_lock<std::mutex> lock(mu_);
      auto it = map_.find(key);
      if (it != map_.end() && it->second.confirm == key.confirm) {
        lru_.splice(lru_.begin(), lru_, it->second.lru);
        auto fut = it->second.result;
        lock.unlock();
        count_hit();
        return Lookup<Entry>{fut.get(), true, {}};
      }
      // Same 128+64-bit key, different confirming hash: two graphs collided.
      // Never serve the other program; compile this one and let it replace.
      bool collided = it != map_.end();
      if (collided) {
        lru_.erase(it->second.lru);
        map_.erase(it);
      }
      reason = miss_reason(key, collided);
      lru_.push_front(key);
      map_.emplace(key, Slot{promise.get_future().share(), key.confirm, lru_.begin()});
      evict_locked();
    }
    try {
      Ptr entry;
      if constexpr (std::is_invocable_v<const Compile&, const std::string&>) entry = compile(reason);
      else entry = compile();
      if (!entry) forget(key);
      promise.set_value(entry);
      return Lookup<Entry>{entry, false, reason};
    } catch (...) {
      promise.set_exception(std::current_exception());
      forget(key);
      throw;
    }
  }

  // Stores `entry` under `key` unless the key has one (or is being compiled):
  // a program built elsewhere (in the background) for a key no caller missed
  // now. Counts neither a hit nor a miss.
  void put(const CacheKey& key, Ptr entry) {
    std::lock_guard<std::mutex> lock(mu_);
    if (map_.count(key)) return;
    std::promise<Ptr> ready;
    ready.set_value(std::move(entry));
    lru_.push_front(key);
    map_.emplace(key, Slot{ready.get_future().share(), key.confirm, lru_.begin()});
    evict_locked();
  }

  size_t size() const {
    std::lock_guard<std::mutex> lock(mu_);
    return map_.size();
  }
  void clear() {
    std::lock_guard<std::mutex> lock(mu_);
    map_.clear();
    lru_.clear();
    structures_seen_.clear();
  }
  void set_capacity(size_t n) {
    std::lock_guard<std::mutex> lock(mu_);
    capacity_ = n;
    evict_locked();
  }

 private:
  struct Slot {
    std::shared_future<Ptr> result;
    uint64_t confirm;
    typename std::list<CacheKey>::iterator lru;
  };
  // Drops `key`'s slot (a compile that built nothing or threw).
  void forget(const CacheKey& key) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = map_.find(key);
    if (it == map_.end()) return;
    lru_.erase(it->second.lru);
    map_.erase(it);
  }
  void evict_locked() {
    while (map_.size() > capacity_ && !lru_.empty()) {
      map_.erase(lru_.back());
      lru_.pop_back();
    }
  }

  mutable std::mutex mu_;
  size_t capacity_;
  std::unordered_map<CacheKey, Slot, CacheKeyHash> map_;
  std::list<CacheKey> lru_;  // front = most recent
};

}  // namespace lazyjit::cache
