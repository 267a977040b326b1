// Streaming xxHash3 wrappers. The algorithms are fixed by the xxHash spec, so a
// digest is the same in every process and on every machine of one endianness.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace lazyjit::ir {

struct Hash128 {
  uint64_t lo = 0, hi = 0;
  bool operator==(const Hash128&) const = default;
  std::string hex() const;
};

class StreamHasher {
 public:
  enum class Algo { Xxh3_128, Xxh3_64, Xxh64 };
  explicit StreamHasher(Algo algo, uint64_t seed = 0);
  ~StreamHasher();
  StreamHasher(StreamHasher&&) noexcept;
  StreamHasher& operator=(StreamHasher&&) noexcept;
  // A copy continues from the same state (a copied graph keeps hashing as one).
  StreamHasher(const StreamHasher&);
  StreamHasher& operator=(const StreamHasher&);

  // Starts over, as a new hasher of the same algorithm seeded with `seed`.
  void reset(uint64_t seed);
  void update(const void* data, size_t len);
  void update_i64(int64_t v) { update(&v, sizeof v); }
  void update_str(std::string_view s) {
    update_i64(static_cast<int64_t>(s.size()));
    update(s.data(), s.size());
  }
  Hash128 digest128() const;  // Xxh3_128 only
  uint64_t digest64() const;  // Xxh3_64 / Xxh64

 private:
  Algo algo_;
  void* state_;
};

uint64_t hash64(const void* data, size_t len);
Hash128 hash128(const void* data, size_t len);

// Collects bytes, then hashes them in one call: cheaper than a streaming state
// for short keys built on a hot path (no allocation once warm).
class BufferHasher {
 public:
  void clear() { buf_.clear(); }
  void update(const void* data, size_t len) { buf_.append(static_cast<const char*>(data), len); }
  void update_i64(int64_t v) { update(&v, sizeof v); }
  void update_str(std::string_view s) {
    update_i64(static_cast<int64_t>(s.size()));
    update(s.data(), s.size());
  }
  Hash128 digest128() const { return hash128(buf_.data(), buf_.size()); }

 private:
  std::string buf_;
};

}  // namespace lazyjit::ir

// A Hash128 as a key of unordered containers: its halves are already xxHash3
// output, so mixing them is enough (the one hasher of Hash128 keys).
template <>
struct std::hash<lazyjit::ir::Hash128> {
  size_t operator()(const lazyjit::ir::Hash128& h) const noexcept { return h.lo ^ (h.hi * 0x9e3779b97f4a7c15ull); }
};
