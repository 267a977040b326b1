// find_layer_norms and plan_op_by_op's groups: the tracer's decomposed layer norm
// (tracer/aten_to_ir_reductions.cpp) found as one op-by-op step, and only when nothing
// outside it reads what it computes inside.
#include <gtest/gtest.h>

#include <algorithm>

#include "lowering/op_by_op_groups.h"
#include "lowering/plan.h"

using namespace lazyjit;
using namespace lazyjit::ir;
using lowering::OpByOpLayerNorm;
using lowering::Step;

namespace {
TensorType f32(std::vector<int64_t> s) { return TensorType{DType::Float32, s, contiguous_strides(s)}; }
Attr dt() { return Attr{static_cast<int64_t>(DType::Float32)}; }

// As RowBuilder records native_layer_norm over the last dim of a [4, 8] input.
struct LayerNorm {
  Graph g;
  ValueId x, w = OpByOpLayerNorm::kNone, b = OpByOpLayerNorm::kNone, out, mean, rstd, d, var;
  uint32_t first = 0;
  LayerNorm(bool weight, bool bias) {
    x = g.add_input(f32({4, 8}));
    if (weight) w = g.add_input(f32({8}));
    if (bias) b = g.add_input(f32({8}));
    ValueId inv_n = g.add_scalar(DType::Float64), eps = g.add_scalar(DType::Float64);
    first = static_cast<uint32_t>(g.nodes().size());
    auto full = [&](OpKind k, std::vector<ValueId> in) { return g.add_node1(k, std::move(in), {dt()}, f32({4, 8})); };
    auto row = [&](OpKind k, std::vector<ValueId> in) { return g.add_node1(k, std::move(in), {dt()}, f32({4, 1})); };
    auto sum = [&](ValueId v) {
      return g.add_node1(OpKind::ReduceSum, {v}, {dt(), Attr{std::vector<int64_t>{1}}}, f32({4, 1}));
    };
    ValueId m = row(OpKind::Mul, {sum(x), inv_n});
    d = full(OpKind::Sub, {x, m});
    var = row(OpKind::Mul, {sum(full(OpKind::Mul, {d, d})), inv_n});
    ValueId rs = row(OpKind::Rsqrt, {row(OpKind::Add, {var, eps})});
    ValueId y = full(OpKind::Mul, {d, rs});
    if (weight) y = full(OpKind::Mul, {y, w});
    if (bias) y = full(OpKind::Add, {y, b});
    out = full(OpKind::Cast, {y});
    mean = row(OpKind::Cast, {m});
    rstd = row(OpKind::Cast, {rs});
    g.add_output(out);
  }
};
}  // namespace

TEST(EagerGroups, FindsTheTracersLayerNormWithAndWithoutAffine) {
  for (bool weight : {false, true})
    for (bool bias : {false, true}) {
      LayerNorm ln(weight, bias);
      auto found = lowering::find_layer_norms(ln.g);
      ASSERT_EQ(found.size(), 1u) << weight << bias;
      const OpByOpLayerNorm& f = found[0];
      EXPECT_EQ(f.input, ln.x);
      EXPECT_EQ(f.weight, ln.w);
      EXPECT_EQ(f.bias, ln.b);
      EXPECT_EQ(f.normalized_dims, 1);
      EXPECT_EQ(f.out, ln.out);
      EXPECT_EQ(f.mean, ln.mean);
      EXPECT_EQ(f.rstd, ln.rstd);
      EXPECT_EQ(f.nodes.front(), ln.first);
      EXPECT_EQ(f.nodes.size(), 12u + weight + bias);
    }
}

TEST(EagerGroups, AnIntermediateReadOutsideOrAnOutputKeepsItNodeByNode) {
  LayerNorm read(true, true);
  read.g.add_output(read.g.add_node1(OpKind::Exp, {read.d}, {dt()}, f32({4, 8})));
  EXPECT_TRUE(lowering::find_layer_norms(read.g).empty());
  LayerNorm out(true, true);
  out.g.add_output(out.var);
  EXPECT_TRUE(lowering::find_layer_norms(out.g).empty());
}

TEST(EagerGroups, PlanEagerRunsItAsOneStepThatMakesItsThreeResults) {
  LayerNorm ln(true, true);
  lowering::PlanOptions opts;
  opts.op_by_op_groups = true;
  lowering::Plan plan = lowering::plan_op_by_op(ln.g, opts);
  ASSERT_EQ(plan.steps.size(), 1u);
  EXPECT_EQ(plan.steps[0].kind, Step::Kind::OpByOp);
  EXPECT_EQ(plan.steps[0].group, 0);
  EXPECT_EQ(plan.steps[0].node, ln.first);
  // Its unread results (mean, rstd) are freed after it; the output is not.
  ASSERT_EQ(plan.frees.size(), 1u);
  std::vector<ValueId> freed = plan.frees[0];
  std::sort(freed.begin(), freed.end());
  EXPECT_EQ(freed, (std::vector<ValueId>{ln.mean, ln.rstd}));
  // Off: one step per live node, as before.
  lowering::Plan apart = lowering::plan_op_by_op(ln.g, lowering::PlanOptions{});
  EXPECT_TRUE(apart.layer_norms.empty());
  EXPECT_EQ(apart.steps.size(), 12u);  // its 14 nodes but the dead mean/rstd casts
}
