// Builds the nodes of an op made of elementwise nodes and reductions over its
// input's trailing dims (sum, mean, softmax, layer_norm, their backward, losses):
// every node computes in `acc` (float32 for half types), and reductions keep the
// reduced dims as size 1. The planner fuses what it builds into row kernels
// (or plain kernels when nothing is reduced: `k` = 0).
#pragma once
#include <cstdint>
#include <vector>

#include "graph_ir/graph.h"
#include "tracer/trace_context.h"

namespace lazyjit::tracer {

struct RowBuilder {
  TraceContext& ctx;
  ir::Graph& g;
  ir::DType acc;
  std::vector<int64_t> full, row;  // sizes of the input and of one value per row
  int64_t k;                       // reduced trailing dims

  ir::TensorType type(const std::vector<int64_t>& sizes, ir::DType dt) const {
    return ir::TensorType{dt, sizes, ir::contiguous_strides(sizes)};
  }
  ir::ValueId ew(ir::OpKind kind, std::vector<ir::ValueId> ops, const std::vector<int64_t>& sizes, ir::DType out) {
    return g.add_node1(kind, std::move(ops), {{static_cast<int64_t>(acc)}}, type(sizes, out));
  }
  // A full-size elementwise node in the compute dtype.
  ir::ValueId ew(ir::OpKind kind, std::vector<ir::ValueId> ops) { return ew(kind, std::move(ops), full, acc); }
  ir::ValueId reduce(ir::OpKind kind, ir::ValueId x) {
    std::vector<int64_t> dims;
    for (int64_t d = static_cast<int64_t>(full.size()) - k; d < static_cast<int64_t>(full.size()); ++d) dims.push_back(d);
    return g.add_node1(kind, {x}, {{static_cast<int64_t>(acc)}, {dims}}, type(row, acc));
  }
  ir::ValueId number(double v) { return ctx.scalar(c10::Scalar(v)); }
  int64_t row_numel() const {
    int64_t n = 1;
    for (size_t d = full.size() - k; d < full.size(); ++d) n *= full[d];
    return n;
  }
};

}  // namespace lazyjit::tracer
