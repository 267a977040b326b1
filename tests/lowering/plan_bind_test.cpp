// bind_plan: a plan re-derived for new sizes gives the kernels planning gives,
// and refuses sizes at which its fusion no longer holds.
#include <gtest/gtest.h>

#include "lowering/kernel_key.h"
#include "lowering/plan.h"
#include "lowering/plan_bind.h"

using namespace lazyjit;
using namespace lazyjit::ir;

namespace {
TensorType f32(std::vector<int64_t> s) { return TensorType{DType::Float32, s, contiguous_strides(s)}; }
Attr dt() { return Attr{static_cast<int64_t>(DType::Float32)}; }
Attr shape(std::vector<int64_t> v) { return Attr{v, true}; }
Attr shape(int64_t v) { return Attr{v, true}; }

// One structure at any (rows, cols): a transposed view read by a kernel, a
// broadcast bias, a softmax over the cols (a row kernel), a library step
// between, and a view of the result at an offset that depends on the sizes.
Graph model(int64_t rows, int64_t cols) {
  Graph g;
  ValueId x = g.add_input(f32({cols, rows}));
  ValueId bias = g.add_input(f32({cols}));
  ValueId s = g.add_scalar(DType::Float64);
  ValueId xt = g.add_node1(OpKind::AsStrided, {x}, {shape({rows, cols}), shape({1, rows}), shape(0)}, f32({rows, cols}));
  ValueId a = g.add_node1(OpKind::Add, {xt, bias}, {dt()}, f32({rows, cols}));
  ValueId m = g.add_node1(OpKind::Mul, {a, s}, {dt()}, f32({rows, cols}));
  ValueId mx = g.add_node1(OpKind::ReduceMax, {m}, {dt(), Attr{std::vector<int64_t>{1}}}, f32({rows, 1}));
  ValueId e = g.add_node1(OpKind::Exp, {g.add_node1(OpKind::Sub, {m, mx}, {dt()}, f32({rows, cols}))}, {dt()},
                          f32({rows, cols}));
  ValueId sum = g.add_node1(OpKind::ReduceSum, {e}, {dt(), Attr{std::vector<int64_t>{1}}}, f32({rows, 1}));
  ValueId p = g.add_node1(OpKind::Div, {e, sum}, {dt()}, f32({rows, cols}));
  ValueId lib = g.add_node1(OpKind::Aten, {p}, {Attr{std::string("aten::relu")}, Attr{OperandRef{0}}}, f32({rows, cols}));
  ValueId tail = g.add_node1(OpKind::AsStrided, {lib}, {shape({rows - 1, cols}), shape({cols, 1}), shape(cols)},
                             f32({rows - 1, cols}));
  g.add_output(g.add_node1(OpKind::Tanh, {tail}, {dt()}, f32({rows - 1, cols})));
  g.add_output(mx);
  return g;
}

void expect_same_kernels(const lowering::Plan& bound, const lowering::Plan& planned, const Graph& g) {
  ASSERT_EQ(bound.steps.size(), planned.steps.size());
  ASSERT_EQ(bound.kernels.size(), planned.kernels.size());
  for (size_t i = 0; i < bound.kernels.size(); ++i) {
    const auto& b = bound.kernels[i];
    const auto& p = planned.kernels[i];
    EXPECT_EQ(b.sizes, p.sizes) << b.name;
    EXPECT_EQ(b.reduce_rank, p.reduce_rank) << b.name;
    ASSERT_EQ(b.loads.size(), p.loads.size()) << b.name;
    for (size_t j = 0; j < b.loads.size(); ++j) {
      EXPECT_EQ(b.loads[j].value, p.loads[j].value) << b.name;
      EXPECT_EQ(b.loads[j].strides, p.loads[j].strides) << b.name << " load " << j;
      EXPECT_EQ(b.loads[j].offset, p.loads[j].offset) << b.name << " load " << j;
    }
    EXPECT_EQ(b.stores, p.stores) << b.name;
    EXPECT_EQ(b.schedule.str(g, b), p.schedule.str(g, p)) << b.name;
    EXPECT_EQ(lowering::kernel_key(g, b).exact, lowering::kernel_key(g, p).exact) << b.name;
  }
  EXPECT_EQ(bound.frees, planned.frees);
  EXPECT_EQ(bound.planned_peak_bytes, planned.planned_peak_bytes);
  EXPECT_EQ(bound.result_bytes, planned.result_bytes);
}
}  // namespace

