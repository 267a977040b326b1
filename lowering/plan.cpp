// Plan = greedy fusion of the live elementwise nodes into loop nests, then dim
// coalescing of each nest, then the row schedule of each row kernel
// (row_schedule.h), then the buffer plan. Each phase is a function below.
#include "lowering/plan.h"

#include "lowering/plan_bind.h"

#include <algorithm>
#include <sstream>
#include <stdexcept>

namespace lazyjit::lowering {

using ir::Graph;
using ir::Node;
using ir::OpKind;

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

// How a kernel's Cat nodes join, in its uncoalesced iteration space: the dim
// (-1: no Cat) and where each piece ends along it.
struct CatLayout {
  int64_t dim = -1;
  std::vector<int64_t> ends;
  bool operator==(const CatLayout&) const = default;
};

CatLayout cat_layout_of(const Graph& g, const Node& n) {
  CatLayout c;
  c.dim = std::get<int64_t>(n.attrs.at(1).value);
  int64_t end = 0;
  for (ValueId v : n.operands) c.ends.push_back(end += g.value(v).type.sizes.at(c.dim));
  return c;
}

CatLayout cat_layout(const Graph& g, const FusedKernel& k) {
  for (uint32_t ni : k.nodes)
    if (g.nodes()[ni].kind == OpKind::Cat) return cat_layout_of(g, g.nodes()[ni]);
  return {};
}

// Number of trailing dims a reduction node reduces.
int32_t reduce_rank_of(const Node& n) {
  return static_cast<int32_t>(std::get<std::vector<int64_t>>(n.attrs[1].value).size());
}

// The row space of a row kernel's (uncoalesced) iteration space.
std::vector<int64_t> row_sizes(const FusedKernel& k) {
  std::vector<int64_t> r = k.sizes;
  for (size_t d = r.size() - k.reduce_rank; d < r.size(); ++d) r[d] = 1;
  return r;
}

struct Builder {
  const Graph& g;
  const PlanOptions& opts;
  Plan plan;
  std::vector<int32_t> step_of_value;  // step producing each value, -1 for sources
  std::vector<int32_t> kernel_of_node;

  Builder(const Graph& graph, const PlanOptions& o)
      : g(graph), opts(o), step_of_value(graph.values().size(), -1),
        kernel_of_node(graph.nodes().size(), -1) {}

  bool is_folded_view(ValueId v) const {
    const Node& p = g.producer(v);
    return p.kind == OpKind::AsStrided && g.producer(p.operands[0]).kind != OpKind::AsStrided;
  }
  // The step a kernel must follow to read `v`.
  int32_t dependency(ValueId v) const {
    if (is_folded_view(v)) return step_of_value[g.producer(v).operands[0]];
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
        auto fits = [&](int32_t at) {
          for (ValueId v : n.operands) {
            int32_t d = dependency(v);
            if (d > at || (d == at && is_folded_view(v))) return false;
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
        if (!kernel_user || !is_folded_view(v)) needs_view_step[v] = true;
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
          if (needs_view_step[n.outputs[0]] || !is_folded_view(n.outputs[0]))
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
          k.loads.push_back(make_load(v, piece, k));
        }
        ValueId out = n.outputs[0];
        if (is_output[out] || used_outside[out]) k.stores.push_back(out);
      }
    }
  }

  // make_access for kernel `k` (uncoalesced); a Cat operand's load (piece >= 0)
  // is shifted back by its piece's start along the cat dim.
  Access make_load(ValueId v, int32_t piece, const FusedKernel& k) const {
    Access a = make_access(v, k.sizes);
    if (piece < 0) return a;
    CatLayout c = cat_layout(g, k);
    a.piece = piece;
    if (piece > 0) a.offset -= c.ends.at(piece - 1) * a.strides.at(c.dim);
    return a;
  }

