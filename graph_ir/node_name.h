// A node's op as reports name it: the ATen schema name of a library node
// ("aten::mm"), else the IR op name ("mul"), after `ir_prefix` ("lazyjit::mul").
#pragma once
#include <string>
#include <string_view>
#include <variant>

#include "graph_ir/graph.h"

namespace lazyjit::ir {

inline std::string node_op_name(const Node& n, std::string_view ir_prefix = {}) {
  if (n.kind == OpKind::Aten && !n.attrs.empty())
    if (auto* s = std::get_if<std::string>(&n.attrs[0].value)) return *s;
  return std::string(ir_prefix) + std::string(op_name(n.kind));
}

}  // namespace lazyjit::ir
