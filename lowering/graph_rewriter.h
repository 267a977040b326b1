// Rebuilding a graph in a graph pass (passes.cpp, gemm_epilogue.cpp): the new
// graph starts with the old one's sources, numbered as before; the pass copies
// or replaces the other nodes in order, and every old value maps to the new one
// that computes it (kUnmapped: dropped, passes.h's kDropped).
#pragma once
#include <stdexcept>
#include <string>
#include <vector>

#include "graph_ir/graph.h"
#include "lowering/passes.h"

namespace lazyjit::lowering {

constexpr ir::ValueId kUnmapped = ~ir::ValueId{0};

// Rebuilds a graph node by node: the sources first, numbered as before, then
// whatever nodes the pass copies, with operands renamed to the new values.
class Rewriter {
 public:
  explicit Rewriter(const ir::Graph& src) : src_(src), map_(src.values().size(), kUnmapped) {
    for (ir::ValueId v : src.inputs()) map_[v] = out_.add_input(src.value(v).type);
    for (ir::ValueId v : src.scalars()) {
      const ir::Node& p = src.producer(v);
      bool wrapped = p.attrs.size() > 1 && std::holds_alternative<bool>(p.attrs[1].value) &&
                     std::get<bool>(p.attrs[1].value);
      map_[v] = out_.add_scalar(src.value(v).type.dtype, wrapped);
    }
  }

  ir::ValueId map(ir::ValueId v) const {
    if (map_[v] == kUnmapped)
      throw std::logic_error("graph pass: %" + std::to_string(v) + " used before it was rewritten");
    return map_[v];
  }
  bool mapped(ir::ValueId v) const { return map_[v] != kUnmapped; }
  // The old value `v` is now computed by the new value `to`.
  void alias(ir::ValueId v, ir::ValueId to) { map_[v] = to; }

  std::vector<ir::ValueId> operands(const ir::Node& n) const {
    std::vector<ir::ValueId> ops;
    ops.reserve(n.operands.size());
    for (ir::ValueId v : n.operands) ops.push_back(map(v));
    return ops;
  }
  // Copies `n` with its operands renamed; maps its outputs.
  void copy(const ir::Node& n) {
    std::vector<ir::TensorType> types;
    for (ir::ValueId v : n.outputs) types.push_back(src_.value(v).type);
    auto outs = out_.add_node(n.kind, operands(n), n.attrs, std::move(types));
    for (size_t i = 0; i < outs.size(); ++i) map_[n.outputs[i]] = outs[i];
  }

  ir::Graph& graph() { return out_; }
  ir::Graph finish(ValueMap* map_out) {
    for (ir::ValueId v : src_.outputs()) out_.add_output(map(v));
    if (map_out) *map_out = map_;  // kUnmapped is kDropped
    return std::move(out_);
  }

 private:
  const ir::Graph& src_;
  ir::Graph out_;
  std::vector<ir::ValueId> map_;
};

}  // namespace lazyjit::lowering
