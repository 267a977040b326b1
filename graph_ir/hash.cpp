#include "graph_ir/hash.h"

#include <cstdio>
#include <stdexcept>

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace lazyjit::ir {

std::string Hash128::hex() const {
  char buf[33];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", (unsigned long long)hi, (unsigned long long)lo);
  return buf;
}

StreamHasher::StreamHasher(Algo algo, uint64_t seed) : algo_(algo) {
  state_ = algo_ == Algo::Xxh64 ? static_cast<void*>(XXH64_createState()) : static_cast<void*>(XXH3_createState());
  if (!state_) throw std::bad_alloc();
  reset(seed);
}

void StreamHasher::reset(uint64_t seed) {
  switch (algo_) {
    case Algo::Xxh3_128: XXH3_128bits_reset_withSeed((XXH3_state_t*)state_, seed); break;
    case Algo::Xxh3_64: XXH3_64bits_reset_withSeed((XXH3_state_t*)state_, seed); break;
    case Algo::Xxh64: XXH64_reset((XXH64_state_t*)state_, seed); break;
  }
}

StreamHasher::~StreamHasher() {
  if (!state_) return;
  if (algo_ == Algo::Xxh64) XXH64_freeState((XXH64_state_t*)state_);
  else XXH3_freeState((XXH3_state_t*)state_);
}

StreamHasher::StreamHasher(const StreamHasher& o) : algo_(o.algo_) {
  if (algo_ == Algo::Xxh64) {
    state_ = XXH64_createState();
    XXH64_copyState((XXH64_state_t*)state_, (const XXH64_state_t*)o.state_);
  } else {
    state_ = XXH3_createState();
    XXH3_copyState((XXH3_state_t*)state_, (const XXH3_state_t*)o.state_);
  }
}

StreamHasher& StreamHasher::operator=(const StreamHasher& o) {
  if (this != &o) *this = StreamHasher(o);
  return *this;
}

StreamHasher::StreamHasher(StreamHasher&& o) noexcept : algo_(o.algo_), state_(o.state_) { o.state_ = nullptr; }
StreamHasher& StreamHasher::operator=(StreamHasher&& o) noexcept {
  std::swap(algo_, o.algo_);
  std::swap(state_, o.state_);
  return *this;
}

void StreamHasher::update(const void* data, size_t len) {
  switch (algo_) {
    case Algo::Xxh3_128: XXH3_128bits_update((XXH3_state_t*)state_, data, len); break;
    case Algo::Xxh3_64: XXH3_64bits_update((XXH3_state_t*)state_, data, len); break;
    case Algo::Xxh64: XXH64_update((XXH64_state_t*)state_, data, len); break;
  }
}

Hash128 StreamHasher::digest128() const {
  if (algo_ != Algo::Xxh3_128) throw std::logic_error("digest128 on a 64-bit hasher");
  XXH128_hash_t h = XXH3_128bits_digest((XXH3_state_t*)state_);
  return {h.low64, h.high64};
}

uint64_t StreamHasher::digest64() const {
  switch (algo_) {
    case Algo::Xxh3_64: return XXH3_64bits_digest((XXH3_state_t*)state_);
    case Algo::Xxh64: return XXH64_digest((XXH64_state_t*)state_);
    default: throw std::logic_error("digest64 on a 128-bit hasher");
  }
}

uint64_t hash64(const void* data, size_t len) { return XXH3_64bits(data, len); }

Hash128 hash128(const void* data, size_t len) {
  XXH128_hash_t h = XXH3_128bits(data, len);
  return {h.low64, h.high64};
}

}  // namespace lazyjit::ir
