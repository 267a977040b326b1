// An attribute's hash input, as the graph's own hashes take it (each
// alternative tagged by its index, so int 1 and bool true differ), for keys
// built outside Graph (lowering/kernel_key.h).
#pragma once
#include "graph_ir/graph.h"
#include "graph_ir/hash.h"

namespace lazyjit::ir {

void hash_attr(BufferHasher& h, const AttrValue& a);

}  // namespace lazyjit::ir
