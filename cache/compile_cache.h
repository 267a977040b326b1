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
#include <utility>

#include "cache/cache_key.h"

namespace lazyjit::cache {

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
  std::unordered_set<ir::Hash128> structures_seen_;
};

template <class Entry>
class CompileCache : private CacheStats {
 public:
  using Ptr = std::shared_ptr<const Entry>;
  explicit CompileCache(size_t capacity = 1024) : capacity_(capacity) {}

  // A miss this caller must settle: every other caller asking for the key
  // meanwhile waits for it (a key is never compiled twice at once). Settled
  // with the entry (null: nothing built now, nothing cached, and every waiting
  // caller gets null) or with an exception (nothing cached; it reaches every
  // waiting caller). One dropped unsettled settles null.
  class Claim {
   public:
    Claim() = default;
    Claim(Claim&& o) noexcept
        : cache_(std::exchange(o.cache_, nullptr)), key_(o.key_), promise_(std::move(o.promise_)) {}
    Claim& operator=(Claim&&) = delete;
    ~Claim() {
      if (cache_) settle(nullptr);
    }
    // True until settled; false for a hit (nothing to settle).
    bool open() const { return cache_ != nullptr; }
    void settle(Ptr entry) {
      if (!entry) cache_->forget(key_);
      promise_.set_value(entry);
      cache_ = nullptr;
    }
    void fail(std::exception_ptr error) {
      promise_.set_exception(error);
      cache_->forget(key_);
      cache_ = nullptr;
    }

   private:
    friend class CompileCache;
    Claim(CompileCache* cache, const CacheKey& key, std::promise<Ptr> promise)
        : cache_(cache), key_(key), promise_(std::move(promise)) {}
    CompileCache* cache_ = nullptr;
    CacheKey key_;
    std::promise<Ptr> promise_;
  };
  struct Found {
    Lookup<Entry> lookup;  // a hit (entry set, perhaps null: another caller settled null), or a miss and why
    Claim claim;           // open on a miss
  };

  // The entry for `key` (waiting for another caller's claim on it), or a miss
  // with why it missed and the claim to settle. Calls nothing back: the caller
  // builds the entry and settles the claim.
  Found find_or_claim(const CacheKey& key) {
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
        return Found{Lookup<Entry>{fut.get(), true, {}}, Claim()};
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
    return Found{Lookup<Entry>{nullptr, false, reason}, Claim(this, key, std::move(promise))};
  }

  // find_or_claim with the claim settled by `compile`'s result, called on a
  // miss (with why it missed when it takes a `const std::string&`).
  template <class Compile>
  Lookup<Entry> get_or_compile(const CacheKey& key, const Compile& compile) {
    Found found = find_or_claim(key);
    if (found.lookup.hit) return found.lookup;
    try {
      Ptr entry;
      if constexpr (std::is_invocable_v<const Compile&, const std::string&>) entry = compile(found.lookup.miss_reason);
      else entry = compile();
      found.claim.settle(entry);
      found.lookup.entry = entry;
      return found.lookup;
    } catch (...) {
      found.claim.fail(std::current_exception());
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
