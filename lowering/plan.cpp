// Plan = greedy fusion of the live elementwise nodes into loop nests, then dim
// coalescing of each nest (plan_coalesce.cpp), then the row schedule of each
// row kernel (row_schedule.h), then the buffer plan (plan_buffers.cpp). This
// file holds plan_graph and its fusion phase: which kernel each node joins, and
// the loads and stores of each kernel.
#include "lowering/plan.h"

#include <algorithm>
#include <stdexcept>

#include "lowering/plan_internal.h"

namespace lazyjit::lowering {

using ir::Graph;
using ir::Node;
using ir::OpKind;
using plan_internal::CatLayout;
using plan_internal::cat_layout;
using plan_internal::make_load;
using plan_internal::reduce_rank_of;
using plan_internal::row_sizes;

int32_t FusedKernel::load_of(ValueId operand, int32_t piece) const {
  for (size_t i = 0; i < loads.size(); ++i)
    if (loads[i].operand == operand && loads[i].piece == piece) return static_cast<int32_t>(i);
  return -1;
}

std::vector<int64_t> kernel_dims(const FusedKernel& k) {
  std::vector<int64_t> d(k.sizes);
  if (d.empty()) d.push_back(1);  // a 0-d kernel runs its one element as dim 0
  const size_t rank = d.size();
  for (const Access& a : k.loads) {
    if (a.scalar_index >= 0) {
      d.push_back(a.scalar_index);
      continue;
    }
    for (size_t i = 0; i < rank; ++i) d.push_back(i < a.strides.size() ? a.strides[i] : 0);
    d.push_back(a.offset);
  }
  if (k.cat_dim >= 0) d.insert(d.end(), k.cat_ends.begin(), k.cat_ends.end());
  return d;
}

bool lowerable_dtype(DType t) {
  return ir::is_floating(t) || ir::is_integral(t, /*include_bool=*/true);
}

namespace {

bool node_lowerable(const Graph& g, const Node& n) {
  if (ir::is_reduction(n.kind)) {
    if (n.attrs.size() < 2 || !std::holds_alternative<std::vector<int64_t>>(n.attrs[1].value) ||
        !std::holds_alternative<int64_t>(n.attrs[0].value))
      return false;
    if (std::get<std::vector<int64_t>>(n.attrs[1].value).size() >
        g.value(n.operands[0]).type.sizes.size())
      return false;
  } else if (!ir::is_elementwise(n.kind)) {
    return false;
  }
  if (!lowerable_dtype(static_cast<DType>(std::get<int64_t>(n.attrs[0].value)))) return false;
  for (ValueId v : n.operands)
    if (!lowerable_dtype(g.value(v).type.dtype)) return false;
  return lowerable_dtype(g.value(n.outputs[0]).type.dtype);
}

// Strides that read value `v` (dense, its declared layout) broadcast to `sizes`.
std::vector<int64_t> broadcast_strides(const ir::TensorType& t, const std::vector<int64_t>& sizes) {
  std::vector<int64_t> st(sizes.size(), 0);
  size_t off = sizes.size() - t.sizes.size();
  for (size_t d = 0; d < t.sizes.size(); ++d)
    // A broadcast dim reads one element. A size-1 dim that is not broadcast
    // keeps its stride: never walked, but it tells coalescing (and so the
    // kernel's generic key) how the dim is read when it is longer.
    st[off + d] = t.sizes[d] == 1 && sizes[off + d] != 1 ? 0 : t.strides[d];
  return st;
}

CatLayout cat_layout_of(const Graph& g, const Node& n) {
  CatLayout c;
  c.dim = std::get<int64_t>(n.attrs.at(1).value);
  int64_t end = 0;
  for (ValueId v : n.operands) c.ends.push_back(end += g.value(v).type.sizes.at(c.dim));
  return c;
}

// A view kernels read through their loads, from its source's buffer: an
// AsStrided of a value that is not itself one.
bool is_folded_view(const Graph& g, ValueId v) {
  const Node& p = g.producer(v);
  return p.kind == OpKind::AsStrided && g.producer(p.operands[0]).kind != OpKind::AsStrided;
}

// How a kernel of iteration space `sizes` reads `v` (make_load without Cats).
Access make_access(const Graph& g, ValueId v, const std::vector<int64_t>& sizes) {
  const ir::TensorType& t = g.value(v).type;
  const Node& p = g.producer(v);
  Access a{v, v, t.dtype, {}, 0, -1};
  if (p.kind == OpKind::Scalar) {
    a.scalar_index = static_cast<int32_t>(std::get<int64_t>(p.attrs[0].value));
    a.strides.assign(sizes.size(), 0);
  } else if (is_folded_view(g, v)) {
    ir::TensorType view{t.dtype, std::get<std::vector<int64_t>>(p.attrs[0].value),
                        std::get<std::vector<int64_t>>(p.attrs[1].value)};
    a.value = p.operands[0];
    a.offset = std::get<int64_t>(p.attrs[2].value);
    a.strides = broadcast_strides(view, sizes);
  } else {
    a.strides = broadcast_strides(t, sizes);
  }
  return a;
}

}  // namespace

namespace plan_internal {

CatLayout cat_layout(const Graph& g, const FusedKernel& k) {
  for (uint32_t ni : k.nodes)
    if (g.nodes()[ni].kind == OpKind::Cat) return cat_layout_of(g, g.nodes()[ni]);
  return {};
}

int32_t reduce_rank_of(const Node& n) {
  return static_cast<int32_t>(std::get<std::vector<int64_t>>(n.attrs[1].value).size());
}

std::vector<int64_t> row_sizes(const FusedKernel& k) {
  std::vector<int64_t> r = k.sizes;
  for (size_t d = r.size() - k.reduce_rank; d < r.size(); ++d) r[d] = 1;
  return r;
}

Access make_load(const Graph& g, ValueId v, int32_t piece, const FusedKernel& k) {
  Access a = make_access(g, v, k.sizes);
  if (piece < 0) return a;
  CatLayout c = cat_layout(g, k);
  a.piece = piece;
  if (piece > 0) a.offset -= c.ends.at(piece - 1) * a.strides.at(c.dim);
  return a;
}

}  // namespace plan_internal

namespace {

struct Builder {
  const Graph& g;
  const PlanOptions& opts;
  Plan plan;
  std::vector<int32_t> step_of_value;  // step producing each value, -1 for sources
  std::vector<int32_t> kernel_of_node;

