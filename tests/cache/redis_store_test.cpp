// cache::RedisStore: URLs, and bytes by key on a real redis-server this test
// starts on a free loopback port (skipped, saying so, where redis-server is
// not installed; scripts/setup.sh installs it). A server that is down, never
// answers, or answers a byte at a time costs one bounded error (each call
// within its timeout), never a hang or a SIGPIPE.
#include "cache/redis_store.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <poll.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "cache/entry_file.h"
#include "tests/cache/disk_test_util.h"

namespace lazyjit::cache {
namespace {

using namespace std::chrono_literals;

using testing::TempDir;  // the server's --dir

// A loopback socket bound to a free port; listen() makes connects succeed
// (the kernel's backlog) with nobody ever answering.
struct Socket {
  int fd = -1;
  int port = 0;
  explicit Socket(bool listen_too) {
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    socklen_t len = sizeof a;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    port = ntohs(a.sin_port);
    if (listen_too) ::listen(fd, 16);
  }
  ~Socket() { close(); }
  void close() {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
};

int free_port() { return Socket(false).port; }

std::string redis_server() {
  for (const char* p : {"/usr/bin/redis-server", "/usr/local/bin/redis-server"})
    if (::access(p, X_OK) == 0) return p;
  return "";
}

// redis-server on 127.0.0.1:<free port>, no persistence, stopped at the end.
class Server {
 public:
  Server() : port_(free_port()) { start(); }
  // (Again after stop(): the same port, an empty server.)
  void start() {
    std::string exe = redis_server();
    up_ = false;
    if (exe.empty()) return;
    pid_ = ::fork();
    if (pid_ == 0) {
      int null = ::open("/dev/null", O_WRONLY);  // its start-up banner would bury the test's output
      ::dup2(null, 1);
      ::dup2(null, 2);
      std::string port = std::to_string(port_);
      ::execl(exe.c_str(), exe.c_str(), "--port", port.c_str(), "--bind", "127.0.0.1", "--save", "", "--appendonly",
              "no", "--dir", dir_.path().c_str(), "--loglevel", "warning", static_cast<char*>(nullptr));
      ::_exit(127);
    }
    RedisStore probe(options());
    for (int i = 0; i < 100; ++i) {  // up to 5 s
      std::vector<std::string> keys;
      if (probe.keys(&keys).ok()) {
        up_ = true;
        return;
      }
      std::this_thread::sleep_for(50ms);
    }
  }
  ~Server() { stop(); }
  void stop() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  bool up() const { return up_; }
  RedisStoreOptions options(const std::string& prefix = "lazyjit:test:") const {
    RedisStoreOptions o;
    o.url.host = "127.0.0.1";
    o.url.port = port_;
    o.timeout = 500ms;
    o.prefix = prefix;
    return o;
  }

