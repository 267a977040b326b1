#include "cache/redis_store.h"

#include <arpa/inet.h>
#include <hiredis/hiredis.h>
#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <thread>

#include "cache/entry_file.h"

namespace lazyjit::cache {

const char* remote_error_name(RemoteError e) {
  switch (e) {
    case RemoteError::None: return "none";
    case RemoteError::Connect: return "connect";
    case RemoteError::Timeout: return "timeout";
    case RemoteError::Server: return "server";
    case RemoteError::Protocol: return "protocol";
    case RemoteError::TooLarge: return "too_large";
  }
  return "?";
}

namespace {

bool parse_uint(const std::string& s, long max, long* out) {
  if (s.empty() || s.size() > 9) return false;
  long v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  if (v > max) return false;
  *out = v;
  return true;
}

// A socket write to a closed peer raises SIGPIPE, which kills a process that
// did not ignore it (Python ignores it, a C++ program does not). Blocked on
// this thread for the call; one raised meanwhile is taken off the queue.
class SigpipeBlock {
 public:
  SigpipeBlock() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    sigset_t pending;
    sigpending(&pending);
    was_pending_ = sigismember(&pending, SIGPIPE) == 1;
    pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
  }
  ~SigpipeBlock() {
    if (!was_pending_) {
      sigset_t pending;
      sigpending(&pending);
      if (sigismember(&pending, SIGPIPE) == 1) {
        timespec zero{0, 0};
        sigtimedwait(&pipe_, nullptr, &zero);
      }
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }

 private:
  sigset_t pipe_, old_;
  bool was_pending_ = false;
};

using Clock = std::chrono::steady_clock;

// What is left until `deadline`, rounded up to a microsecond (a zero timeval
// means "no timeout" to setsockopt); zero once it has passed.
timeval left_until(Clock::time_point deadline) {
  auto us = std::chrono::ceil<std::chrono::microseconds>(deadline - Clock::now()).count();
  timeval tv{0, 0};
  if (us <= 0) return tv;
  tv.tv_sec = static_cast<long>(us / 1000000);
  tv.tv_usec = static_cast<long>(us % 1000000);
  return tv;
}

bool passed(const timeval& tv) { return tv.tv_sec == 0 && tv.tv_usec == 0; }

// The socket's next blocking read (SO_RCVTIMEO) or write (SO_SNDTIMEO) gives
// up at `deadline`: set before each one, so a reply that keeps arriving a
// byte at a time cannot stretch the call. False once the deadline has passed.
bool arm(int fd, int option, Clock::time_point deadline) {
  timeval tv = left_until(deadline);
  if (passed(tv)) return false;
  return ::setsockopt(fd, SOL_SOCKET, option, &tv, sizeof tv) == 0;
}

// `*` `?` `[` `]` `\` are glob characters in SCAN's MATCH.
std::string glob_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '*' || c == '?' || c == '[' || c == ']' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

uint64_t le(std::string_view s, size_t at, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(s[at + i]);
  return v;
}

}  // namespace

bool RedisUrl::parse(const std::string& text, RedisUrl* out, std::string* error) {
  auto fail = [&](const std::string& why) {
    if (error) *error = why;
    return false;
  };
  const std::string scheme = "redis://";
  if (text.rfind(scheme, 0) != 0) return fail("not a redis:// URL");
  RedisUrl u;
  std::string rest = text.substr(scheme.size());
  size_t slash = rest.find('/');
  std::string authority = rest.substr(0, slash);
  if (slash != std::string::npos) {
    std::string db = rest.substr(slash + 1);
    long v = 0;
    if (!db.empty() && !parse_uint(db, 1 << 20, &v)) return fail("database '" + db + "' is not a number");
    u.db = static_cast<int>(v);
  }
  if (size_t at = authority.rfind('@'); at != std::string::npos) {
    std::string cred = authority.substr(0, at);
    authority = authority.substr(at + 1);
    size_t colon = cred.find(':');
    if (colon == std::string::npos) {
      u.password = cred;  // redis://password@host, as some clients accept
    } else {
      u.user = cred.substr(0, colon);
      u.password = cred.substr(colon + 1);
    }
  }
  std::string port;
  if (!authority.empty() && authority[0] == '[') {  // [::1]:6379
    size_t close = authority.find(']');
    if (close == std::string::npos) return fail("unclosed '[' in the host");
    u.host = authority.substr(1, close - 1);
    if (close + 1 < authority.size()) {
      if (authority[close + 1] != ':') return fail("junk after the host");
      port = authority.substr(close + 2);
    }
  } else if (size_t colon = authority.rfind(':'); colon != std::string::npos) {
    u.host = authority.substr(0, colon);
    port = authority.substr(colon + 1);
  } else {
    u.host = authority;
  }
  if (u.host.empty()) return fail("no host");
  if (!port.empty() || authority.back() == ':') {
    long v = 0;
    if (!parse_uint(port, 65535, &v) || v == 0) return fail("port '" + port + "' is not a port number");
    u.port = static_cast<int>(v);
  }
  *out = std::move(u);
  return true;
}

std::string RedisUrl::str() const {
  bool v6 = host.find(':') != std::string::npos;
  return "redis://" + (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port) + "/" + std::to_string(db);
}

RedisStore::RedisStore(RedisStoreOptions options) : options_(std::move(options)) {}

RedisStore::~RedisStore() {
  std::lock_guard<std::timed_mutex> lock(mu_);
  drop_locked();
}

void RedisStore::drop_locked() {
  if (!ctx_) return;
  // A forked child shares its parent's socket: closing our copy of the
  // descriptor is harmless, talking on it is not.
  SigpipeBlock no_sigpipe;
  redisFree(ctx_);
  ctx_ = nullptr;
}

namespace {

RemoteStatus status_of(redisContext* c, const std::string& what) {
  RemoteStatus s;
  int err = errno;
  std::string text = c ? c->errstr : "out of memory";
  bool timed_out = c && ((c->err == REDIS_ERR_IO &&
                          (err == EAGAIN || err == EWOULDBLOCK || err == ETIMEDOUT ||
                           text.find("temporarily unavailable") != std::string::npos ||
                           text.find("timed out") != std::string::npos))
#ifdef REDIS_ERR_TIMEOUT
                         || c->err == REDIS_ERR_TIMEOUT  // hiredis 1.x
#endif
                        );
  s.error = timed_out ? RemoteError::Timeout
            : c && c->err == REDIS_ERR_PROTOCOL ? RemoteError::Protocol
                                                : RemoteError::Connect;
  s.message = what + ": " + (timed_out ? "no answer in time (" + text + ")" : text);
  return s;
}

}  // namespace

namespace {

bool is_numeric_address(const std::string& host) {
  unsigned char buf[sizeof(in6_addr)];
  return inet_pton(AF_INET, host.c_str(), buf) == 1 || inet_pton(AF_INET6, host.c_str(), buf) == 1;
}

std::string getaddrinfo_address(const std::string& host, std::string* error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  int rc = getaddrinfo(host.c_str(), nullptr, &hints, &found);
  if (rc != 0) {
    *error = gai_strerror(rc);
    return {};
  }
  char text[INET6_ADDRSTRLEN] = {};
  const addrinfo* a = found;
  for (const addrinfo* p = found; p; p = p->ai_next)
    if (p->ai_family == AF_INET) {  // IPv4 first, as a server bound to 0.0.0.0 expects
      a = p;
      break;
    }
  const void* addr = a->ai_family == AF_INET ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(a->ai_addr)->sin_addr)
                                             : static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(a->ai_addr)->sin6_addr);
  inet_ntop(a->ai_family, addr, text, sizeof text);
  freeaddrinfo(found);
  if (!*text) *error = "no address";
  return text;
}

}  // namespace

