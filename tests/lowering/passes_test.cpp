// Graph passes (IR in, IR out) and the buffer plan. A rewritten graph is checked
// against the graph the pass should produce, written out by hand: equal
// structure and shape hashes mean the same ops, wiring, attributes and types.
#include <gtest/gtest.h>

#include "lowering/passes.h"
#include "lowering/plan.h"

using namespace lazyjit;
using namespace lazyjit::ir;
using lowering::Step;

namespace {
TensorType ty(DType t, std::vector<int64_t> s) { return TensorType{t, s, contiguous_strides(s)}; }
TensorType f32(std::vector<int64_t> s) { return ty(DType::Float32, s); }
Attr dt(DType t = DType::Float32) { return Attr{static_cast<int64_t>(t)}; }
Attr dims(std::vector<int64_t> v) { return Attr{v, true}; }
Attr offset(int64_t v) { return Attr{v, true}; }

void expect_same_graph(const Graph& got, const Graph& want) {
  EXPECT_EQ(got.verify(), "");
  EXPECT_EQ(got.str(), want.str());
  EXPECT_EQ(got.hashes(), want.hashes()) << got.str();
}

ValueId mm(Graph& g, ValueId a, ValueId b, TensorType t) {
  return g.add_node(OpKind::Aten, {a, b}, {{std::string("aten::mm")}, {OperandRef{0}}, {OperandRef{1}}}, {t})[0];
}
}  // namespace

TEST(Passes, DeadCodeGoesInputsAndScalarsKeepTheirNumbers) {
  Graph g;
  ValueId x = g.add_input(f32({4}));
  ValueId unused_in = g.add_input(f32({4}));
  ValueId s = g.add_scalar(DType::Float64);
  g.add_node1(OpKind::Exp, {unused_in}, {dt()}, f32({4}));  // dead
  ValueId y = g.add_node1(OpKind::Mul, {x, s}, {dt()}, f32({4}));
  g.add_output(y);

  Graph want;
  ValueId wx = want.add_input(f32({4}));
  want.add_input(f32({4}));
  ValueId ws = want.add_scalar(DType::Float64);
  want.add_output(want.add_node1(OpKind::Mul, {wx, ws}, {dt()}, f32({4})));
  expect_same_graph(lowering::eliminate_dead_code(g), want);
}

TEST(Passes, CommonSubexpressionsMergeIncludingLibrarySteps) {
  Graph g;
  ValueId x = g.add_input(f32({4, 4}));
  ValueId s = g.add_scalar(DType::Float64);
  ValueId a1 = g.add_node1(OpKind::Mul, {x, s}, {dt()}, f32({4, 4}));
  ValueId a2 = g.add_node1(OpKind::Mul, {x, s}, {dt()}, f32({4, 4}));
  ValueId t1 = g.add_node1(OpKind::Tanh, {a1}, {dt()}, f32({4, 4}));
  ValueId t2 = g.add_node1(OpKind::Tanh, {a2}, {dt()}, f32({4, 4}));  // same once a2 == a1
  ValueId m1 = mm(g, t1, x, f32({4, 4}));
  ValueId m2 = mm(g, t2, x, f32({4, 4}));
  ValueId sum = g.add_node1(OpKind::Add, {m1, m2}, {dt()}, f32({4, 4}));
  g.add_output(sum);
  g.add_output(m2);

  Graph want;
  ValueId wx = want.add_input(f32({4, 4}));
  ValueId ws = want.add_scalar(DType::Float64);
  ValueId wa = want.add_node1(OpKind::Mul, {wx, ws}, {dt()}, f32({4, 4}));
  ValueId wt = want.add_node1(OpKind::Tanh, {wa}, {dt()}, f32({4, 4}));
  ValueId wm = mm(want, wt, wx, f32({4, 4}));
  want.add_output(want.add_node1(OpKind::Add, {wm, wm}, {dt()}, f32({4, 4})));
  want.add_output(wm);
  expect_same_graph(lowering::eliminate_common_subexpressions(g), want);
}

