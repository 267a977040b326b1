// Dim coalescing, the phase of plan_graph (plan.cpp) and bind_plan
// (plan_bind.cpp) after a kernel's loads are made: each kernel's iteration
// space reduced to the fewest dims its loads walk (plan_internal.h).
#include "lowering/plan_internal.h"

namespace lazyjit::lowering::plan_internal {

using ir::Graph;

void coalesce(const Graph& g, FusedKernel& k) {
  size_t rank = k.sizes.size(), split = k.row ? rank - static_cast<size_t>(k.reduce_rank) : rank;
  const CatLayout cat = cat_layout(g, k);
  k.cat_dim = -1;
  k.cat_ends.clear();
  bool after_cat = false;
  std::vector<int64_t> sizes;
  std::vector<std::vector<int64_t>> strides(k.loads.size());
  auto group = [&](size_t lo, size_t hi, bool rows) {
    size_t first = sizes.size();
    bool zero = false;
    for (size_t d = lo; d < hi; ++d) {
      zero |= k.sizes[d] == 0;
      if (k.sizes[d] == 1) continue;
      bool merge = sizes.size() > first && !after_cat && static_cast<int64_t>(d) != cat.dim;
      after_cat = static_cast<int64_t>(d) == cat.dim;
      if (after_cat) k.cat_dim = static_cast<int32_t>(sizes.size());  // the dim pushed next
      for (size_t i = 0; merge && i < k.loads.size(); ++i)
        merge = strides[i].back() == k.loads[i].strides[d] * k.sizes[d];
      if (merge) {
        sizes.back() *= k.sizes[d];
        for (size_t i = 0; i < k.loads.size(); ++i) strides[i].back() = k.loads[i].strides[d];
      } else {
        sizes.push_back(k.sizes[d]);
        for (size_t i = 0; i < k.loads.size(); ++i) strides[i].push_back(k.loads[i].strides[d]);
      }
    }
    if (zero || sizes.size() == first) {  // any zero: no iteration; all ones: one
      k.cat_dim = -1;  // (a Cat's dim has >= 2 elements: only a zero gets here)
      sizes.resize(first);
      sizes.push_back(zero ? 0 : 1);
      for (size_t i = 0; i < k.loads.size(); ++i) {
        strides[i].resize(first);
        // All ones over rows: each load keeps the stride of its innermost
        // non-broadcast dim (decode's one row is read like prefill's many,
        // so both share a generic key). Cols keep 0: row-space loads are
        // read outside the col loops.
        int64_t s = 0;
        for (size_t d = hi; rows && !zero && s == 0 && d-- > lo;) s = k.loads[i].strides[d];
        strides[i].push_back(s);
      }
    }
    return sizes.size() - first;
  };
  group(0, split, true);
  if (k.row) k.reduce_rank = static_cast<int32_t>(group(split, rank, false));
  if (k.cat_dim >= 0) k.cat_ends = cat.ends;
  k.sizes = std::move(sizes);
  for (size_t i = 0; i < k.loads.size(); ++i) k.loads[i].strides = std::move(strides[i]);
}

}  // namespace lazyjit::lowering::plan_internal
