// What a fused kernel's thunk reads and makes, whatever runs it (the CPU, a
// GPU, the simulated GPU): its buffer loads (not its scalar arguments) and its
// stores; a failure names its first node.
#pragma once
#include <vector>

#include "lowering/plan.h"

namespace lazyjit::executor {

inline std::vector<ir::ValueId> kernel_reads(const lowering::FusedKernel& k) {
  std::vector<ir::ValueId> r;
  for (const lowering::Access& a : k.loads)
    if (a.scalar_index < 0) r.push_back(a.value);
  return r;
}

inline uint32_t kernel_node(const lowering::FusedKernel& k) { return k.nodes.empty() ? 0 : k.nodes.front(); }

}  // namespace lazyjit::executor