  Builder(const Graph& graph, const PlanOptions& o)
      : g(graph), opts(o), step_of_value(graph.values().size(), -1),
        kernel_of_node(graph.nodes().size(), -1) {}

  // At least the bytes of parameters (device_kernel.h) kernel `ki` needs with
  // node `n` in it: per operand made outside it a pointer, its strides and
  // offset (rank + 1 dims); per node a pointer (each result may be a store);
  // the NaN/Inf flag, `total`, the sizes and a cat's ends.
  int64_t param_bytes_bound(int32_t ki, const Node& n) const {
    const FusedKernel& k = plan.kernels[ki];
    const int64_t rank = std::max<int64_t>(static_cast<int64_t>(k.sizes.size()), 1);
    std::vector<ValueId> outside;
    int64_t words = 0;
    auto count = [&](const Node& m) {
      for (ValueId v : m.operands) {
        if (kernel_of_node[g.value(v).node] == ki) continue;
        if (m.kind != OpKind::Cat && std::find(outside.begin(), outside.end(), v) != outside.end()) continue;
        outside.push_back(v);
        words += 1 + rank + 1;
      }
      words += 1 + (m.kind == OpKind::Cat ? static_cast<int64_t>(m.operands.size()) : 0);
    };
    for (uint32_t ni : k.nodes) count(g.nodes()[ni]);
    count(n);
    return 8 * (words + 2 + rank);
  }

  // The step a kernel must follow to read `v`.
  int32_t dependency(ValueId v) const {
    if (is_folded_view(g, v)) return step_of_value[g.producer(v).operands[0]];
    return step_of_value[v];
  }

  void add_step(Step s, const Node& n) {
    for (ValueId v : n.outputs) step_of_value[v] = static_cast<int32_t>(plan.steps.size());
    plan.steps.push_back(s);
  }

  // The nodes a step runs: a kernel's, or its one node.
  template <class F>
  void for_each_node(const Step& st, F&& f) const {
    if (st.kind == Step::Kind::Kernel) {
      for (uint32_t ni : plan.kernels[st.kernel].nodes) f(g.nodes()[ni]);
    } else {
      f(g.nodes()[st.node]);
    }
  }

