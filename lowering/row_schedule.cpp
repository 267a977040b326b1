// The row schedule: one col loop per reduction (feeding it), then one for the
// full-space stores; scratch chosen by a first pass over those loops.
#include "lowering/row_schedule.h"

#include <algorithm>
#include <sstream>
#include <stdexcept>
#include <unordered_map>

#include "lowering/plan.h"

namespace lazyjit::lowering {

namespace {

using ir::OpKind;

[[noreturn]] void malformed(const std::string& what) {
  throw std::runtime_error("malformed row kernel: " + what);
}

class RowScheduler {
 public:
  RowScheduler(const ir::Graph& g, const FusedKernel& k) : g_(g), k_(k) {
    const size_t rank = k.sizes.size(), ncol = static_cast<size_t>(k.reduce_rank);
    if (!k.row || k.row_space.size() != k.nodes.size() || ncol < 1 || ncol >= rank)
      malformed("reduce_rank " + std::to_string(k.reduce_rank) + ", rank " + std::to_string(rank));
    for (size_t i = 0; i < k.nodes.size(); ++i) {
      const ir::Node& n = g.nodes().at(k.nodes[i]);
      pos_of_[n.outputs[0]] = static_cast<int32_t>(i);
      if (ir::is_reduction(n.kind) && !k.row_space[i])
        malformed("reduction node " + std::to_string(k.nodes[i]) + " outside the row space");
    }
    for (ValueId v : k.stores)
      if (!pos_of_.count(v)) malformed("store %" + std::to_string(v) + " is not computed in the kernel");
    for (size_t d = rank - ncol; d < rank; ++d) {
      cols_ *= k.sizes[d];
      cols_empty_ |= k.sizes[d] <= 0;
    }
  }

  RowSchedule run(int64_t scratch_bytes) {
    RowSchedule s;
    s.scratch = choose_scratch(scratch_bytes);
    std::vector<bool> in_scratch(k_.nodes.size(), false);
    for (int32_t p : s.scratch) in_scratch[p] = true;
    std::vector<bool> computed(k_.nodes.size(), false);
    auto col_loop = [&](const std::vector<ValueId>& targets) -> std::optional<ColLoop> {
      if (cols_empty_) return std::nullopt;
      std::vector<bool> kept(k_.nodes.size(), false);
      for (size_t p = 0; p < kept.size(); ++p) kept[p] = computed[p] && in_scratch[p];
      Walk w = walk_full(targets, kept);
      ColLoop l;
      for (size_t p = 0; p < w.need.size(); ++p) {
        const auto pos = static_cast<int32_t>(p);
        if (w.stop[p]) l.reload.push_back(pos);
        if (!w.need[p]) continue;
        l.compute.push_back(pos);
        if (in_scratch[p]) l.keep.push_back(pos);
        computed[p] = true;
      }
      return l;
    };
    for (size_t i = 0; i < k_.nodes.size(); ++i) {
      if (!k_.row_space[i]) continue;
      const ir::Node& n = g_.nodes().at(k_.nodes[i]);
      RowStep st{RowStep::Kind::Node, static_cast<int32_t>(i), std::nullopt, {}};
      if (ir::is_reduction(n.kind)) {
        st.kind = RowStep::Kind::Reduce;
        st.cols = col_loop({n.operands.at(0)});
        DType at = accumulate_dtype(n);
        if (st.cols && n.kind == OpKind::ReduceSum && ir::is_floating(at))
          st.blocks = sum_blocks(at == DType::Float64 ? kSumBlockColsF64 : kSumBlockCols);
      }
      s.steps.push_back(std::move(st));
    }
    RowStep rows{RowStep::Kind::StoreRows, -1, std::nullopt, {}};
    RowStep full{RowStep::Kind::StoreCols, -1, std::nullopt, {}};
    std::vector<ValueId> full_values;
    for (size_t j = 0; j < k_.stores.size(); ++j) {
      bool row = is_row_value(k_.stores[j]);
      (row ? rows : full).stores.push_back(static_cast<int32_t>(j));
      if (!row) full_values.push_back(k_.stores[j]);
    }
    if (!rows.stores.empty()) s.steps.push_back(std::move(rows));
    if (!full.stores.empty() && !cols_empty_) {
      full.cols = col_loop(full_values);
      s.steps.push_back(std::move(full));
    }
    return s;
  }

 private:
  // The full-space nodes `targets` need, by position: `need` those to compute,
  // `stop` those `stop_at` marks (not entered: their value comes from scratch).
  struct Walk {
    std::vector<bool> need, stop;
  };

  Walk walk_full(const std::vector<ValueId>& targets, const std::vector<bool>& stop_at) const {
    Walk w{std::vector<bool>(k_.nodes.size(), false), std::vector<bool>(k_.nodes.size(), false)};
    std::vector<ValueId> work(targets);
    while (!work.empty()) {
      ValueId v = work.back();
      work.pop_back();
      auto it = pos_of_.find(v);
      if (it == pos_of_.end() || k_.row_space[it->second] || w.need[it->second] || w.stop[it->second])
        continue;
      size_t p = static_cast<size_t>(it->second);
      if (stop_at[p]) {
        w.stop[p] = true;
        continue;
      }
      w.need[p] = true;
      for (ValueId o : g_.nodes().at(k_.nodes[p]).operands) work.push_back(o);
    }
    return w;
  }