TEST(Passes, CseKeepsNodesThatDifferInAttributesTypesOrArguments) {
  Graph g;
  ValueId x = g.add_input(f32({4}));
  ValueId s1 = g.add_scalar(DType::Float64);
  ValueId s2 = g.add_scalar(DType::Float64);  // same kind, another argument
  g.add_output(g.add_node1(OpKind::Mul, {x, s1}, {dt()}, f32({4})));
  g.add_output(g.add_node1(OpKind::Mul, {x, s2}, {dt()}, f32({4})));
  g.add_output(g.add_node1(OpKind::Mul, {x, s1}, {dt(DType::Float64)}, f32({4})));  // compute dtype
  g.add_output(g.add_node1(OpKind::Mul, {x, s1}, {dt()}, ty(DType::Float64, {4})));  // result dtype
  g.add_output(g.add_node1(OpKind::Sub, {x, s1}, {dt()}, f32({4})));
  g.add_output(g.add_node1(OpKind::Sub, {s1, x}, {dt()}, f32({4})));  // operand order
  g.add_output(g.add_node1(OpKind::AsStrided, {x}, {dims({2}), dims({1}), offset(0)}, f32({2})));
  g.add_output(g.add_node1(OpKind::AsStrided, {x}, {dims({2}), dims({1}), offset(2)}, f32({2})));
  Graph out = lowering::eliminate_common_subexpressions(g);
  EXPECT_EQ(out.nodes().size(), g.nodes().size()) << out.str();
  EXPECT_EQ(out.str(), g.str());
}

TEST(Passes, FoldRemovesIdentityCastsRoundTripsAndInvolutions) {
  Graph g;
  ValueId x = g.add_input(ty(DType::BFloat16, {8}));
  ValueId c = g.add_input(ty(DType::Bool, {8}));
  ValueId same = g.add_node1(OpKind::Cast, {x}, {dt(DType::Float32)}, ty(DType::BFloat16, {8}));
  ValueId up = g.add_node1(OpKind::Cast, {same}, {dt(DType::Float32)}, f32({8}));
  ValueId down = g.add_node1(OpKind::Cast, {up}, {dt(DType::Float32)}, ty(DType::BFloat16, {8}));
  ValueId n1 = g.add_node1(OpKind::Neg, {down}, {dt(DType::BFloat16)}, ty(DType::BFloat16, {8}));
  ValueId n2 = g.add_node1(OpKind::Neg, {n1}, {dt(DType::BFloat16)}, ty(DType::BFloat16, {8}));
  ValueId w = g.add_node1(OpKind::Where, {c, n2, n2}, {dt(DType::BFloat16)}, ty(DType::BFloat16, {8}));
  ValueId mx = g.add_node1(OpKind::Maximum, {w, w}, {dt(DType::BFloat16)}, ty(DType::BFloat16, {8}));
  ValueId v = g.add_node1(OpKind::AsStrided, {mx}, {dims({8}), dims({1}), offset(0)}, ty(DType::BFloat16, {8}));
  ValueId nn1 = g.add_node1(OpKind::LogicalNot, {c}, {dt(DType::Bool)}, ty(DType::Bool, {8}));
  ValueId nn2 = g.add_node1(OpKind::LogicalNot, {nn1}, {dt(DType::Bool)}, ty(DType::Bool, {8}));
  g.add_output(v);
  g.add_output(nn2);

  Graph folded = lowering::eliminate_dead_code(lowering::fold_constants(g));
  Graph want;
  ValueId wx = want.add_input(ty(DType::BFloat16, {8}));
  ValueId wc = want.add_input(ty(DType::Bool, {8}));
  want.add_output(wx);
  want.add_output(wc);
  expect_same_graph(folded, want);
}