  // Kernel step `s` may move to the end of the plan when no step after it reads
  // what it makes (SSA: what it reads stays valid; the buffer plan and the
  // executor's in-place decisions are made from the final order). Bounded, so
  // planning stays linear on long graphs.
  static constexpr size_t kMaxSinkSteps = 16;
  bool can_sink(int32_t s) const {
    const size_t n = plan.steps.size();
    if (static_cast<size_t>(s) + 1 >= n || n - static_cast<size_t>(s) - 1 > kMaxSinkSteps) return false;
    bool reads = false;
    for (size_t t = static_cast<size_t>(s) + 1; t < n && !reads; ++t)
      for_each_node(plan.steps[t], [&](const Node& m) {
        for (ValueId v : m.operands) reads |= dependency(v) == s;  // a view counts as its base
      });
    return !reads;
  }
  // Moves kernel step `s` to the end; returns its new index.
  int32_t sink(int32_t s) {
    const Step moved = plan.steps[s];
    plan.steps.erase(plan.steps.begin() + s);
    plan.steps.push_back(moved);
    const auto end = static_cast<int32_t>(plan.steps.size() - 1);
    auto renumber = [&](const Step& st, int32_t at) {
      for_each_node(st, [&](const Node& m) {
        for (ValueId v : m.outputs) step_of_value[v] = at;
      });
    };
    for (int32_t t = s; t < end; ++t) renumber(plan.steps[t], t);
    renumber(moved, end);
    return end;
  }

  enum class Role { None, Full, Row, Reduce };

  // How node `n` would sit in kernel `k`: elementwise nodes join a kernel of
  // their output's sizes (a row kernel's full space) or a row kernel's row
  // space; reductions join a row kernel of their input's sizes reducing the
  // same dims, or turn a plain kernel of their input's sizes into a row kernel.
  Role role_in(const FusedKernel& k, const Node& n) const {
    if (ir::is_reduction(n.kind)) {
      if (g.value(n.operands[0]).type.sizes != k.sizes) return Role::None;
      if (k.row && k.reduce_rank != reduce_rank_of(n)) return Role::None;
      if (!k.row && cat_layout(g, k).dim >= 0) return Role::None;  // Cats join plain kernels only
      return Role::Reduce;
    }
    const auto& out = g.value(n.outputs[0]).type.sizes;
    if (n.kind == OpKind::Cat) {
      if (k.row || out != k.sizes) return Role::None;
      CatLayout have = cat_layout(g, k);
      return have.dim < 0 || have == cat_layout_of(g, n) ? Role::Full : Role::None;
    }
    if (out == k.sizes) return Role::Full;
    if (k.row && out == row_sizes(k)) return Role::Row;
    return Role::None;
  }

  void place_node(uint32_t ni) {
    const Node& n = g.nodes()[ni];
    int32_t chosen = -1;
    Role role = Role::None;
    if (opts.fuse) {
      // The latest kernel that can hold the node, if it comes after every
      // producer; operands made inside that kernel are fine.
      for (int32_t s = static_cast<int32_t>(plan.steps.size()) - 1; s >= 0; --s) {
        const Step& st = plan.steps[s];
        if (st.kind != Step::Kind::Kernel) continue;
        Role r = role_in(plan.kernels[st.kernel], n);
        if (r == Role::None) continue;
        if (static_cast<int32_t>(plan.kernels[st.kernel].nodes.size()) >= opts.max_kernel_nodes) break;
        if (opts.max_kernel_param_bytes > 0 && param_bytes_bound(st.kernel, n) > opts.max_kernel_param_bytes) break;
        auto fits = [&](int32_t at) {
          for (ValueId v : n.operands) {
            int32_t d = dependency(v);
            if (d > at || (d == at && is_folded_view(g, v))) return false;
          }
          return true;
        };
        // An operand made after the kernel (silu(gate) * up, up's GEMM coming
        // after silu's kernel): the kernel moves after it when nothing in
        // between reads what the kernel makes, so the node joins it instead of
        // starting a kernel that reloads the stored silu.
        if (!fits(s) && can_sink(s)) s = sink(s);
        if (fits(s)) chosen = s, role = r;
        break;
      }
    }
    if (chosen < 0) {
      FusedKernel k;
      k.sizes = g.value(n.outputs[0]).type.sizes;
      role = Role::Full;
      if (ir::is_reduction(n.kind)) {
        k.sizes = g.value(n.operands[0]).type.sizes;
        k.row = true;
        k.reduce_rank = reduce_rank_of(n);
        role = Role::Reduce;
      }
      k.name = "fused_" + std::to_string(plan.kernels.size());
      plan.kernels.push_back(std::move(k));
      chosen = static_cast<int32_t>(plan.steps.size());
      plan.steps.push_back(Step{Step::Kind::Kernel, 0, static_cast<int32_t>(plan.kernels.size() - 1)});
    }
    FusedKernel& k = plan.kernels[plan.steps[chosen].kernel];
    if (role == Role::Reduce && !k.row) {  // a plain kernel becomes a row kernel
      k.row = true;
      k.reduce_rank = reduce_rank_of(n);
      k.row_space.assign(k.nodes.size(), false);
    }
    k.nodes.push_back(ni);
    if (k.row) k.row_space.push_back(role == Role::Row || role == Role::Reduce);
    kernel_of_node[ni] = plan.steps[chosen].kernel;
    step_of_value[n.outputs[0]] = chosen;
  }