 private:
  TempDir dir_;
  int port_;
  pid_t pid_ = -1;
  bool up_ = false;
};

#define NEED_SERVER(server)                                                                          \
  if (redis_server().empty()) GTEST_FAIL() << "redis-server is not installed: run scripts/setup.sh"; \
  ASSERT_TRUE(server.up()) << "redis-server did not start"

// A fake Redis server on a free loopback port, for servers that misbehave
// slowly. Each connection it accepts gets `reply` once the first bytes of a
// command arrive, then one byte of `dribble` every `every` (a reply that keeps
// coming and never ends), and is closed after `close_after` (so that a client
// that waits for the whole reply gives up one day; a test fails on the time it
// took). With `read_per_tick` it reads at most that many bytes every `every`
// and never answers (a server that takes a large value in slowly).
class FakeServer {
 public:
  struct Script {
    std::string reply;
    char dribble = 0;  // 0: nothing after `reply`
    std::chrono::milliseconds every{50};
    size_t read_per_tick = 0;  // 0: read everything that comes
    std::chrono::milliseconds close_after{5000};
  };
  explicit FakeServer(Script script) : script_(std::move(script)), socket_(/*listen_too=*/false) {
    if (script_.read_per_tick) {
      int small = 4096;  // inherited by accepted sockets: the sender blocks soon
      ::setsockopt(socket_.fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    }
    ::listen(socket_.fd, 16);
    acceptor_ = std::thread([this] { accept_loop(); });
  }
  ~FakeServer() {
    stop_ = true;
    acceptor_.join();
    for (std::thread& t : connections_) t.join();
  }
  int port() const { return socket_.port; }
  int accepted() const { return accepted_; }
  RedisStoreOptions options(std::chrono::milliseconds timeout) const {
    RedisStoreOptions o;
    o.url.host = "127.0.0.1";
    o.url.port = port();
    o.timeout = timeout;
    return o;
  }

 private:
  void accept_loop() {
    while (!stop_) {
      pollfd p{socket_.fd, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      int fd = ::accept4(socket_.fd, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      ++accepted_;
      connections_.emplace_back([this, fd] { serve(fd); });
    }
  }
  void serve(int fd) {
    using clock = std::chrono::steady_clock;
    const auto close_at = clock::now() + script_.close_after;
    char buf[65536];
    bool replied = false;
    auto next = clock::now();
    while (!stop_ && clock::now() < close_at) {
      if (script_.read_per_tick) {
        ssize_t n = ::recv(fd, buf, std::min(sizeof buf, script_.read_per_tick), MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) break;
        std::this_thread::sleep_for(script_.every);
        continue;
      }
      int wait = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(next - clock::now()).count());
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, replied && script_.dribble ? std::max(wait, 0) : 20) > 0) {
        ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) break;  // the client hung up
        if (n > 0 && !replied) {
          replied = true;
          if (!script_.reply.empty() && ::send(fd, script_.reply.data(), script_.reply.size(), MSG_NOSIGNAL) < 0) break;
          next = clock::now() + script_.every;
        }
      }
      if (replied && script_.dribble && clock::now() >= next) {
        if (::send(fd, &script_.dribble, 1, MSG_NOSIGNAL) < 0) break;
        next += script_.every;
      }
    }
    ::close(fd);
  }