  static DType accumulate_dtype(const ir::Node& n) {
    const auto* t = n.attrs.empty() ? nullptr : std::get_if<int64_t>(&n.attrs[0].value);
    if (!t) malformed(std::string(ir::op_name(n.kind)) + " without an accumulate dtype");
    return ir::opmath_dtype(static_cast<DType>(*t));
  }

  // Blocks of at most `block_cols` cols: whole inner col dims, and chunks of the
  // first one (from the inside) that would pass the limit. None for short rows.
  std::optional<SumBlocks> sum_blocks(int64_t block_cols) const {
    if (cols_ <= block_cols) return std::nullopt;
    int64_t inner = 1;
    for (size_t d = k_.sizes.size(); d-- > k_.sizes.size() - k_.reduce_rank;) {
      if (inner * k_.sizes[d] > block_cols)
        return SumBlocks{static_cast<int32_t>(d), std::max<int64_t>(1, block_cols / inner)};
      inner *= k_.sizes[d];
    }
    malformed("cols " + std::to_string(cols_) + " but no col dim to block");
  }

  bool is_row_value(ValueId v) const {
    auto it = pos_of_.find(v);
    return it != pos_of_.end() && k_.row_space[it->second];
  }

  // A first pass over the row's col loops, each stopping at whatever an earlier
  // one computed: the nodes it stops at are the ones worth keeping.
  std::vector<int32_t> choose_scratch(int64_t budget) const {
    std::vector<std::vector<ValueId>> loops;  // each col loop's targets, in order
    for (size_t i = 0; i < k_.nodes.size(); ++i) {
      const ir::Node& n = g_.nodes().at(k_.nodes[i]);
      if (k_.row_space[i] && ir::is_reduction(n.kind)) loops.push_back({n.operands.at(0)});
    }
    std::vector<ValueId> full_stores;
    for (ValueId v : k_.stores)
      if (!is_row_value(v)) full_stores.push_back(v);
    if (!full_stores.empty()) loops.push_back(full_stores);
    std::vector<bool> computed(k_.nodes.size(), false);
    std::vector<int32_t> keep;
    std::vector<bool> kept(k_.nodes.size(), false);
    for (const auto& targets : loops) {
      Walk w = walk_full(targets, computed);
      for (size_t i = 0; i < computed.size(); ++i) {
        kept[i] = kept[i] || w.stop[i];
        computed[i] = computed[i] || w.need[i];
      }
    }
    for (size_t i = 0; i < kept.size(); ++i)
      if (kept[i]) keep.push_back(static_cast<int32_t>(i));
    const int64_t bytes = cols_ * 8 * static_cast<int64_t>(keep.size());
    if (cols_empty_ || bytes == 0 || bytes > budget) return {};
    return keep;
  }

  const ir::Graph& g_;
  const FusedKernel& k_;
  std::unordered_map<ValueId, int32_t> pos_of_;
  int64_t cols_ = 1;
  bool cols_empty_ = false;
};

}  // namespace

RowSchedule schedule_row(const ir::Graph& g, const FusedKernel& k, int64_t scratch_bytes) {
  return RowScheduler(g, k).run(scratch_bytes);
}

std::string RowSchedule::str(const ir::Graph& g, const FusedKernel& k) const {
  std::ostringstream os;
  auto node = [&](int32_t p) {
    os << " #" << p << ":" << ir::op_name(g.nodes().at(k.nodes.at(p)).kind);
  };
  auto list = [&](const char* what, const std::vector<int32_t>& ps) {
    if (ps.empty()) return;
    os << " " << what;
    for (int32_t p : ps) node(p);
  };
  auto stores = [&](const std::vector<int32_t>& js) {
    for (int32_t j : js) os << " %" << k.stores.at(j);
  };
  auto cols = [&](const std::optional<ColLoop>& l) {
    if (!l) {
      os << "  (cols empty)";
      return;
    }
    os << "  cols";
    list("reload", l->reload);
    list("compute", l->compute);
    list("keep", l->keep);
    os << " ->";
  };
  if (!scratch.empty()) {
    os << "  scratch";
    for (int32_t p : scratch) node(p);
    os << "\n";
  }
  for (const RowStep& st : steps) {
    switch (st.kind) {
      case RowStep::Kind::Node:
        os << "  row";
        node(st.node);
        break;
      case RowStep::Kind::Reduce:
        cols(st.cols);
        os << " reduce";
        node(st.node);
        if (st.blocks) os << " in blocks of " << st.blocks->chunk << " along d" << st.blocks->dim;
        break;
      case RowStep::Kind::StoreRows:
        os << "  store rows";
        stores(st.stores);
        break;
      case RowStep::Kind::StoreCols:
        cols(st.cols);
        os << " store";
        stores(st.stores);
        break;
    }
    os << "\n";
  }
  return os.str();
}

}  // namespace lazyjit::lowering
