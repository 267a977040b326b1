// The compile cache's remote tier: entry files on a Redis server shared by
// machines (LAZYJIT_REMOTE_CACHE=redis://host:port/db), behind the disk tier
// (runtime/disk_tier.h), which reads through it on a miss and writes back
// what it compiles. Values are the disk tier's entry files, byte for byte
// (cache/entry_file.h), so checksums and signatures travel with them.
//
// Trust: a shared server lets anyone who can write to it plant code, so the
// tier is on only with LAZYJIT_CACHE_SECRET, and an entry is handed back only
// when its HMAC is the secret's, its checksum is good, its signed manifest
// names the key it was read under (a value renamed on the server is refused:
// renaming needs no secret) and the caller's `expect` accepts its manifest
// (this target and version). Anything else is
// refused: counted (remote_refused, remote_errors), never run; the caller
// compiles and its write-back replaces the bad entry.
//
// Liveness: each lookup and each write-back finishes or fails within
// LAZYJIT_REMOTE_TIMEOUT_MS: one deadline for the whole call (waiting for
// another thread's call, resolving, connecting, AUTH/SELECT, sending and the
// whole reply), not one per read, so a server that dribbles its reply, stalls
// mid-reply or takes a value in slowly costs one timeout. That holds at exit
// too (write-backs of compiles finished at exit). A fault is counted and is a
// miss. After kFailuresBeforeBackoff
// connection faults in a row the tier is skipped (remote_skipped) for 1 s,
// doubling with each further fault up to 60 s; one success resets it.
#pragma once
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "cache/disk_error.h"
#include "cache/entry_file.h"
#include "cache/redis_store.h"
#include "runtime/config.h"

namespace lazyjit::runtime {

class RemoteTier {
 public:
  static constexpr int kFailuresBeforeBackoff = 2;

  // Null when LAZYJIT_REMOTE_CACHE is unset, or when no secret is set (one
  // line on stderr says so). Connects on first use, not here.
  static std::unique_ptr<RemoteTier> open(const Config& config);

  // The entry for `key`, verified for that key (cache::entry_file::verify), or
  // nullopt: missing (remote_misses), a fault (remote_errors), refused
  // (remote_refused: damaged, unsigned, wrongly signed, stored under another
  // key, foreign), or skipped while backing off.
  std::optional<cache::entry_file::VerifiedEntry> get(const std::string& key, const std::function<bool(const std::string& manifest)>& expect);
  // Writes an entry file (remote_writes); over the size limit it is not sent.
  void put(const std::string& key, const std::string& file);
  // An entry get() returned that the caller could not use after all.
  void refuse(const std::string& key, cache::DiskError kind, const std::string& message);

  const std::string& where() const { return where_; }

 private:
  RemoteTier(cache::RedisStoreOptions options, std::string secret, uint64_t max_entry_bytes);
  bool backing_off();                    // counts remote_skipped when it is
  void failed(const cache::RemoteStatus& status);
  void succeeded();
  void refuse_as(const std::string& key, const std::string& kind, const std::string& message);
  void say_once(const std::string& kind, const std::string& message);

  cache::RedisStore store_;
  std::string secret_;
  uint64_t max_entry_bytes_;
  std::string where_;  // the URL without its password

  std::mutex mu_;      // the back-off state and the one-line warnings
  int failures_ = 0;   // connection faults in a row
  std::chrono::steady_clock::time_point retry_at_{};
  std::string said_;   // kinds already reported, ",kind,"
};

}  // namespace lazyjit::runtime