  Script script_;
  Socket socket_;
  std::atomic<bool> stop_{false};
  std::atomic<int> accepted_{0};
  std::thread acceptor_;
  std::vector<std::thread> connections_;  // only the acceptor adds to it, joined before
};

// How long `op` took.
std::chrono::milliseconds timed(const std::function<void()>& op) {
  auto t0 = std::chrono::steady_clock::now();
  op();
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0);
}

TEST(RedisUrl, Parses) {
  RedisUrl u;
  std::string why;
  ASSERT_TRUE(RedisUrl::parse("redis://cache.local:6380/2", &u, &why)) << why;
  EXPECT_EQ(u.host, "cache.local");
  EXPECT_EQ(u.port, 6380);
  EXPECT_EQ(u.db, 2);
  ASSERT_TRUE(RedisUrl::parse("redis://127.0.0.1", &u, &why));
  EXPECT_EQ(u.port, 6379);
  EXPECT_EQ(u.db, 0);
  ASSERT_TRUE(RedisUrl::parse("redis://me:s3cret@h:1/0", &u, &why));
  EXPECT_EQ(u.user, "me");
  EXPECT_EQ(u.password, "s3cret");
  EXPECT_EQ(u.str(), "redis://h:1/0");  // never the password
  ASSERT_TRUE(RedisUrl::parse("redis://:pw@[::1]:7000/", &u, &why));
  EXPECT_EQ(u.host, "::1");
  EXPECT_EQ(u.port, 7000);
  EXPECT_EQ(u.password, "pw");
  EXPECT_EQ(u.str(), "redis://[::1]:7000/0");
  for (const char* bad : {"http://h:1/0", "redis://", "redis://h:0/0", "redis://h:70000/0", "redis://h:x/0",
                          "redis://h:1/db", "redis://h:/0", "redis://[::1/0"})
    EXPECT_FALSE(RedisUrl::parse(bad, &u, &why)) << bad;
}

TEST(RedisStore, NoServerIsAQuickConnectError) {
  RedisStoreOptions o;
  o.url.host = "127.0.0.1";
  o.url.port = free_port();  // nothing listens there
  o.timeout = 200ms;
  RedisStore store(o);
  auto t0 = std::chrono::steady_clock::now();
  RemoteStatus s;
  EXPECT_FALSE(store.get("k", 1 << 20, &s));
  EXPECT_EQ(s.error, RemoteError::Connect) << s.message;
  EXPECT_EQ(store.put("k", "v").error, RemoteError::Connect);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
}

TEST(RedisStore, AServerThatNeverAnswersTimesOut) {
  Socket mute(/*listen_too=*/true);
  RedisStoreOptions o;
  o.url.host = "127.0.0.1";
  o.url.port = mute.port;
  o.timeout = 150ms;
  RedisStore store(o);
  auto t0 = std::chrono::steady_clock::now();
  RemoteStatus s;
  EXPECT_FALSE(store.get("k", 1 << 20, &s));
  auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_EQ(s.error, RemoteError::Timeout) << s.message;
  EXPECT_GE(took, 100ms);
  EXPECT_LT(took, 2s);
}

// Issue 40: the timeout bounded each read, so a reply that kept coming a byte
// at a time held the caller for as long as the server kept sending. Now each
// call, connecting included, is over within its timeout, whatever arrives.
TEST(RedisStore, AReplyThatDribblesTimesOutWithinTheTimeout) {
  FakeServer server({.reply = "$1000000\r\n", .dribble = 'x'});
  RedisStore store(server.options(200ms));
  RemoteStatus s;
  auto took = timed([&] { EXPECT_FALSE(store.get("k", 1 << 20, &s)); });
  EXPECT_EQ(s.error, RemoteError::Timeout) << s.message;
  EXPECT_GE(took, 150ms);
  EXPECT_LT(took, 1500ms) << "get waited for the whole dribbled reply";
  EXPECT_NE(s.message.find("no answer in time"), std::string::npos) << s.message;
  took = timed([&] { s = store.put("k", "v"); });
  EXPECT_EQ(s.error, RemoteError::Timeout) << s.message;
  EXPECT_LT(took, 1500ms) << "put waited for the whole dribbled reply";
  took = timed([&] { s = store.remove("k"); });
  EXPECT_EQ(s.error, RemoteError::Timeout) << s.message;
  EXPECT_LT(took, 1500ms) << "remove waited for the whole dribbled reply";
  std::vector<std::string> keys;
  took = timed([&] { s = store.keys(&keys); });
  EXPECT_EQ(s.error, RemoteError::Timeout) << s.message;
  EXPECT_LT(took, 1500ms) << "keys waited for the whole dribbled reply";
  std::vector<bool> there;
  took = timed([&] { s = store.exists({"a", "b"}, &there); });
  EXPECT_EQ(s.error, RemoteError::Timeout) << s.message;
  EXPECT_LT(took, 1500ms) << "exists waited for the whole dribbled reply";
  std::vector<RedisStore::Head> heads;
  took = timed([&] { s = store.heads({"a", "b"}, 1 << 20, &heads); });
  EXPECT_EQ(s.error, RemoteError::Timeout) << s.message;
  EXPECT_LT(took, 1500ms) << "heads waited for the whole dribbled reply";
  // A connection that timed out mid-reply is dropped, never read on again:
  // every call above connected anew.
  EXPECT_EQ(server.accepted(), 6);
}

TEST(RedisStore, AStatusLineThatDribblesTimesOut) {
  // "+OKOKOK..." without its end: put waits for a line that never ends.
  FakeServer server({.reply = "+OK", .dribble = 'K'});
  RedisStore store(server.options(200ms));
  RemoteStatus s;
  auto took = timed([&] { s = store.put("k", "v"); });
  EXPECT_EQ(s.error, RemoteError::Timeout) << s.message;
  EXPECT_LT(took, 1500ms);
}

// Issue 48, defect 6: hiredis's reader took a header at its word. "*2147483647"
// allocated an array of 2^31 pointers and, at the timeout, walked it to free
// it: a 100 ms get took 15 s (12 s of CPU). Every header that claims more
// than the call can take is now a protocol error at once, the connection
// dropped, within the timeout.
TEST(RedisStore, HeadersThatClaimTooMuchAreProtocolErrorsWithinTheTimeout) {
  std::string deep;
  for (int i = 0; i < 1000; ++i) deep += "*1\r\n";
  for (const std::string& reply :
       {std::string("*2147483647\r\n"), std::string("*4294967297\r\n"), std::string("*2\r\n$1\r\n0\r\n*2000000\r\n"),
        std::string("$9223372036854775807\r\n"), std::string("$2000000\r\n"), std::string("*-2\r\n"),
        std::string("$-7\r\n"), std::string(":99999999999999999999\r\n"), deep, "+" + std::string(200000, 'K')}) {
    FakeServer server({.reply = reply});
    RedisStore store(server.options(100ms));
    const std::string shown = reply.substr(0, 24);
    RemoteStatus s;
    auto took = timed([&] { EXPECT_FALSE(store.get("k", 1 << 20, &s)); });
    EXPECT_EQ(s.error, RemoteError::Protocol) << shown << ": " << s.message;
    EXPECT_LT(took, 2s) << shown;
    std::vector<std::string> keys;  // the tool's first call
    took = timed([&] { s = store.keys(&keys); });
    EXPECT_EQ(s.error, RemoteError::Protocol) << shown << ": " << s.message;
    EXPECT_LT(took, 2s) << shown;
    EXPECT_EQ(server.accepted(), 2) << shown << ": the connection was dropped after the bad reply";
  }
}

TEST(RedisStore, ConnectingIsWithinTheSameTimeout) {
  // AUTH's reply dribbles: connecting is part of the call and of its bound.
  FakeServer server({.reply = "$1000000\r\n", .dribble = 'x'});
  RedisStoreOptions o = server.options(200ms);
  o.url.password = "pw";
  RedisStore store(o);
  RemoteStatus s;
  auto took = timed([&] { EXPECT_FALSE(store.get("k", 1 << 20, &s)); });
  EXPECT_EQ(s.error, RemoteError::Timeout) << s.message;
  EXPECT_LT(took, 1500ms);
}

TEST(RedisStore, AServerThatTakesAValueInSlowlyTimesOut) {
  // 4 KB every 20 ms (200 KB/s): an 8 MB value would take 40 s to send,
  // though each write makes progress well within the timeout.
  FakeServer server({.every = 20ms, .read_per_tick = 4096});
  RedisStore store(server.options(200ms));
  RemoteStatus s;
  auto took = timed([&] { s = store.put("k", std::string(8 << 20, 'v')); });
  EXPECT_EQ(s.error, RemoteError::Timeout) << s.message;
  EXPECT_GE(took, 150ms);
  EXPECT_LT(took, 1500ms) << "put waited for the slow reader";
}

TEST(RedisStore, AServerThatAcceptsAndNeverAnswersTimesOut) {
  FakeServer server({});  // reads every command, answers none
  RedisStore store(server.options(200ms));
  RemoteStatus s;
  auto took = timed([&] { EXPECT_FALSE(store.get("k", 1 << 20, &s)); });
  EXPECT_EQ(s.error, RemoteError::Timeout) << s.message;
  EXPECT_LT(took, 1500ms);
  took = timed([&] { s = store.put("k", std::string(1 << 20, 'v')); });
  EXPECT_EQ(s.error, RemoteError::Timeout) << s.message;
  EXPECT_LT(took, 1500ms);
  std::vector<std::string> keys;
  took = timed([&] { s = store.keys(&keys); });
  EXPECT_EQ(s.error, RemoteError::Timeout) << s.message;
  EXPECT_LT(took, 1500ms);
}

TEST(RedisStore, CallsFromSeveralThreadsEachKeepTheBound) {
  // Calls take turns on the one connection: the wait for another thread's call
  // counts against a call's own timeout, so none waits for two timeouts.
  FakeServer server({.reply = "$1000000\r\n", .dribble = 'x'});
  RedisStore store(server.options(300ms));
  std::vector<std::thread> threads;
  std::vector<std::chrono::milliseconds> took(4);
  std::vector<RemoteError> errors(4);
  for (int i = 0; i < 4; ++i)
    threads.emplace_back([&, i] {
      took[i] = timed([&] {
        RemoteStatus s;
        if (i % 2) s = store.put("k" + std::to_string(i), "v");
        else store.get("k" + std::to_string(i), 1 << 20, &s);
        errors[i] = s.error;
      });
    });
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(errors[i], RemoteError::Timeout) << i;
    EXPECT_LT(took[i], 1000ms) << "call " << i << " waited for the calls before it";
  }
}

