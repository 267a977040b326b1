// The gemm_epilogue pass on hand-built graphs, for both devices' rules: which
// GELU each fuses, that a second reader or a graph output keeps the GEMM, and
// that a chain mm + bias |> act becomes one op.
#include <gtest/gtest.h>

#include "lowering/gemm_epilogue.h"

using namespace lazyjit;
using namespace lazyjit::ir;
using lowering::PassRules;
const PassRules kCpu = lowering::cpu_library_rules();
const PassRules kCuda = lowering::cuda_library_rules();

namespace {
TensorType f32(std::vector<int64_t> s) { return TensorType{DType::Float32, s, contiguous_strides(s)}; }
Attr dt() { return Attr{static_cast<int64_t>(DType::Float32)}; }

ValueId mm(Graph& g, ValueId a, ValueId b) {
  return g.add_node1(OpKind::Aten, {a, b}, {{std::string("aten::mm")}, {OperandRef{0}}, {OperandRef{1}}},
                     f32({8, 16}));
}

// x[8,4] @ w[4,16] + bias[16], then `act` (Input: none); `extra` reads the product too.
Graph linear(OpKind act, bool extra = false) {
  Graph g;
  ValueId x = g.add_input(f32({8, 4})), w = g.add_input(f32({4, 16})), b = g.add_input(f32({16}));
  ValueId m = mm(g, x, w);
  ValueId y = g.add_node1(OpKind::Add, {m, b}, {dt()}, f32({8, 16}));
  if (act != OpKind::Input) y = g.add_node1(act, {y}, {dt()}, f32({8, 16}));
  g.add_output(y);
  if (extra) g.add_output(g.add_node1(OpKind::Exp, {m}, {dt()}, f32({8, 16})));
  return g;
}

std::string fused(const Graph& g, const PassRules& rules) {
  Graph out = lowering::fuse_gemm_epilogues(g, rules.gemm_epilogue);
  EXPECT_EQ(out.verify(), "");
  return out.str();
}
}  // namespace

TEST(GemmEpilogue, BiasBecomesAddmmOnBothDevices) {
  for (const PassRules& d : {kCpu, kCuda}) {
    std::string s = fused(linear(OpKind::Input), d);
    EXPECT_NE(s.find("aten::addmm\", $0, $1, $2, 1, 1]"), std::string::npos) << s;
    EXPECT_EQ(s.find("aten::mm"), std::string::npos) << s;
    EXPECT_EQ(s.find(" = add["), std::string::npos) << s;
  }
}

TEST(GemmEpilogue, CudaFusesTanhGeluAndRelu) {
  std::string s = fused(linear(OpKind::GeluTanh), kCuda);
  EXPECT_NE(s.find("aten::_addmm_activation\", $0, $1, $2, 1, 1, true]"), std::string::npos) << s;
  EXPECT_EQ(s.find("gelu_tanh"), std::string::npos) << s;
  s = fused(linear(OpKind::Relu), kCuda);
  EXPECT_NE(s.find("aten::_addmm_activation\", $0, $1, $2, 1, 1, false]"), std::string::npos) << s;
  // The erf GELU is not what CUDA's _addmm_activation computes: addmm, then gelu.
  s = fused(linear(OpKind::Gelu), kCuda);
  EXPECT_EQ(s.find("_addmm_activation"), std::string::npos) << s;
  EXPECT_NE(s.find(" = gelu["), std::string::npos) << s;
}

TEST(GemmEpilogue, CpuKeepsActivationsOutOfTheGemmByDefault) {
  std::string s = fused(linear(OpKind::Relu), kCpu);
  EXPECT_EQ(s.find("_addmm_activation"), std::string::npos) << s;
  EXPECT_NE(s.find(" = relu["), std::string::npos) << s;
}

TEST(GemmEpilogue, AnotherReaderOrAnOutputKeepsTheProduct) {
  std::string s = fused(linear(OpKind::Relu, /*extra=*/true), kCuda);
  EXPECT_NE(s.find("aten::mm"), std::string::npos) << s;
  EXPECT_EQ(s.find("addmm"), std::string::npos) << s;
  Graph g = linear(OpKind::Input);
  g.add_output(g.nodes()[3].outputs[0]);  // the mm itself
  s = fused(g, kCuda);
  EXPECT_NE(s.find("aten::mm"), std::string::npos) << s;
}