// decode's q is [1, 8, 1, 64] transposed from [1, 1, 8, 64]: a result laid out
// like it reads back through strides that differ only at its size-1 dims.
TEST(Passes, FoldRemovesViewsThatRelabelOnlySizeOneStrides) {
  Graph g;
  ValueId x = g.add_input(f32({1, 8, 1, 64}));
  ValueId y = g.add_node1(OpKind::Exp, {x}, {dt()}, f32({1, 8, 1, 64}));
  ValueId v = g.add_node1(OpKind::AsStrided, {y}, {dims({1, 8, 1, 64}), dims({512, 64, 512, 1}), offset(0)},
                          f32({1, 8, 1, 64}));
  g.add_output(g.add_node1(OpKind::Add, {v, x}, {dt()}, f32({1, 8, 1, 64})));
  Graph folded = lowering::eliminate_dead_code(lowering::fold_constants(g));
  Graph want;
  ValueId wx = want.add_input(f32({1, 8, 1, 64}));
  ValueId wy = want.add_node1(OpKind::Exp, {wx}, {dt()}, f32({1, 8, 1, 64}));
  want.add_output(want.add_node1(OpKind::Add, {wy, wx}, {dt()}, f32({1, 8, 1, 64})));
  expect_same_graph(folded, want);
  // So the add joins exp's kernel, which a view of a value made in the kernel
  // would keep out.
  EXPECT_EQ(lowering::plan_graph(folded).kernels.size(), 1u);
  EXPECT_EQ(lowering::plan_graph(g).kernels.size(), 2u);
}

TEST(Passes, FoldKeepsWhatChangesValuesOrLayouts) {
  Graph g;
  ValueId x = g.add_input(f32({2, 3}));
  ValueId i = g.add_input(ty(DType::Int64, {6}));
  ValueId s = g.add_scalar(DType::Float64);
  // f32 -> f16 -> f32 rounds; int64 -> f64 -> int64 loses bits above 2^53.
  ValueId h = g.add_node1(OpKind::Cast, {x}, {dt(DType::Float16)}, ty(DType::Float16, {2, 3}));
  g.add_output(g.add_node1(OpKind::Cast, {h}, {dt(DType::Float32)}, f32({2, 3})));
  ValueId d = g.add_node1(OpKind::Cast, {i}, {dt(DType::Float64)}, ty(DType::Float64, {6}));
  g.add_output(g.add_node1(OpKind::Cast, {d}, {dt(DType::Int64)}, ty(DType::Int64, {6})));
  // A cast computed in a narrower type rounds even when in and out match.
  g.add_output(g.add_node1(OpKind::Cast, {x}, {dt(DType::BFloat16)}, f32({2, 3})));
  // A transposing view, a view with an offset, and a layout change.
  g.add_output(g.add_node1(OpKind::AsStrided, {x}, {dims({3, 2}), dims({1, 3}), offset(0)}, f32({3, 2})));
  g.add_output(g.add_node1(OpKind::AsStrided, {x}, {dims({3}), dims({1}), offset(3)}, f32({3})));
  g.add_output(g.add_node1(OpKind::Cast, {x}, {dt()}, TensorType{DType::Float32, {2, 3}, {1, 2}}));
  // Strides that differ at a dim longer than 1 (a broadcast of a row).
  g.add_output(g.add_node1(OpKind::AsStrided, {x}, {dims({2, 3}), dims({0, 1}), offset(0)}, f32({2, 3})));
  // neg(neg(x)) in a narrower compute type rounds; max(x, x) computed in f64 is a cast.
  ValueId n1 = g.add_node1(OpKind::Neg, {x}, {dt(DType::BFloat16)}, f32({2, 3}));
  g.add_output(g.add_node1(OpKind::Neg, {n1}, {dt(DType::BFloat16)}, f32({2, 3})));
  g.add_output(g.add_node1(OpKind::Maximum, {x, x}, {dt(DType::Float64)}, ty(DType::Float64, {2, 3})));
  // A scalar argument is not a buffer: its cast stays a node.
  g.add_output(g.add_node1(OpKind::Cast, {s}, {dt(DType::Float64)}, ty(DType::Float64, {})));
  Graph out = lowering::fold_constants(g);
  EXPECT_EQ(out.str(), g.str());
}