struct RedisStore::Lookup {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::string address, error;
};

RemoteStatus RedisStore::resolve_locked(Deadline deadline, std::string* address) {
  const std::string& host = options_.url.host;
  if (is_numeric_address(host)) {
    *address = host;
    return {};
  }
  if (!lookup_) {
    auto lookup = std::make_shared<Lookup>();
    auto resolve = options_.resolve ? options_.resolve : getaddrinfo_address;
    // Detached: a lookup that hangs outlives this call (and this store) and
    // ends on its own; it holds only its shared state.
    std::thread([lookup, resolve, host] {
      std::string error;
      std::string found = resolve(host, &error);
      std::lock_guard<std::mutex> lock(lookup->mu);
      lookup->address = std::move(found);
      lookup->error = std::move(error);
      lookup->done = true;
      lookup->cv.notify_all();
    }).detach();
    lookup_ = std::move(lookup);
  }
  std::unique_lock<std::mutex> lock(lookup_->mu);
  if (!lookup_->cv.wait_until(lock, deadline, [&] { return lookup_->done; }))
    return {RemoteError::Timeout, "cannot connect to " + options_.url.str() +
                                      ": no answer in time (resolving the host name " + host +
                                      " took longer than the " + std::to_string(options_.timeout.count()) +
                                      " ms timeout)"};
  std::string found = lookup_->address, error = lookup_->error;
  lock.unlock();
  lookup_.reset();  // the next connect looks the name up again
  if (found.empty())
    return {RemoteError::Connect, "cannot connect to " + options_.url.str() + ": cannot resolve the host name " + host +
                                      " (" + error + ")"};
  *address = found;
  return {};
}