TEST(RedisStore, AHostNameLookupThatHangsTimesOut) {
  RedisStoreOptions o;
  o.url.host = "cache.example";
  o.timeout = 150ms;
  auto calls = std::make_shared<std::atomic<int>>(0);
  o.resolve = [calls](const std::string&, std::string*) {
    ++*calls;
    std::this_thread::sleep_for(3s);  // a resolver with no answer
    return std::string("127.0.0.1");
  };
  RedisStore store(o);
  auto t0 = std::chrono::steady_clock::now();
  RemoteStatus s;
  EXPECT_FALSE(store.get("k", 1 << 20, &s));
  EXPECT_EQ(s.error, RemoteError::Timeout) << s.message;
  EXPECT_NE(s.message.find("resolving the host name cache.example"), std::string::npos) << s.message;
  // The next call waits for the same lookup: one lookup in flight, not two.
  EXPECT_EQ(store.put("k", "v").error, RemoteError::Timeout);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
  EXPECT_EQ(calls->load(), 1);
}

TEST(RedisStore, HostNamesResolveThroughTheResolver) {
  Server server;
  NEED_SERVER(server);
  RedisStoreOptions o = server.options();
  o.url.host = "cache.example";
  o.resolve = [](const std::string& host, std::string* error) {
    if (host == "cache.example") return std::string("127.0.0.1");
    *error = "unknown";
    return std::string();
  };
  RedisStore store(o);
  ASSERT_TRUE(store.put("a", "1").ok());
  RemoteStatus s;
  EXPECT_EQ(store.get("a", 1 << 20, &s).value_or(""), "1");
  o.url.host = "elsewhere.example";
  RedisStore other(o);
  EXPECT_EQ(other.put("a", "2").error, RemoteError::Connect);
  EXPECT_NE(other.put("a", "2").message.find("cannot resolve the host name elsewhere.example (unknown)"),
            std::string::npos);
  // localhost through getaddrinfo.
  o.url.host = "localhost";
  o.resolve = nullptr;
  RedisStore local(o);
  EXPECT_EQ(local.get("a", 1 << 20, &s).value_or(""), "1") << s.message;
}

