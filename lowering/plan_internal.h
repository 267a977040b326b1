// What the phase files of a plan share (plan.cpp, plan_coalesce.cpp,
// plan_bind.cpp): the layout of a kernel's Cat nodes, the shapes of a row
// kernel, a kernel's loads, and coalescing. Internal to lowering/plan*.cpp.
#pragma once
#include <cstdint>
#include <vector>

#include "graph_ir/graph.h"
#include "lowering/plan.h"

namespace lazyjit::lowering::plan_internal {

// How a kernel's Cat nodes join, in its uncoalesced iteration space: the dim
// (-1: no Cat) and where each piece ends along it.
struct CatLayout {
  int64_t dim = -1;
  std::vector<int64_t> ends;
  bool operator==(const CatLayout&) const = default;
};

CatLayout cat_layout(const ir::Graph& g, const FusedKernel& k);

// Number of trailing dims a reduction node reduces.
int32_t reduce_rank_of(const ir::Node& n);

// The row space of a row kernel's (uncoalesced) iteration space.
std::vector<int64_t> row_sizes(const FusedKernel& k);

// The load of value `v` by kernel `k` (uncoalesced): dense, through a folded
// view, or a scalar argument; a Cat operand's load (piece >= 0) is shifted back
// by its piece's start along the cat dim.
Access make_load(const ir::Graph& g, ValueId v, int32_t piece, const FusedKernel& k);

// Drops size-1 dims and merges neighbours that every access walks as one. Row
// kernels coalesce their row dims and their reduced dims separately, keeping
// at least one of each. A Cat's dim merges with neither neighbour.
void coalesce(const ir::Graph& g, FusedKernel& k);

}  // namespace lazyjit::lowering::plan_internal
