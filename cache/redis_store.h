// A byte store on a Redis server, for the compile cache's remote tier
// (runtime/remote_tier.h) and `lazyjit-cache remote`. Like DiskStore it knows
// nothing of programs: a value is an entry file's bytes (cache/entry_file.h),
// stored as is under "<prefix><key>" as a plain Redis string, so checksums and
// signatures travel with it. Checking them is the caller's business.
//
// Every call is bounded: resolving the host name, connecting and each reply
// wait at most `timeout`
// (SO_RCVTIMEO / SO_SNDTIMEO: per read or write, so a large value that keeps
// arriving is not cut off). A failed call returns its error and drops the
// connection; the next call connects again. Nothing throws on a server that is
// down, slow, full or speaks something else. SIGPIPE from a closed socket is
// kept from the process (blocked on the calling thread for the call).
//
// A RedisStore is one connection behind a mutex: its methods may be called from
// several threads, one at a time. A forked child never reuses its parent's
// connection (it connects anew).
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

struct redisContext;

namespace lazyjit::cache {

// redis://[[user]:password@]host[:port][/db]; port 6379, db 0 by default.
struct RedisUrl {
  std::string host;
  int port = 6379;
  int db = 0;
  std::string user, password;
  // False with *error set for anything else (another scheme, a bad port or db).
  static bool parse(const std::string& text, RedisUrl* out, std::string* error);
  std::string str() const;  // redis://host:port/db, without the password (for messages)
};

enum class RemoteError {
  None,
  Connect,   // no connection (refused, unreachable, name not found, auth or SELECT refused)
  Timeout,   // no answer within the timeout
  Server,    // the server answered with an error (OOM, READONLY, ...)
  Protocol,  // an answer of a type the command does not give
  TooLarge,  // the value is over the caller's byte limit (not read past it)
};
const char* remote_error_name(RemoteError e);  // "connect", "timeout", ...

struct RemoteStatus {
  RemoteError error = RemoteError::None;
  std::string message;
  bool ok() const { return error == RemoteError::None; }
};

struct RedisStoreOptions {
  RedisUrl url;
  std::chrono::milliseconds timeout{100};  // connect, and each read or write of a reply
  std::string prefix = "lazyjit:v1:";      // the Redis key of entry K is prefix + K
  // Turns a host name into a numeric address, or "" with *error set. Empty:
  // getaddrinfo. It runs on a thread of its own: a resolver that hangs costs a
  // connect `timeout` (a Timeout error), and a later connect waits for the same
  // lookup rather than starting another.
  std::function<std::string(const std::string& host, std::string* error)> resolve;
};

class RedisStore {
 public:
  explicit RedisStore(RedisStoreOptions options);
  ~RedisStore();
  RedisStore(const RedisStore&) = delete;
  RedisStore& operator=(const RedisStore&) = delete;

  // The value under `key`: nullopt with an ok status when there is none.
  // Reads at most max_bytes + 1 bytes (GETRANGE): a longer value is TooLarge.
  std::optional<std::string> get(const std::string& key, uint64_t max_bytes, RemoteStatus* status);
  // SET, replacing what was there.
  RemoteStatus put(const std::string& key, const std::string& bytes);
  RemoteStatus remove(const std::string& key);

  // For listing: every key under the prefix (SCAN, never KEYS), without it, sorted.
  RemoteStatus keys(std::vector<std::string>* out);
  // Which of `keys` exist (one pipelined round trip).
  RemoteStatus exists(const std::vector<std::string>& keys, std::vector<bool>* out);
  // Per key, its size and its first bytes up to the end of the entry's
  // manifest (at most 24 + max_manifest bytes): two pipelined round trips, no
  // payload read. A key gone meanwhile has size 0 and empty bytes.
  struct Head {
    uint64_t size = 0;
    std::string bytes;  // header + manifest, as far as they go
  };
  RemoteStatus heads(const std::vector<std::string>& keys, uint64_t max_manifest, std::vector<Head>* out);

  const RedisStoreOptions& options() const { return options_; }

 private:
  struct Reply;
  struct Lookup;
  RemoteStatus connect_locked();
  // The numeric address to connect to (the host itself when numeric).
  RemoteStatus resolve_locked(std::string* address);
  void drop_locked();
  // Sends every command (argv lists) in one write, then reads one reply each.
  RemoteStatus run_locked(const std::vector<std::vector<std::string>>& commands, std::vector<Reply>* replies);

  RedisStoreOptions options_;
  std::mutex mu_;
  redisContext* ctx_ = nullptr;
  long pid_ = 0;  // the process that connected ctx_
  std::shared_ptr<Lookup> lookup_;  // a host-name lookup not yet collected
};

}  // namespace lazyjit::cache
