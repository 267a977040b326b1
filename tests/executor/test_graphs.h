// What the executor tests share to build and compile graphs by hand: the IR
// names, tensor types, dtype attributes, and one runtime per test binary
// (`using namespace lazyjit::test_graphs;`).
#pragma once
#include <vector>

#include "graph_ir/graph.h"
#include "runtime/runtime.h"

namespace lazyjit::test_graphs {

using ir::Attr;
using ir::DType;
using ir::OpKind;
using ir::ValueId;

inline ir::TensorType typed(ir::DType t, std::vector<int64_t> sizes) {
  return {t, sizes, ir::contiguous_strides(sizes)};
}
inline ir::TensorType f32(std::vector<int64_t> sizes) { return typed(ir::DType::Float32, std::move(sizes)); }
inline ir::Attr dt(ir::DType t) { return ir::Attr{static_cast<int64_t>(t)}; }

inline runtime::Runtime& rt() {
  static runtime::Runtime r{runtime::Config{}};
  return r;
}

}  // namespace lazyjit::test_graphs
