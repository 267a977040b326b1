// plan_graph: which steps a graph becomes, IR in, plan out.
#include <gtest/gtest.h>

#include "lowering/plan.h"

using namespace lazyjit;
using namespace lazyjit::ir;
using lowering::Step;

namespace {
TensorType f32(std::vector<int64_t> s) { return TensorType{DType::Float32, s, contiguous_strides(s)}; }
Attr dt() { return Attr{static_cast<int64_t>(DType::Float32)}; }
Attr shape(std::vector<int64_t> v) { return Attr{v, true}; }
Attr shape(int64_t v) { return Attr{v, true}; }
}  // namespace

TEST(Plan, ElementwiseChainIsOneKernelStoringOnlyTheOutput) {
  Graph g;
  ValueId x = g.add_input(f32({8, 16}));
  ValueId s = g.add_scalar(DType::Float64);
  ValueId a = g.add_node1(OpKind::Mul, {x, s}, {dt()}, f32({8, 16}));
  ValueId b = g.add_node1(OpKind::Tanh, {a}, {dt()}, f32({8, 16}));
  ValueId c = g.add_node1(OpKind::Add, {b, x}, {dt()}, f32({8, 16}));
  g.add_output(c);
  auto plan = lowering::plan_graph(g);
  ASSERT_EQ(plan.steps.size(), 1u);
  ASSERT_EQ(plan.kernels.size(), 1u);
  const auto& k = plan.kernels[0];
  EXPECT_EQ(k.nodes.size(), 3u);
  EXPECT_EQ(k.stores, std::vector<ValueId>{c});
  EXPECT_EQ(k.sizes, std::vector<int64_t>{128});  // contiguous dims coalesced
  ASSERT_EQ(k.loads.size(), 2u);
  EXPECT_EQ(k.loads[k.load_of(s)].scalar_index, 0);
  EXPECT_EQ(k.loads[k.load_of(x)].strides, std::vector<int64_t>{1});
}

TEST(Plan, DeadNodesAreDropped) {
  Graph g;
  ValueId x = g.add_input(f32({4}));
  g.add_node1(OpKind::Exp, {x}, {dt()}, f32({4}));  // never used
  ValueId y = g.add_node1(OpKind::Neg, {x}, {dt()}, f32({4}));
  g.add_output(y);
  auto plan = lowering::plan_graph(g);
  ASSERT_EQ(plan.kernels.size(), 1u);
  EXPECT_EQ(plan.kernels[0].nodes.size(), 1u);
}

TEST(Plan, LibraryStepSplitsKernelsAndForcesStores) {
  Graph g;
  ValueId x = g.add_input(f32({4, 4}));
  ValueId a = g.add_node1(OpKind::Relu, {x}, {dt()}, f32({4, 4}));
  ValueId m = g.add_node(OpKind::Aten, {a, a}, {{std::string("aten::mm")}, {OperandRef{0}}, {OperandRef{1}}},
                         {f32({4, 4})})[0];
  ValueId b = g.add_node1(OpKind::Add, {m, a}, {dt()}, f32({4, 4}));
  g.add_output(b);
  auto plan = lowering::plan_graph(g);
  ASSERT_EQ(plan.steps.size(), 3u);
  EXPECT_EQ(plan.steps[0].kind, Step::Kind::Kernel);
  EXPECT_EQ(plan.steps[1].kind, Step::Kind::Aten);
  EXPECT_EQ(plan.steps[2].kind, Step::Kind::Kernel);
  EXPECT_EQ(plan.kernels[0].stores, std::vector<ValueId>{a});  // read by mm and by the add
}

TEST(Plan, IndependentWorkAfterALibraryStepJoinsTheEarlierKernel) {
  Graph g;
  ValueId x = g.add_input(f32({4, 4}));
  ValueId a = g.add_node1(OpKind::Relu, {x}, {dt()}, f32({4, 4}));
  ValueId m = g.add_node(OpKind::Aten, {a, a}, {{std::string("aten::mm")}, {OperandRef{0}}, {OperandRef{1}}},
                         {f32({4, 4})})[0];
  ValueId b = g.add_node1(OpKind::Exp, {x}, {dt()}, f32({4, 4}));  // does not need mm
  g.add_output(m);
  g.add_output(b);
  auto plan = lowering::plan_graph(g);
  EXPECT_EQ(plan.kernels.size(), 1u);
  EXPECT_EQ(plan.kernels[0].nodes.size(), 2u);
}

TEST(Plan, BroadcastAndTransposedReadsBecomeStrides) {
  Graph g;
  ValueId x = g.add_input(f32({6, 4}));
  ValueId bias = g.add_input(f32({4}));
  ValueId xt = g.add_node1(OpKind::AsStrided, {x}, {shape({4, 6}), shape({1, 4}), shape(0)}, f32({4, 6}));
  ValueId col = g.add_node1(OpKind::AsStrided, {bias}, {shape({4, 1}), shape({1, 1}), shape(0)}, f32({4, 1}));
  ValueId y = g.add_node1(OpKind::Add, {xt, col}, {dt()}, f32({4, 6}));
  g.add_output(y);
  auto plan = lowering::plan_graph(g);
  ASSERT_EQ(plan.steps.size(), 1u);  // both views folded into loads
  const auto& k = plan.kernels[0];
  EXPECT_EQ(k.sizes, (std::vector<int64_t>{4, 6}));
  EXPECT_EQ(k.loads[k.load_of(xt)].value, x);
  EXPECT_EQ(k.loads[k.load_of(xt)].strides, (std::vector<int64_t>{1, 4}));
  EXPECT_EQ(k.loads[k.load_of(col)].strides, (std::vector<int64_t>{1, 0}));
}

TEST(Plan, DifferentIterationSpacesAreDifferentKernels) {
  Graph g;
  ValueId x = g.add_input(f32({4, 1}));
  ValueId y = g.add_input(f32({4, 5}));
  ValueId a = g.add_node1(OpKind::Exp, {x}, {dt()}, f32({4, 1}));
  ValueId b = g.add_node1(OpKind::Mul, {a, y}, {dt()}, f32({4, 5}));
  g.add_output(b);
  auto plan = lowering::plan_graph(g);
  ASSERT_EQ(plan.kernels.size(), 2u);
  EXPECT_EQ(plan.kernels[1].loads[plan.kernels[1].load_of(a)].strides, (std::vector<int64_t>{1, 0}));
}

TEST(Plan, NoFuseOptionGivesOneKernelPerNode) {
  Graph g;
  ValueId x = g.add_input(f32({4}));
  ValueId a = g.add_node1(OpKind::Exp, {x}, {dt()}, f32({4}));
  ValueId b = g.add_node1(OpKind::Neg, {a}, {dt()}, f32({4}));
  g.add_output(b);
  lowering::PlanOptions o;
  o.fuse = false;
  EXPECT_EQ(lowering::plan_graph(g, o).kernels.size(), 2u);
}