RemoteStatus RedisStore::timed_out(const std::string& what, const std::string& why) const {
  return {RemoteError::Timeout, what + " on " + options_.url.str() + ": no answer in time (" + why + ")"};
}

RemoteStatus RedisStore::lock_until(std::unique_lock<std::timed_mutex>* lock, Deadline deadline,
                                    const std::string& what) {
  *lock = std::unique_lock<std::timed_mutex>(mu_, std::defer_lock);
  if (lock->try_lock_until(deadline)) return {};
  return timed_out(what, "another call held the connection for the whole " + std::to_string(options_.timeout.count()) +
                             " ms timeout");
}

RemoteStatus RedisStore::connect_locked(Deadline deadline) {
  if (ctx_ && pid_ == static_cast<long>(::getpid())) return {};
  drop_locked();
  const std::string where = options_.url.str();
  std::string address;
  if (RemoteStatus s = resolve_locked(deadline, &address); !s.ok()) return s;
  timeval tv = left_until(deadline);
  if (passed(tv))
    return {RemoteError::Timeout, "cannot connect to " + where + ": no answer in time (the " +
                                      std::to_string(options_.timeout.count()) +
                                      " ms timeout passed before connecting)"};
  // hiredis waits for the TCP handshake at most `tv`; each read and write after
  // it is bounded by run_locked.
  redisContext* c = redisConnectWithTimeout(address.c_str(), options_.url.port, tv);
  if (!c || c->err) {
    RemoteStatus s = status_of(c, "cannot connect to " + where);
    s.error = RemoteError::Connect;
    if (c) redisFree(c);
    return s;
  }
  ctx_ = c;
  pid_ = static_cast<long>(::getpid());
  std::vector<std::vector<std::string>> setup;
  if (!options_.url.password.empty()) {
    if (options_.url.user.empty()) setup.push_back({"AUTH", options_.url.password});
    else setup.push_back({"AUTH", options_.url.user, options_.url.password});
  }
  if (options_.url.db != 0) setup.push_back({"SELECT", std::to_string(options_.url.db)});
  if (setup.empty()) return {};
  std::vector<Reply> replies;
  RemoteStatus s = run_locked(setup, &replies, deadline);
  if (!s.ok()) {
    drop_locked();
    if (s.error == RemoteError::Server) s.error = RemoteError::Connect;  // auth or SELECT refused
    s.message = "cannot use " + where + ": " + s.message;
  }
  return s;
}