TEST(BindPlan, GivesThePlanPlanningGivesAtOtherSizes) {
  const Graph first = model(6, 10);
  const lowering::Plan from = lowering::plan_graph(first);
  ASSERT_GE(from.kernels.size(), 2u);
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{7, 10}, {2, 13}, {31, 3}, {6, 10}, {97, 127}}) {
    SCOPED_TRACE("rows " + std::to_string(rows) + " cols " + std::to_string(cols));
    const Graph g = model(rows, cols);
    ASSERT_EQ(g.hashes().structure, first.hashes().structure);
    std::optional<lowering::Plan> bound = lowering::bind_plan(g, from);
    ASSERT_TRUE(bound.has_value());
    expect_same_kernels(*bound, lowering::plan_graph(g), g);
    for (size_t i = 0; i < bound->kernels.size(); ++i)  // the code compiled for `from` serves it
      EXPECT_EQ(lowering::kernel_key(g, bound->kernels[i]).generic, lowering::kernel_key(first, from.kernels[i]).generic);
  }
}

TEST(BindPlan, ARowPastTheScratchBudgetChangesTheKernelsKey) {
  const Graph first = model(4, 64);
  const lowering::Plan from = lowering::plan_graph(first);
  const Graph g = model(4, 20000);  // the softmax's row no longer fits its scratch: recomputes instead
  std::optional<lowering::Plan> bound = lowering::bind_plan(g, from);
  ASSERT_TRUE(bound.has_value());
  bool differs = false;
  for (size_t i = 0; i < bound->kernels.size(); ++i)
    differs |= !(lowering::kernel_key(g, bound->kernels[i]).generic == lowering::kernel_key(first, from.kernels[i]).generic);
  EXPECT_TRUE(differs);
  expect_same_kernels(*bound, lowering::plan_graph(g), g);
}

TEST(BindPlan, RefusesZeroSizes) {
  const lowering::Plan from = lowering::plan_graph(model(6, 10));
  EXPECT_FALSE(lowering::bind_plan(model(6, 0), from).has_value());
}

TEST(BindPlan, RefusesWhenANodeNoLongerFitsItsKernel) {
  // exp(x) then * y: one kernel when x and y have the same sizes; when x is a
  // row that broadcasts, exp(x) is smaller than the product.
  auto make = [](int64_t xrows) {
    Graph g;
    ValueId x = g.add_input(f32({xrows, 8}));
    ValueId y = g.add_input(f32({4, 8}));
    ValueId a = g.add_node1(OpKind::Exp, {x}, {dt()}, f32({xrows, 8}));
    g.add_output(g.add_node1(OpKind::Mul, {a, y}, {dt()}, f32({4, 8})));
    return g;
  };
  const lowering::Plan from = lowering::plan_graph(make(4));
  ASSERT_EQ(from.kernels.size(), 1u);
  EXPECT_FALSE(lowering::bind_plan(make(1), from).has_value());
}

// A KV cache one longer per step: the cat's pieces move, the code stays.
TEST(BindPlan, ACatWithLongerPiecesKeepsItsGenericKey) {
  auto model = [](int64_t past) {
    Graph g;
    ValueId p = g.add_input(f32({2, past, 4}));
    ValueId n = g.add_input(f32({2, 1, 4}));
    ValueId n3 = g.add_node1(OpKind::Mul, {n, g.add_scalar(DType::Float64)}, {dt()}, f32({2, 1, 4}));
    ValueId c = g.add_node1(OpKind::Cat, {p, n3}, {dt(), Attr{int64_t{1}}}, f32({2, past + 1, 4}));
    g.add_output(g.add_node1(OpKind::Exp, {c}, {dt()}, f32({2, past + 1, 4})));
    return g;
  };
  const Graph first = model(3);
  const lowering::Plan from = lowering::plan_graph(first);
  for (int64_t past : {4, 5, 17, 2}) {
    SCOPED_TRACE("past " + std::to_string(past));
    const Graph g = model(past);
    std::optional<lowering::Plan> bound = lowering::bind_plan(g, from);
    ASSERT_TRUE(bound.has_value());
    const lowering::Plan planned = lowering::plan_graph(g);
    expect_same_kernels(*bound, planned, g);
    for (size_t i = 0; i < bound->kernels.size(); ++i) {
      EXPECT_EQ(bound->kernels[i].cat_ends, planned.kernels[i].cat_ends);
      EXPECT_EQ(lowering::kernel_key(g, bound->kernels[i]).generic, lowering::kernel_key(first, from.kernels[i]).generic);
    }
  }
}
