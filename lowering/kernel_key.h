// What a compiled kernel can be reused for. Two keys per FusedKernel:
//  - `generic`: what the code computes, without its sizes: the nodes (ops,
//    attributes, dtypes, wiring), the rank, each load's dtype and stride
//    classes (0: broadcast, 1: unit, else read at run time) and whether its
//    offset is zero, and a row kernel's schedule. Code compiled shape-generic
//    (sizes, strides and offsets read from KernelFn's `dims`) serves every
//    kernel with the same generic key: another shape, another graph, another
//    of four identical layers.
//  - `exact`: the generic key plus every size, stride and offset: code compiled
//    for those constants serves only kernels with the same exact key.
// Kernel names, graph value ids and scalar slots (read from KernelFn's `dims`)
// are not part of either key.
#pragma once
#include "graph_ir/graph.h"
#include "lowering/plan.h"

namespace lazyjit::lowering {

struct KernelKey {
  ir::Hash128 generic;
  ir::Hash128 exact;
};

KernelKey kernel_key(const ir::Graph& g, const FusedKernel& k);

// Whether `k`'s shape-generic code reads this stride (or offset) at run time:
// values other than 0 and 1 (offsets: other than 0) are not compiled in.
inline bool runtime_stride(int64_t s) { return s != 0 && s != 1; }

}  // namespace lazyjit::lowering
