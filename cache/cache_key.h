// The key of a compiled program: what it computes (structure), on which shapes
// (shape signature), for which machine and compiler (target fingerprint). A
// second, independent hash confirms a hit.
#pragma once
#include <cstdint>
#include <string>

#include "graph_ir/graph.h"

namespace lazyjit::cache {

struct CacheKey {
  ir::Hash128 structure;
  uint64_t shape = 0;
  uint64_t target = 0;   // hash of the target fingerprint text
  uint64_t confirm = 0;  // not part of identity: checked on a hit

  static CacheKey make(const ir::GraphHashes& h, uint64_t target_hash);
  bool operator==(const CacheKey& o) const {
    return structure == o.structure && shape == o.shape && target == o.target;
  }
  // Stable text form, also used as the dump file name.
  std::string str() const;
};

struct CacheKeyHash {
  size_t operator()(const CacheKey& k) const { return k.structure.lo ^ (k.shape * 0x9e3779b97f4a7c15ull) ^ k.target; }
};

}  // namespace lazyjit::cache
