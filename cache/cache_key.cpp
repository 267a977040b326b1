#include "cache/cache_key.h"

#include <cstdio>

namespace lazyjit::cache {

CacheKey CacheKey::make(const ir::GraphHashes& h, uint64_t target_hash) {
  return CacheKey{h.structure, h.shape, target_hash, h.confirm};
}

std::string CacheKey::str() const {
  char buf[80];
  std::snprintf(buf, sizeof buf, "%s-%016llx-%08llx", structure.hex().c_str(),
                (unsigned long long)shape, (unsigned long long)(target & 0xffffffffull));
  return buf;
}

}  // namespace lazyjit::cache
