// A byte store on a Redis server, for the compile cache's remote tier
// (runtime/remote_tier.h) and `lazyjit-cache remote`. Like DiskStore it knows
// nothing of programs: a value is an entry file's bytes (cache/entry_file.h),
// stored as is under "<prefix><key>" as a plain Redis string, so checksums and
// signatures travel with it. Checking them is the caller's business.
//
// Every call is bounded by `timeout`, a deadline for the whole operation, not
// for each read: get, put and remove return within `timeout` of being called
// (plus the scheduler's slack), whatever the server does (answers a byte at a
// time, announces a huge reply and stalls, takes a value in slowly, never
// closes). That time covers waiting for another thread's call on the
// connection, looking up the host name, connecting (AUTH and SELECT included)
// and sending the command and reading its whole reply. keys(), exists() and
// heads() are listings (for lazyjit-cache) made of round trips (a SCAN page, a
// batch of EXISTS or of heads): their first round trip, with all of the above,
// is bounded the same way, and so is each later one on its own. Past the
// deadline the call fails with RemoteError::Timeout ("no answer in time"). A
// value that takes longer than `timeout` to transfer fails too: the timeout
// must cover the largest entry at the link's speed. A failed call returns its
// error and drops the connection (never read again mid-reply); the next call
// connects again. Nothing throws on a server that is down, slow, full or
// speaks something else. Replies are parsed by cache/redis_reply.h, not by
// hiredis's reader: a header that claims more than a call can take (an array
// of 2^31 elements, a bulk string past the caller's byte limit, arrays nested
// deeper than any reply of these commands, a line without end) is a Protocol
// error at once, with nothing allocated for the claim. SIGPIPE from a closed socket is kept from the process
// (blocked on the calling thread for the call).
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

#include "cache/redis_reply.h"

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
  Protocol,  // an answer of a type the command does not give, or past ReplyLimits (cache/redis_reply.h)
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
  std::chrono::milliseconds timeout{100};  // each call: connect, send and whole reply (see above)
  std::string prefix = "lazyjit:v1:";      // the Redis key of entry K is prefix + K
  // Turns a host name into a numeric address, or "" with *error set. Empty:
  // getaddrinfo. It runs on a thread of its own: a resolver that hangs costs the
  // call what is left of its `timeout` (a Timeout error), and a later connect
  // waits for the same lookup rather than starting another.
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

  // For listing: every key under the prefix (SCAN, never KEYS), without it,
  // sorted. Each SCAN page is a round trip of its own (see above).
  RemoteStatus keys(std::vector<std::string>* out);
  // Which of `keys` exist (one pipelined round trip per 1000 keys).
  RemoteStatus exists(const std::vector<std::string>& keys, std::vector<bool>* out);
  // Per key, its size and its first bytes up to the end of the entry's
  // manifest (at most 24 + max_manifest bytes): two pipelined round trips per
  // 500 keys, no payload read. A key gone meanwhile has size 0 and empty bytes.
  struct Head {
    uint64_t size = 0;
    std::string bytes;  // header + manifest, as far as they go
  };
  RemoteStatus heads(const std::vector<std::string>& keys, uint64_t max_manifest, std::vector<Head>* out);

  const RedisStoreOptions& options() const { return options_; }

 private:
  using Reply = RedisReply;
  struct Lookup;
  using Deadline = std::chrono::steady_clock::time_point;
  // The call's turn on the connection, waited for until `deadline`.
  RemoteStatus lock_until(std::unique_lock<std::timed_mutex>* lock, Deadline deadline, const std::string& what);
  RemoteStatus connect_locked(Deadline deadline);
  // The numeric address to connect to (the host itself when numeric).
  RemoteStatus resolve_locked(Deadline deadline, std::string* address);
  void drop_locked();
  // Sends every command (argv lists) in one write, then reads one reply each,
  // all by `deadline` (past it: Timeout, and the connection is dropped). A
  // reply past `limits` (a bulk string over limits.max_bulk: the most the
  // commands can answer) is a Protocol error, and the connection is dropped.
  RemoteStatus run_locked(const std::vector<std::vector<std::string>>& commands, std::vector<Reply>* replies,
                          Deadline deadline, ReplyLimits limits = {});
  RemoteStatus timed_out(const std::string& what, const std::string& why) const;

  RedisStoreOptions options_;
  std::timed_mutex mu_;  // a call waits for its turn only until its deadline
  redisContext* ctx_ = nullptr;
  long pid_ = 0;  // the process that connected ctx_
  std::shared_ptr<Lookup> lookup_;  // a host-name lookup not yet collected
};

}  // namespace lazyjit::cache