  void build_nodes(const std::vector<bool>& live) {
    std::vector<bool> needs_view_step(g.values().size(), false);
    // A view is materialized unless every user reads it through a kernel load.
    for (uint32_t i = 0; i < g.nodes().size(); ++i) {
      const Node& n = g.nodes()[i];
      if (!live[i]) continue;
      bool kernel_user = node_lowerable(g, n);
      for (ValueId v : n.operands)
        if (!kernel_user || !is_folded_view(g, v)) needs_view_step[v] = true;
    }
    for (ValueId v : g.outputs()) needs_view_step[v] = true;

    for (uint32_t i = 0; i < g.nodes().size(); ++i) {
      const Node& n = g.nodes()[i];
      if (!live[i]) continue;
      switch (n.kind) {
        case OpKind::Input:
        case OpKind::Scalar:
          break;
        case OpKind::AsStrided:
          if (needs_view_step[n.outputs[0]] || !is_folded_view(g, n.outputs[0]))
            add_step(Step{Step::Kind::AsStrided, i, -1}, n);
          break;
        case OpKind::AsStridedScatter:
          add_step(Step{Step::Kind::AsStridedScatter, i, -1}, n);
          break;
        case OpKind::Aten:
          add_step(Step{Step::Kind::Aten, i, -1}, n);
          break;
        default:
          if (!node_lowerable(g, n))
            throw std::runtime_error("lowering: node " + std::to_string(i) + " (" +
                                     std::string(ir::op_name(n.kind)) + ") has no lowering");
          place_node(i);
      }
    }
  }

  void build_accesses() {
    std::vector<bool> is_output(g.values().size(), false);
    for (ValueId v : g.outputs()) is_output[v] = true;
    // Users outside their kernel make a value a store.
    std::vector<bool> used_outside(g.values().size(), false);
    for (uint32_t i = 0; i < g.nodes().size(); ++i) {
      for (ValueId v : g.nodes()[i].operands) {
        int32_t pk = kernel_of_node[g.value(v).node];
        if (pk >= 0 && pk != kernel_of_node[i]) used_outside[v] = true;
      }
    }
    for (FusedKernel& k : plan.kernels) {
      std::vector<bool> inside(g.values().size(), false);
      for (uint32_t ni : k.nodes) inside[g.nodes()[ni].outputs[0]] = true;
      for (uint32_t ni : k.nodes) {
        const Node& n = g.nodes()[ni];
        for (size_t j = 0; j < n.operands.size(); ++j) {
          ValueId v = n.operands[j];
          // A Cat's operands are never made in its kernel: they are smaller.
          int32_t piece = n.kind == OpKind::Cat ? static_cast<int32_t>(j) : -1;
          if ((piece < 0 && inside[v]) || k.load_of(v, piece) >= 0) continue;
          k.loads.push_back(make_load(g, v, piece, k));
        }
        ValueId out = n.outputs[0];
        if (is_output[out] || used_outside[out]) k.stores.push_back(out);
      }
    }
  }
};

}  // namespace

Plan plan_graph(const Graph& g, const PlanOptions& opts) {
  Builder b(g, opts);
  b.build_nodes(ir::live_nodes(g));
  b.build_accesses();
  for (FusedKernel& k : b.plan.kernels) {
    plan_internal::coalesce(g, k);
    if (k.row) k.schedule = schedule_row(g, k);
    k.launch = choose_launch_shape(g, k);
  }
  if (opts.buffers) plan_buffers(g, b.plan);
  b.plan.check_stores = opts.check_stores;
  return std::move(b.plan);
}

}  // namespace lazyjit::lowering
