// Replies of a Redis server (RESP2: + - : $ *), parsed as their bytes arrive,
// for cache::RedisStore. A server's bytes are untrusted: a header may claim
// anything ("*2147483647", "$9223372036854775807", "*" inside "*" a million
// deep, a status line that never ends), so what it claims is bounded before
// anything is done with it. Nothing is allocated from a claimed count: an
// array grows by the values that have arrived, a bulk string is taken once
// all of its bytes are there. A claim over ReplyLimits is a protocol error at
// once, rather than a wait for bytes that, at the link's speed, could not
// come within the caller's timeout (or a memory the process does not have).
// The parse itself checks the caller's deadline as it goes.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace lazyjit::cache {

struct RedisReply {
  enum class Type { Status, Error, Integer, Bulk, Nil, Array };
  Type type = Type::Nil;
  std::string str;          // Status, Error, Bulk
  long long integer = 0;    // Integer
  std::vector<RedisReply> elements;  // Array
};

struct ReplyLimits {
  uint64_t max_bulk = 1 << 20;     // bytes in one bulk string
  uint64_t max_values = 1 << 20;   // array elements in one reply, nested ones included
  size_t max_depth = 8;            // arrays within arrays (the deepest the store reads, SCAN's, is 2)
  size_t max_line = 64 << 10;      // a status, error, integer or header line
};

// Bytes of a reply for a message (a server's error text is untrusted too):
// printable ASCII as is, any other byte as \xNN, cut at `max` bytes ("...").
std::string reply_text(std::string_view bytes, size_t max = 200);

class ReplyReader {
 public:
  explicit ReplyReader(ReplyLimits limits) : limits_(limits) {}
  void feed(const char* data, size_t n) { buf_.append(data, n); }

  enum class Result {
    Done,  // *out is the next whole reply
    More,  // not all of it has arrived: feed more
    Bad,   // not a reply within the limits: *error says why; the connection is out of step
    Late,  // the deadline passed while parsing
  };
  Result next(RedisReply* out, std::string* error, std::chrono::steady_clock::time_point deadline);

  // Bytes fed and not yet part of a reply returned.
  size_t pending() const { return buf_.size() - pos_; }

 private:
  struct Frame {
    RedisReply array;
    int64_t left;  // elements still to come
  };
  ReplyLimits limits_;
  std::string buf_;
  size_t pos_ = 0;             // where the next value starts in buf_
  std::vector<Frame> open_;    // arrays begun and not yet complete, outermost first
  uint64_t values_ = 0;        // array elements claimed so far by this reply's headers
};

}  // namespace lazyjit::cache
