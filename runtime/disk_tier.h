// The compile cache's disk tier, as the runtime sees it: compiled programs by
// cache key, each with a manifest that says everything its key stands for (for
// `lazyjit-cache` and for refusing foreign entries), on cache::DiskStore (which
// makes it safe: atomic publish, per-key locks, checksums, signatures,
// quarantine, eviction).
//
// A fault never fails a sync: a damaged, foreign or unsigned entry is a miss
// (counted in disk_errors by kind, moved aside, compiled again); a failed write
// is counted and the program still runs.
//
// With LAZYJIT_REMOTE_CACHE, the remote tier (runtime/remote_tier.h) sits
// behind it: a verified remote entry is written to disk as it is and loaded;
// what is stored goes to disk and to the remote. A store: it compiles nothing
// and calls nothing back; the order of load, lock, remote and compile is the
// sync tier's (runtime/sync_tiers.cpp).
#pragma once
#include <memory>
#include <string>

#include "cache/cache_key.h"
#include "cache/disk_store.h"
#include "lowering/program.h"
#include "runtime/config.h"
#include "runtime/remote_tier.h"

namespace lazyjit::runtime {

class DiskTier {
 public:
  // Null when the cache is off or its directory is refused (the warning is
  // printed once, on stderr).
  static std::unique_ptr<DiskTier> open(const Config& config, std::string code_fingerprint,
                                        lowering::Target& target);

  // The program stored under `key`, linked and ready; null when none loads.
  std::shared_ptr<const lowering::Program> load(const cache::CacheKey& key) { return load(key.str()); }
  // The key's inter-process lock (cache::DiskStore::lock), so that processes
  // missing one key at once compile it once: the others wait for its entry and
  // load it. A crashed holder's lock is released by the kernel; a stuck one is
  // waited out (unheld then: this process compiles anyway, correct, just not
  // deduplicated).
  cache::DiskStore::KeyLock lock(const cache::CacheKey& key);
  // Counts a key that neither load() nor its second try under lock() found.
  void count_miss();
  // The entry for `key` in the remote tier (LAZYJIT_REMOTE_CACHE), verified,
  // linked, and written to disk as it is; null when there is no remote tier
  // or it has none that loads.
  std::shared_ptr<const lowering::Program> load_remote(const cache::CacheKey& key);
  // Writes `program` under `key`, with `site` (the sync call site) in its
  // manifest, to disk and to the remote tier.
  void store(const cache::CacheKey& key, const lowering::Program& program, const std::string& site);
  // A program stored for other sizes of `key`'s structure (same code), the most
  // recently written first, for a new process to bind to (shape_binder.h);
  // null when none loads, or when `key` itself is stored.
  std::shared_ptr<const lowering::Program> load_sibling(const cache::CacheKey& key);

 private:
  DiskTier(std::unique_ptr<cache::DiskStore> store, std::string code_fingerprint, lowering::Target& target);
  bool expected(const std::string& manifest) const;
  std::shared_ptr<const lowering::Program> load(const std::string& name);  // an entry by its key's text

  std::unique_ptr<cache::DiskStore> store_;
  std::string code_fingerprint_;  // target fingerprint + lazyjit version + codegen switches
  lowering::Target& target_;
  std::unique_ptr<RemoteTier> remote_;  // null unless LAZYJIT_REMOTE_CACHE (and a secret) is set
};

}  // namespace lazyjit::runtime
