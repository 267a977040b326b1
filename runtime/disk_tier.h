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
// With LAZYJIT_REMOTE_CACHE, a disk miss reads through the remote tier
// (runtime/remote_tier.h): a verified remote entry is written to disk as it is
// and loaded; what is compiled is written to disk and to the remote.
#pragma once
#include <functional>
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

  using Compile = std::function<std::shared_ptr<const lowering::Program>()>;
  enum class Source { Disk, Remote, Compiled };
  // The program stored under `key` on disk, else in the remote tier (then also
  // written to disk), linked and ready; else `compile()`'s, written under `key`
  // with `site` (the sync call site) in its manifest, to disk and remote.
  // Processes missing one key at once compile it once: the others wait for its
  // entry (a per-key lock) and load it. `*source` says which it was.
  std::shared_ptr<const lowering::Program> load_or_compile(const cache::CacheKey& key, const std::string& site,
                                                           const Compile& compile, Source* source);
  // The program stored under `key`, linked and ready; null when none loads
  // (no remote lookup, no compile: a background compile does those).
  std::shared_ptr<const lowering::Program> load_stored(const cache::CacheKey& key) { return load(key.str()); }
  // A program stored for other sizes of `key`'s structure (same code), the most
  // recently written first, for a new process to bind to (shape_binder.h);
  // null when none loads, or when `key` itself is stored.
  std::shared_ptr<const lowering::Program> load_sibling(const cache::CacheKey& key);

 private:
  DiskTier(std::unique_ptr<cache::DiskStore> store, std::string code_fingerprint, lowering::Target& target);
  bool expected(const std::string& manifest) const;
  std::shared_ptr<const lowering::Program> load(const std::string& name);  // an entry by its key's text
  std::shared_ptr<const lowering::Program> load_remote(const cache::CacheKey& key);
  void store(const cache::CacheKey& key, const lowering::Program& program, const std::string& site);

  std::unique_ptr<cache::DiskStore> store_;
  std::string code_fingerprint_;  // target fingerprint + lazyjit version + codegen switches
  lowering::Target& target_;
  std::unique_ptr<RemoteTier> remote_;  // null unless LAZYJIT_REMOTE_CACHE (and a secret) is set
};

}  // namespace lazyjit::runtime
