#include "lowering/kernel_key.h"

#include <unordered_map>

#include "graph_ir/attr_hash.h"

namespace lazyjit::lowering {

namespace {

void put_loop(ir::BufferHasher& h, const ColLoop& l) {
  for (const auto* v : {&l.reload, &l.compute, &l.keep}) {
    h.update_i64(static_cast<int64_t>(v->size()));
    h.update(v->data(), v->size() * sizeof(int32_t));
  }
}

}  // namespace

KernelKey kernel_key(const ir::Graph& g, const FusedKernel& k) {
  ir::BufferHasher h;
  h.update_str("lazyjit kernel 1");
  const size_t rank = k.sizes.empty() ? 1 : k.sizes.size();
  h.update_i64(static_cast<int64_t>(rank));
  h.update_i64(k.row);
  h.update_i64(k.reduce_rank);
  // Kernel-local ids: load i is i, node position p is kNode + p.
  constexpr int64_t kNode = int64_t{1} << 32;
  std::unordered_map<ir::ValueId, int64_t> local;
  h.update_i64(static_cast<int64_t>(k.loads.size()));
  for (size_t i = 0; i < k.loads.size(); ++i) {
    const Access& a = k.loads[i];
    if (a.piece < 0) local.emplace(a.operand, static_cast<int64_t>(i));
    h.update_i64(a.piece);
    h.update_i64(static_cast<int64_t>(a.dtype));
    h.update_i64(a.scalar_index >= 0);  // which slot is read at run time (kernel_dims)
    if (a.scalar_index >= 0) continue;
    for (size_t d = 0; d < rank; ++d) {
      int64_t s = d < a.strides.size() ? a.strides[d] : 0;
      h.update_i64(runtime_stride(s) ? 2 : s);
    }
    h.update_i64(a.offset != 0);
  }
  h.update_i64(static_cast<int64_t>(k.nodes.size()));
  for (size_t p = 0; p < k.nodes.size(); ++p) {
    const ir::Node& n = g.nodes().at(k.nodes[p]);
    h.update_i64(static_cast<int64_t>(n.kind));
    h.update_i64(static_cast<int64_t>(n.attrs.size()));
    for (const ir::Attr& a : n.attrs) ir::hash_attr(h, a.value);
    h.update_i64(static_cast<int64_t>(n.operands.size()));
    for (size_t j = 0; j < n.operands.size(); ++j) {
      ir::ValueId v = n.operands[j];
      if (n.kind == ir::OpKind::Cat) {  // piece j's load
        h.update_i64(k.load_of(v, static_cast<int32_t>(j)));
        continue;
      }
      auto it = local.find(v);
      h.update_i64(it == local.end() ? -1 - static_cast<int64_t>(g.value(v).type.dtype) : it->second);
    }
    h.update_i64(static_cast<int64_t>(n.outputs.size()));
    for (ir::ValueId v : n.outputs) {
      h.update_i64(static_cast<int64_t>(g.value(v).type.dtype));
      local[v] = kNode + static_cast<int64_t>(p);
    }
    if (!k.row_space.empty()) h.update_i64(k.row_space.at(p));
  }
  h.update_i64(static_cast<int64_t>(k.stores.size()));
  for (ir::ValueId v : k.stores) {
    auto it = local.find(v);
    h.update_i64(it == local.end() ? -1 : it->second);
    h.update_i64(static_cast<int64_t>(g.value(v).type.dtype));
  }
  if (k.row) {
    const RowSchedule& s = k.schedule;
    h.update_i64(static_cast<int64_t>(s.scratch.size()));
    h.update(s.scratch.data(), s.scratch.size() * sizeof(int32_t));
    h.update_i64(static_cast<int64_t>(s.steps.size()));
    for (const RowStep& st : s.steps) {
      h.update_i64(static_cast<int64_t>(st.kind));
      h.update_i64(st.node);
      h.update_i64(st.cols.has_value());
      if (st.cols) put_loop(h, *st.cols);
      h.update_i64(st.blocks ? st.blocks->dim : -1);
      h.update_i64(st.blocks ? st.blocks->chunk : 0);
      h.update_i64(static_cast<int64_t>(st.stores.size()));
      h.update(st.stores.data(), st.stores.size() * sizeof(int32_t));
    }
  }
  // The pieces' ends are read from `dims` (kernel_dims): only their count is code.
  h.update_i64(k.cat_dim);
  h.update_i64(static_cast<int64_t>(k.cat_ends.size()));
  KernelKey key;
  key.generic = h.digest128();
  h.update_str("exact");
  h.update(k.sizes.data(), k.sizes.size() * sizeof(int64_t));
  for (const Access& a : k.loads) {
    if (a.scalar_index >= 0) continue;
    h.update(a.strides.data(), a.strides.size() * sizeof(int64_t));
    h.update_i64(a.offset);
  }
  h.update(k.cat_ends.data(), k.cat_ends.size() * sizeof(int64_t));
  key.exact = h.digest128();
  return key;
}

}  // namespace lazyjit::lowering