RemoteStatus RedisStore::run_locked(const std::vector<std::vector<std::string>>& commands, std::vector<Reply>* replies,
                                    Deadline deadline, ReplyLimits limits) {
  replies->clear();
  SigpipeBlock no_sigpipe;
  if (!ctx_) return {RemoteError::Connect, "not connected"};
  const std::string& first = commands.at(0)[0];
  for (const auto& cmd : commands) {
    std::vector<const char*> argv;
    std::vector<size_t> lens;
    for (const std::string& a : cmd) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
    if (redisAppendCommandArgv(ctx_, static_cast<int>(argv.size()), argv.data(), lens.data()) != REDIS_OK) {
      RemoteStatus s = status_of(ctx_, cmd[0] + " on " + options_.url.str());
      drop_locked();
      return s;
    }
  }
  const std::string took_too_long =
      "the whole exchange took over the " + std::to_string(options_.timeout.count()) + " ms timeout";
  // Send: each write waits at most until the deadline, so a server that takes
  // the value in a little at a time cannot stretch the call. A failed write:
  // the connection is out of step, never used again.
  for (int done = 0; !done;) {
    if (!arm(ctx_->fd, SO_SNDTIMEO, deadline)) {
      drop_locked();
      return timed_out(first, took_too_long);
    }
    if (redisBufferWrite(ctx_, &done) != REDIS_OK) {
      RemoteStatus s = status_of(ctx_, first + " on " + options_.url.str());
      if (s.error == RemoteError::Timeout) s = timed_out(first, took_too_long);
      drop_locked();
      return s;
    }
  }
  // Read: the reader parses what has arrived, within `limits`; each read waits
  // at most until the deadline, so a reply that dribbles in cannot stretch the
  // call. Any failure drops the connection: it is out of step.
  ReplyReader reader(limits);
  char buf[1 << 16];
  RemoteStatus server_error;
  for (const auto& cmd : commands) {
    const std::string what = cmd[0] + " on " + options_.url.str();
    Reply reply;
    for (std::string why;;) {
      ReplyReader::Result result = reader.next(&reply, &why, deadline);
      if (result == ReplyReader::Result::Done) break;
      if (result == ReplyReader::Result::Bad) {
        drop_locked();
        return {RemoteError::Protocol, what + ": not a reply this client takes (" + why + ")"};
      }
      if (result == ReplyReader::Result::Late || !arm(ctx_->fd, SO_RCVTIMEO, deadline)) {
        drop_locked();
        return timed_out(cmd[0], took_too_long);
      }
      ssize_t n = ::recv(ctx_->fd, buf, sizeof buf, 0);
      if (n > 0) {
        reader.feed(buf, static_cast<size_t>(n));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      const int err = errno;
      drop_locked();
      if (n == 0) return {RemoteError::Connect, what + ": the server closed the connection"};
      if (err == EAGAIN || err == EWOULDBLOCK) return timed_out(cmd[0], took_too_long);
      return {RemoteError::Connect, what + ": " + std::strerror(err)};
    }
    // Read every reply first, so that the connection stays in step.
    if (reply.type == Reply::Type::Error && server_error.ok())
      server_error = {RemoteError::Server, what + ": " + reply_text(reply.str)};
    replies->push_back(std::move(reply));
  }
  // Bytes no command asked for: the server is out of step; the next call connects anew.
  if (reader.pending() > 0) drop_locked();
  return server_error;
}

std::optional<std::string> RedisStore::get(const std::string& key, uint64_t max_bytes, RemoteStatus* status) {
  const Deadline deadline = Clock::now() + options_.timeout;
  std::unique_lock<std::timed_mutex> lock;
  if (*status = lock_until(&lock, deadline, "GETRANGE"); !status->ok()) return std::nullopt;
  *status = connect_locked(deadline);
  if (!status->ok()) return std::nullopt;
  std::vector<Reply> r;
  // GETRANGE 0 max_bytes answers at most max_bytes + 1 bytes: a longer claim is a protocol error.
  ReplyLimits limits;
  limits.max_bulk = max_bytes + 1;
  *status = run_locked({{"GETRANGE", options_.prefix + key, "0", std::to_string(max_bytes)}}, &r, deadline, limits);
  if (!status->ok()) return std::nullopt;
  if (r[0].type != Reply::Type::Bulk) {
    *status = {RemoteError::Protocol, "GETRANGE on " + options_.url.str() + " gave no string"};
    return std::nullopt;
  }
  if (r[0].str.empty()) return std::nullopt;  // no such key (entries are never empty)
  if (r[0].str.size() > max_bytes) {
    *status = {RemoteError::TooLarge, key + " is over " + std::to_string(max_bytes) + " bytes"};
    return std::nullopt;
  }
  return std::move(r[0].str);
}

RemoteStatus RedisStore::put(const std::string& key, const std::string& bytes) {
  const Deadline deadline = Clock::now() + options_.timeout;
  std::unique_lock<std::timed_mutex> lock;
  if (RemoteStatus s = lock_until(&lock, deadline, "SET"); !s.ok()) return s;
  if (RemoteStatus s = connect_locked(deadline); !s.ok()) return s;
  std::vector<Reply> r;
  return run_locked({{"SET", options_.prefix + key, bytes}}, &r, deadline);
}

RemoteStatus RedisStore::remove(const std::string& key) {
  const Deadline deadline = Clock::now() + options_.timeout;
  std::unique_lock<std::timed_mutex> lock;
  if (RemoteStatus s = lock_until(&lock, deadline, "DEL"); !s.ok()) return s;
  if (RemoteStatus s = connect_locked(deadline); !s.ok()) return s;
  std::vector<Reply> r;
  return run_locked({{"DEL", options_.prefix + key}}, &r, deadline);
}

RemoteStatus RedisStore::keys(std::vector<std::string>* out) {
  out->clear();
  // The first page's deadline covers the wait for the connection and
  // connecting; each later page has a timeout of its own.
  Deadline deadline = Clock::now() + options_.timeout;
  std::unique_lock<std::timed_mutex> lock;
  RemoteStatus s = lock_until(&lock, deadline, "SCAN");
  if (!s.ok()) return s;
  if (s = connect_locked(deadline); !s.ok()) return s;
  const std::string match = glob_escape(options_.prefix) + "*";
  std::string cursor = "0";
  do {
    std::vector<Reply> r;
    s = run_locked({{"SCAN", cursor, "MATCH", match, "COUNT", "1000"}}, &r, deadline);
    if (!s.ok()) return s;
    deadline = Clock::now() + options_.timeout;
    if (r[0].type != Reply::Type::Array || r[0].elements.size() != 2 || r[0].elements[1].type != Reply::Type::Array)
      return {RemoteError::Protocol, "SCAN on " + options_.url.str() + " gave an unexpected answer"};
    cursor = r[0].elements[0].str;
    for (const Reply& k : r[0].elements[1].elements)
      if (k.str.rfind(options_.prefix, 0) == 0) out->push_back(k.str.substr(options_.prefix.size()));
  } while (cursor != "0" && !cursor.empty());
  // SCAN may return a key twice.
  std::sort(out->begin(), out->end());
  out->erase(std::unique(out->begin(), out->end()), out->end());
  return {};
}

RemoteStatus RedisStore::exists(const std::vector<std::string>& keys, std::vector<bool>* out) {
  out->assign(keys.size(), false);
  Deadline deadline = Clock::now() + options_.timeout;  // the first batch's, then each batch's
  std::unique_lock<std::timed_mutex> lock;
  RemoteStatus s = lock_until(&lock, deadline, "EXISTS");
  if (!s.ok()) return s;
  if (s = connect_locked(deadline); !s.ok()) return s;
  constexpr size_t kBatch = 1000;
  for (size_t at = 0; at < keys.size(); at += kBatch) {
    std::vector<std::vector<std::string>> cmds;
    for (size_t i = at; i < std::min(keys.size(), at + kBatch); ++i) cmds.push_back({"EXISTS", options_.prefix + keys[i]});
    std::vector<Reply> r;
    if (s = run_locked(cmds, &r, deadline); !s.ok()) return s;
    deadline = Clock::now() + options_.timeout;
    for (size_t i = 0; i < r.size(); ++i) (*out)[at + i] = r[i].type == Reply::Type::Integer && r[i].integer > 0;
  }
  return {};
}

RemoteStatus RedisStore::heads(const std::vector<std::string>& keys, uint64_t max_manifest, std::vector<Head>* out) {
  out->assign(keys.size(), Head{});
  Deadline deadline = Clock::now() + options_.timeout;  // the first round trip's, then each round trip's
  std::unique_lock<std::timed_mutex> lock;
  RemoteStatus s = lock_until(&lock, deadline, "STRLEN");
  if (!s.ok()) return s;
  if (s = connect_locked(deadline); !s.ok()) return s;
  const size_t header = entry_file::kHeaderBytes;
  constexpr size_t kBatch = 500;
  for (size_t at = 0; at < keys.size(); at += kBatch) {
    size_t end = std::min(keys.size(), at + kBatch);
    // Round 1: sizes and headers.
    std::vector<std::vector<std::string>> cmds;
    for (size_t i = at; i < end; ++i) {
      cmds.push_back({"STRLEN", options_.prefix + keys[i]});
      cmds.push_back({"GETRANGE", options_.prefix + keys[i], "0", std::to_string(header - 1)});
    }
    std::vector<Reply> r;
    if (s = run_locked(cmds, &r, deadline); !s.ok()) return s;
    deadline = Clock::now() + options_.timeout;
    // Round 2: each manifest, whose length the header gives.
    cmds.clear();
    std::vector<size_t> of;
    for (size_t i = at; i < end; ++i) {
      Head& h = (*out)[i];
      h.size = r[2 * (i - at)].type == Reply::Type::Integer && r[2 * (i - at)].integer > 0
                   ? static_cast<uint64_t>(r[2 * (i - at)].integer)
                   : 0;
      h.bytes = r[2 * (i - at) + 1].str;
      if (h.bytes.size() < header || std::memcmp(h.bytes.data(), entry_file::kMagic, 8) != 0) continue;
      uint64_t m = std::min<uint64_t>(le(h.bytes, 12, 4), max_manifest);
      if (m == 0) continue;
      cmds.push_back({"GETRANGE", options_.prefix + keys[i], std::to_string(header), std::to_string(header + m - 1)});
      of.push_back(i);
    }
    if (cmds.empty()) continue;
    ReplyLimits limits;
    limits.max_bulk = std::max<uint64_t>(limits.max_bulk, max_manifest);
    if (s = run_locked(cmds, &r, deadline, limits); !s.ok()) return s;
    deadline = Clock::now() + options_.timeout;
    for (size_t j = 0; j < of.size(); ++j) (*out)[of[j]].bytes += r[j].str;
  }
  return {};
}

}  // namespace lazyjit::cache
