// Op by op (plan_op_by_op), ops the tracer decomposed into row nodes
// (tracer/aten_to_ir_reductions.cpp) run again as the one ATen op the user
// called: a layer norm as native_layer_norm, not as ~14 elementwise and
// reduction ops, each a dispatch, an allocation and a pass over memory (~4x
// eager's time for that op at 20x256). Graph-level only: no ATen here.
#pragma once
#include <cstdint>
#include <vector>

#include "graph_ir/graph.h"

namespace lazyjit::lowering {

// native_layer_norm(input, input.sizes()[rank - normalized_dims:], weight?,
// bias?, eps) -> (out, mean, rstd), each cast to the dtype its value declares.
struct OpByOpLayerNorm {
  static constexpr ir::ValueId kNone = ~ir::ValueId{0};
  ir::ValueId input = kNone, weight = kNone, bias = kNone;
  ir::ValueId eps = kNone;    // a Scalar node's value
  ir::ValueId inv_n = kNone;  // a Scalar node's value: 1 / (elements normalized), else run node by node
  int64_t normalized_dims = 0;
  ir::ValueId out = kNone, mean = kNone, rstd = kNone;
  std::vector<uint32_t> nodes;  // the nodes it stands for, in graph order (first: where it runs)

  // The tensors it reads (input, weight and bias, those it has) and makes.
  std::vector<ir::ValueId> reads() const {
    std::vector<ir::ValueId> r{input};
    for (ir::ValueId v : {weight, bias})
      if (v != kNone) r.push_back(v);
    return r;
  }
  std::vector<ir::ValueId> makes() const { return {out, mean, rstd}; }
};

// The layer norms the tracer decomposed in `g` whose intermediate values no
// node outside them reads and no output is, in graph order.
std::vector<OpByOpLayerNorm> find_layer_norms(const ir::Graph& g);

}  // namespace lazyjit::lowering