TEST(RedisStore, BytesByKey) {
  Server server;
  NEED_SERVER(server);
  RedisStore store(server.options());
  std::string bytes("\0binary\xff\r\n", 10);
  bytes += std::string(100000, 'x');
  ASSERT_TRUE(store.put("a-1", bytes).ok());
  RemoteStatus s;
  auto got = store.get("a-1", 1 << 20, &s);
  ASSERT_TRUE(s.ok()) << s.message;
  ASSERT_TRUE(got);
  EXPECT_EQ(*got, bytes);
  // Missing: no value, no error.
  EXPECT_FALSE(store.get("nope", 1 << 20, &s));
  EXPECT_TRUE(s.ok());
  // Over the limit: refused without reading it all.
  EXPECT_FALSE(store.get("a-1", 1000, &s));
  EXPECT_EQ(s.error, RemoteError::TooLarge);
  // Replacing, then removing.
  ASSERT_TRUE(store.put("a-1", "new").ok());
  EXPECT_EQ(store.get("a-1", 1 << 20, &s).value_or(""), "new");
  ASSERT_TRUE(store.remove("a-1").ok());
  EXPECT_FALSE(store.get("a-1", 1 << 20, &s));
}

TEST(RedisStore, KeysExistsAndHeadsStayUnderThePrefix) {
  Server server;
  NEED_SERVER(server);
  RedisStore store(server.options("lazyjit:test:"));
  RedisStore other(server.options("other*[x]:"));  // glob characters in a prefix match themselves
  std::string manifest = entry_file::complete_manifest(R"({"kind":"program","site":"t.py:1"})", "k1", "payload");
  std::string entry = entry_file::encode(manifest, "payload", "secret");
  ASSERT_TRUE(store.put("k1", entry).ok());
  ASSERT_TRUE(store.put("k2", "not an entry").ok());
  ASSERT_TRUE(other.put("k3", entry).ok());
  std::vector<std::string> keys;
  ASSERT_TRUE(store.keys(&keys).ok());
  EXPECT_EQ(keys, (std::vector<std::string>{"k1", "k2"}));
  ASSERT_TRUE(other.keys(&keys).ok());
  EXPECT_EQ(keys, (std::vector<std::string>{"k3"}));
  std::vector<bool> there;
  ASSERT_TRUE(store.exists({"k1", "k3", "k2"}, &there).ok());
  EXPECT_EQ(there, (std::vector<bool>{true, false, true}));
  std::vector<RedisStore::Head> heads;
  ASSERT_TRUE(store.heads({"k1", "k2", "gone"}, 1 << 20, &heads).ok());
  EXPECT_EQ(heads[0].size, entry.size());
  EXPECT_EQ(heads[0].bytes, entry.substr(0, entry_file::kHeaderBytes + manifest.size()));
  EXPECT_EQ(heads[1].size, 12u);
  EXPECT_EQ(heads[1].bytes, "not an entry");
  EXPECT_EQ(heads[2].size, 0u);
  EXPECT_EQ(heads[2].bytes, "");
}