  Access make_access(ValueId v, const std::vector<int64_t>& sizes) const {
    const ir::TensorType& t = g.value(v).type;
    const Node& p = g.producer(v);
    Access a{v, v, t.dtype, {}, 0, -1};
    if (p.kind == OpKind::Scalar) {
      a.scalar_index = static_cast<int32_t>(std::get<int64_t>(p.attrs[0].value));
      a.strides.assign(sizes.size(), 0);
    } else if (is_folded_view(v)) {
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

  // Drops size-1 dims and merges neighbours that every access walks as one. Row
  // kernels coalesce their row dims and their reduced dims separately, keeping
  // at least one of each. A Cat's dim merges with neither neighbour.
  static void coalesce(const Graph& g, FusedKernel& k) {
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
};

}  // namespace

Plan plan_graph(const Graph& g, const PlanOptions& opts) {
  Builder b(g, opts);
  b.build_nodes(ir::live_nodes(g));
  b.build_accesses();
  for (FusedKernel& k : b.plan.kernels) {
    Builder::coalesce(g, k);
    if (k.row) k.schedule = schedule_row(g, k);
  }
  if (opts.buffers) plan_buffers(g, b.plan);
  b.plan.check_stores = opts.check_stores;
  return std::move(b.plan);
}

std::optional<Plan> bind_plan(const Graph& g, const Plan& from) {
  const PlanOptions opts;
  Builder b(g, opts);
  Plan& p = b.plan;
  p.steps = from.steps;
  p.kernel_fns = from.kernel_fns;
  p.check_stores = from.check_stores;
  p.kernels.reserve(from.kernels.size());
  for (const FusedKernel& f : from.kernels) {
    if (f.nodes.empty()) return std::nullopt;
    FusedKernel k;
    k.nodes = f.nodes;
    k.stores = f.stores;
    k.row = f.row;
    k.row_space = f.row_space;
    k.name = f.name;
    // The iteration space place_node gave it: its first node's output, or the
    // input of its first node when that is a reduction.
    const Node& first = g.nodes()[f.nodes[0]];
    k.sizes = g.value(ir::is_reduction(first.kind) ? first.operands[0] : first.outputs[0]).type.sizes;
    for (int64_t s : k.sizes)
      if (s == 0) return std::nullopt;  // no iteration: planned anew (coalescing folds it)
    if (k.row)
      for (uint32_t ni : k.nodes)
        if (ir::is_reduction(g.nodes()[ni].kind)) {
          k.reduce_rank = reduce_rank_of(g.nodes()[ni]);
          break;
        }
    // Every node still sits in the kernel as place_node put it there.
    const std::vector<int64_t> rows = k.row ? row_sizes(k) : std::vector<int64_t>();
    for (size_t j = 0; j < k.nodes.size(); ++j) {
      const Node& n = g.nodes()[k.nodes[j]];
      bool fits;
      if (ir::is_reduction(n.kind))
        fits = k.row && k.row_space[j] && g.value(n.operands[0]).type.sizes == k.sizes &&
               reduce_rank_of(n) == k.reduce_rank;
      else if (k.row && k.row_space[j])
        fits = g.value(n.outputs[0]).type.sizes == rows;
      else
        fits = g.value(n.outputs[0]).type.sizes == k.sizes;
      if (!fits) return std::nullopt;
    }
    for (const Access& a : f.loads) k.loads.push_back(b.make_load(a.operand, a.piece, k));
    Builder::coalesce(g, k);
    if (k.row) k.schedule = schedule_row(g, k);
    p.kernels.push_back(std::move(k));
  }
  if (!from.frees.empty()) plan_buffers(g, p);
  return std::move(b.plan);
}

Plan plan_eager(const Graph& g, const PlanOptions& opts) {
  Plan plan;
  plan.op_by_op = true;
  std::vector<bool> live = ir::live_nodes(g);
  std::vector<int32_t> group_of(g.nodes().size(), -1);
  if (opts.eager_groups) {
    for (EagerLayerNorm& ln : find_layer_norms(g)) {
      bool any_live = false;
      for (uint32_t n : ln.nodes) any_live |= live[n];
      if (!any_live) continue;
      for (uint32_t n : ln.nodes) group_of[n] = static_cast<int32_t>(plan.layer_norms.size());
      plan.layer_norms.push_back(std::move(ln));
    }
  }
  for (uint32_t i = 0; i < g.nodes().size(); ++i) {
    if (int32_t j = group_of[i]; j >= 0) {
      if (plan.layer_norms[j].nodes.front() == i) plan.steps.push_back(Step{Step::Kind::Eager, i, -1, j});
      continue;
    }
    if (!live[i]) continue;
    switch (g.nodes()[i].kind) {
      case OpKind::Input:
      case OpKind::Scalar: break;
      case OpKind::AsStrided: plan.steps.push_back(Step{Step::Kind::AsStrided, i, -1}); break;
      case OpKind::AsStridedScatter: plan.steps.push_back(Step{Step::Kind::AsStridedScatter, i, -1}); break;
      case OpKind::Aten: plan.steps.push_back(Step{Step::Kind::Aten, i, -1}); break;
      default: plan.steps.push_back(Step{Step::Kind::Eager, i, -1}); break;
    }
  }
  if (opts.buffers) plan_buffers(g, plan);
  return plan;
}

void plan_buffers(const Graph& g, Plan& plan) {
  const size_t nsteps = plan.steps.size();
  std::vector<int32_t> made(g.values().size(), -1), last(g.values().size(), -1);
  std::vector<int64_t> bytes(g.values().size(), 0);
  // A view step's result shares its base's memory: using the view uses the base.
  std::vector<ValueId> base(g.values().size());
  for (ValueId v = 0; v < base.size(); ++v) base[v] = v;
  auto use = [&](ValueId v, int32_t s) {
    for (;;) {
      if (made[v] >= 0) last[v] = std::max(last[v], s);
      if (base[v] == v) break;
      v = base[v];
    }
  };
  for (size_t si = 0; si < nsteps; ++si) {
    const Step& s = plan.steps[si];
    int32_t step = static_cast<int32_t>(si);
    if (s.kind == Step::Kind::Kernel) {
      const FusedKernel& k = plan.kernels[s.kernel];
      for (const Access& a : k.loads)
        if (a.scalar_index < 0) use(a.value, step);
      for (ValueId v : k.stores) {
        made[v] = last[v] = step;
        bytes[v] = g.value(v).type.numel() * ir::element_size(g.value(v).type.dtype);
      }
      continue;
    }
    if (s.group >= 0) {
      const EagerLayerNorm& ln = plan.layer_norms[s.group];
      for (ValueId v : ln.reads()) use(v, step);
      for (ValueId v : ln.makes()) {
        made[v] = last[v] = step;
        bytes[v] = g.value(v).type.numel() * ir::element_size(g.value(v).type.dtype);
      }
      continue;
    }
    const Node& n = g.nodes()[s.node];
    for (ValueId v : n.operands) use(v, step);
    for (ValueId v : n.outputs) {
      made[v] = last[v] = step;
      // A view shares its operand's memory; everything else is new memory.
      if (s.kind == Step::Kind::AsStrided) base[v] = n.operands[0];
      else bytes[v] = g.value(v).type.numel() * ir::element_size(g.value(v).type.dtype);
    }
  }
  std::vector<bool> is_output(g.values().size(), false);
  for (ValueId v : g.outputs())
    for (ValueId w = v;; w = base[w]) {  // an output view keeps its base
      is_output[w] = true;
      if (base[w] == w) break;
    }
  plan.frees.assign(nsteps, {});
  std::vector<int64_t> freed_after(nsteps, 0), made_at(nsteps, 0);
  plan.result_bytes = 0;
  for (ValueId v = 0; v < g.values().size(); ++v) {
    if (made[v] < 0) continue;
    plan.result_bytes += bytes[v];
    made_at[made[v]] += bytes[v];
    if (is_output[v]) continue;
    plan.frees[last[v]].push_back(v);
    freed_after[last[v]] += bytes[v];
  }
  int64_t live = 0;
  plan.planned_peak_bytes = 0;
  for (size_t si = 0; si < nsteps; ++si) {
    live += made_at[si];
    plan.planned_peak_bytes = std::max(plan.planned_peak_bytes, live);
    live -= freed_after[si];
  }
}

std::string Plan::str(const Graph& g) const {
  std::ostringstream os;
  for (size_t si = 0; si < steps.size(); ++si) {
    const Step& s = steps[si];
    switch (s.kind) {
      case Step::Kind::Kernel: {
        const FusedKernel& k = kernels[s.kernel];
        os << k.name << " sizes=[";
        for (size_t i = 0; i < k.sizes.size(); ++i) os << (i ? "," : "") << k.sizes[i];
        os << "]";
        if (k.row) os << " reduce_rank=" << k.reduce_rank;
        if (k.cat_dim >= 0) {
          os << " cat_dim=" << k.cat_dim << " cat_ends=[";
          for (size_t i = 0; i < k.cat_ends.size(); ++i) os << (i ? "," : "") << k.cat_ends[i];
          os << "]";
        }
        os << " nodes=" << k.nodes.size() << " loads=";
        for (const Access& a : k.loads)
          os << (a.scalar_index >= 0 ? "s" : "%") << (a.scalar_index >= 0 ? a.scalar_index : a.value)
             << (a.piece >= 0 ? "@" + std::to_string(a.piece) : "") << " ";
        os << "stores=";
        for (ValueId v : k.stores) os << "%" << v << " ";
        os << "\n";
        if (k.row) os << k.schedule.str(g, k);
        break;
      }
      default: {
        const Node& n = g.nodes()[s.node];
        os << ir::op_name(n.kind);
        if (n.kind == OpKind::Aten) os << " " << std::get<std::string>(n.attrs[0].value);
        os << " -> %" << n.outputs[0] << "\n";
      }
    }
    if (si < frees.size() && !frees[si].empty()) {
      os << "  free";
      for (ValueId v : frees[si]) os << " %" << v;
      os << "\n";
    }
  }
  if (!frees.empty())
    os << "buffers: peak " << planned_peak_bytes << " bytes of " << result_bytes << " made\n";
  return os.str();
}

}  // namespace lazyjit::lowering