TEST(Passes, PipelineRunsByNameAndSkipsDisabledPasses) {
  auto make = [] {
    Graph g;
    ValueId x = g.add_input(f32({4}));
    ValueId a = g.add_node1(OpKind::Exp, {x}, {dt()}, f32({4}));
    ValueId b = g.add_node1(OpKind::Exp, {x}, {dt()}, f32({4}));
    ValueId c = g.add_node1(OpKind::Cast, {a}, {dt()}, f32({4}));
    g.add_output(g.add_node1(OpKind::Add, {c, b}, {dt()}, f32({4})));
    return g;
  };
  std::vector<std::string> ran;
  Graph all = lowering::run_graph_passes(make(), {}, [&](const std::string& p, const Graph& out) {
    ran.push_back(p);
    EXPECT_EQ(out.verify(), "");
  });
  EXPECT_EQ(ran, (std::vector<std::string>{"dce", "fold", "cse", "dce", "gemm_epilogue"}));
  EXPECT_EQ(all.nodes().size(), 3u) << all.str();  // input, exp, add(exp, exp)

  Graph no_cse = lowering::run_graph_passes(make(), {"cse"});
  EXPECT_EQ(no_cse.nodes().size(), 4u) << no_cse.str();  // the cast folded, both exps kept
  Graph none = lowering::run_graph_passes(make(), {"dce", "fold", "cse"});
  EXPECT_EQ(none.str(), make().str());
}

TEST(BufferPlan, ResultsAreReleasedAfterTheirLastReader) {
  // kernel -> mm -> kernel -> mm -> kernel: each intermediate dies two steps on.
  Graph g;
  ValueId x = g.add_input(f32({64, 64}));
  ValueId a = g.add_node1(OpKind::Relu, {x}, {dt()}, f32({64, 64}));
  ValueId m1 = mm(g, a, x, f32({64, 64}));
  ValueId b = g.add_node1(OpKind::Tanh, {m1}, {dt()}, f32({64, 64}));
  ValueId m2 = mm(g, b, x, f32({64, 64}));
  ValueId c = g.add_node1(OpKind::Exp, {m2}, {dt()}, f32({64, 64}));
  g.add_output(c);
  auto plan = lowering::plan_graph(g);
  ASSERT_EQ(plan.steps.size(), 5u) << plan.str(g);
  ASSERT_EQ(plan.frees.size(), 5u);
  EXPECT_EQ(plan.frees[0], std::vector<ValueId>{});
  EXPECT_EQ(plan.frees[1], std::vector<ValueId>{a});
  EXPECT_EQ(plan.frees[2], std::vector<ValueId>{m1});
  EXPECT_EQ(plan.frees[3], std::vector<ValueId>{b});
  EXPECT_EQ(plan.frees[4], std::vector<ValueId>{m2});  // the output c is never freed
  const int64_t one = 64 * 64 * 4;
  EXPECT_EQ(plan.result_bytes, 5 * one);
  EXPECT_EQ(plan.planned_peak_bytes, 2 * one);
  EXPECT_NE(plan.str(g).find("free %" + std::to_string(a)), std::string::npos) << plan.str(g);

  lowering::PlanOptions off;
  off.buffers = false;
  EXPECT_TRUE(lowering::plan_graph(g, off).frees.empty());
}

TEST(BufferPlan, ViewsKeepTheirBaseAndOutputsAreNeverFreed) {
  Graph g;
  ValueId x = g.add_input(f32({8, 8}));
  ValueId a = g.add_node1(OpKind::Relu, {x}, {dt()}, f32({8, 8}));
  ValueId m = mm(g, a, x, f32({8, 8}));
  // A transposed view of m read by a library step: materialized as a view step.
  ValueId t = g.add_node1(OpKind::AsStrided, {m}, {dims({8, 8}), dims({1, 8}), offset(0)},
                          TensorType{DType::Float32, {8, 8}, {1, 8}});
  ValueId m2 = mm(g, t, x, f32({8, 8}));
  ValueId m3 = mm(g, m2, x, f32({8, 8}));
  g.add_output(m3);
  g.add_output(t);  // the view is an output: its base m must stay
  auto plan = lowering::plan_graph(g);
  std::vector<ValueId> freed;
  for (const auto& f : plan.frees) freed.insert(freed.end(), f.begin(), f.end());
  EXPECT_EQ(std::count(freed.begin(), freed.end(), m), 0) << plan.str(g);
  EXPECT_EQ(std::count(freed.begin(), freed.end(), t), 0) << plan.str(g);
  EXPECT_EQ(std::count(freed.begin(), freed.end(), m3), 0) << plan.str(g);
  EXPECT_EQ(std::count(freed.begin(), freed.end(), m2), 1) << plan.str(g);
  EXPECT_EQ(std::count(freed.begin(), freed.end(), a), 1) << plan.str(g);
}