TEST(RedisStore, AServerKilledMidUseIsAnErrorThenReconnects) {
  Server server;
  NEED_SERVER(server);
  RedisStore store(server.options());
  ASSERT_TRUE(store.put("k", "v").ok());
  server.stop();
  // Writing a large value to the dead connection: an error, not SIGPIPE.
  RemoteStatus s = store.put("k", std::string(4 << 20, 'y'));
  EXPECT_FALSE(s.ok());
  EXPECT_FALSE(store.get("k", 100, &s));
  EXPECT_EQ(s.error, RemoteError::Connect) << s.message;
  // The server back on its port (empty: no persistence): the same store
  // connects again on its next call.
  server.start();
  ASSERT_TRUE(server.up()) << "redis-server did not restart";
  EXPECT_FALSE(store.get("k", 100, &s));
  EXPECT_TRUE(s.ok()) << s.message;
  ASSERT_TRUE(store.put("k", "again").ok());
  EXPECT_EQ(store.get("k", 100, &s).value_or(""), "again") << s.message;
}

TEST(RedisStore, DbAndBadPassword) {
  Server server;
  NEED_SERVER(server);
  RedisStoreOptions o = server.options();
  o.url.db = 3;
  RedisStore db3(o);
  RedisStore db0(server.options());
  ASSERT_TRUE(db3.put("k", "three").ok());
  RemoteStatus s;
  EXPECT_FALSE(db0.get("k", 100, &s));  // another database
  EXPECT_EQ(db3.get("k", 100, &s).value_or(""), "three");
  o.url.password = "wrong";
  RedisStore with_password(o);
  EXPECT_FALSE(with_password.get("k", 100, &s));
  EXPECT_EQ(s.error, RemoteError::Connect) << s.message;  // AUTH refused: no password is set
}

}  // namespace
}  // namespace lazyjit::cache
