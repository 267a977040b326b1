// A program step's name and kind, for traces and hooks: the fused kernel's
// name ("kernel"), the ATen op a library or op-by-op step runs ("library",
// "op_by_op"), or the view it makes ("view").
#pragma once
#include <string>
#include <utility>

#include "graph_ir/node_name.h"
#include "lowering/program.h"

namespace lazyjit::lowering {

inline std::pair<std::string, const char*> step_label(const Program& p, const Step& s) {
  switch (s.kind) {
    case Step::Kind::Kernel: return {p.plan.kernels[s.kernel].name, "kernel"};
    case Step::Kind::AsStrided: return {"as_strided", "view"};
    case Step::Kind::AsStridedScatter: return {"as_strided_scatter", "view"};
    case Step::Kind::Aten:
    case Step::Kind::OpByOp: break;
  }
  if (s.group >= 0) return {"aten::native_layer_norm", "op_by_op"};
  return {ir::node_op_name(p.graph.nodes()[s.node], "lazyjit::"), s.kind == Step::Kind::Aten ? "library" : "op_by_op"};
}

}  // namespace lazyjit::lowering
