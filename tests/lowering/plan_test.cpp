// plan_graph: which steps a graph becomes, IR in, plan out.
#include <gtest/gtest.h>

#include "lowering/plan.h"

using namespace lazyjit;
using namespace lazyjit::ir;
using lowering::ColLoop;
using lowering::RowStep;
using lowering::Step;

namespace {
TensorType f32(std::vector<int64_t> s) { return TensorType{DType::Float32, s, contiguous_strides(s)}; }
Attr dt() { return Attr{static_cast<int64_t>(DType::Float32)}; }
Attr shape(std::vector<int64_t> v) { return Attr{v, true}; }
Attr shape(int64_t v) { return Attr{v, true}; }

// Row kernels over [rows, cols] reducing the cols, in the shape the tracer
// records them: reductions to [rows, 1], row-space and full-space elementwise.
struct Rows {
  Graph g;
  int64_t rows, cols;
  std::vector<int64_t> full() const { return {rows, cols}; }
  ValueId input() { return g.add_input(f32(full())); }
  ValueId full_op(OpKind op, std::vector<ValueId> in) { return g.add_node1(op, std::move(in), {dt()}, f32(full())); }
  ValueId row_op(OpKind op, std::vector<ValueId> in) { return g.add_node1(op, std::move(in), {dt()}, f32({rows, 1})); }
  ValueId reduce(OpKind op, ValueId x) {
    return g.add_node1(op, {x}, {dt(), Attr{std::vector<int64_t>{1}}}, f32({rows, 1}));
  }
  // softmax(x) = e / sum(e) with e = exp(x - max(x)); nodes #0 max, #1 sub,
  // #2 exp, #3 sum, #4 div.
  ValueId softmax(ValueId x) {
    ValueId e = full_op(OpKind::Exp, {full_op(OpKind::Sub, {x, reduce(OpKind::ReduceMax, x)})});
    return full_op(OpKind::Div, {e, reduce(OpKind::ReduceSum, e)});
  }
  const lowering::FusedKernel& only_kernel(const lowering::Plan& p) {
    EXPECT_EQ(p.kernels.size(), 1u);
    EXPECT_TRUE(p.kernels.at(0).row);
    return p.kernels.at(0);
  }
};

using Positions = std::vector<int32_t>;
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

namespace {
ValueId mm(Graph& g, ValueId a, ValueId b, std::vector<int64_t> out) {
  return g.add_node(OpKind::Aten, {a, b}, {{std::string("aten::mm")}, {OperandRef{0}}, {OperandRef{1}}},
                    {f32(std::move(out))})[0];
}
}  // namespace

// silu(x @ wg) * (x @ wu): silu's kernel moves after the second GEMM and the
// product joins it, so silu's result is never stored.
TEST(Plan, AKernelMovesPastALaterLibraryStepItsConsumerNeeds) {
  Graph g;
  ValueId x = g.add_input(f32({4, 8})), wg = g.add_input(f32({8, 16})), wu = g.add_input(f32({8, 16}));
  ValueId gate = mm(g, x, wg, {4, 16});
  ValueId act = g.add_node1(OpKind::Silu, {gate}, {dt()}, f32({4, 16}));
  ValueId up = mm(g, x, wu, {4, 16});
  ValueId y = g.add_node1(OpKind::Mul, {act, up}, {dt()}, f32({4, 16}));
  g.add_output(y);
  auto plan = lowering::plan_graph(g);
  ASSERT_EQ(plan.steps.size(), 3u);
  EXPECT_EQ(plan.steps[0].kind, Step::Kind::Aten);
  EXPECT_EQ(plan.steps[1].kind, Step::Kind::Aten);
  ASSERT_EQ(plan.steps[2].kind, Step::Kind::Kernel);
  ASSERT_EQ(plan.kernels.size(), 1u);
  EXPECT_EQ(plan.kernels[0].nodes.size(), 2u);
  EXPECT_EQ(plan.kernels[0].stores, std::vector<ValueId>{y});
  // Buffers follow the final order: each GEMM's result is freed by the kernel.
  ASSERT_EQ(plan.frees.size(), 3u);
  EXPECT_TRUE(plan.frees[0].empty());
  EXPECT_TRUE(plan.frees[1].empty());
  EXPECT_EQ(plan.frees[2].size(), 2u);
}

// A step between the kernel and the node that reads the kernel's result (here
// the second GEMM reads silu's) keeps the kernel where it is.
TEST(Plan, AKernelStaysWhenALaterStepReadsIt) {
  Graph g;
  ValueId x = g.add_input(f32({4, 4})), w = g.add_input(f32({4, 4}));
  ValueId gate = mm(g, x, w, {4, 4});
  ValueId act = g.add_node1(OpKind::Silu, {gate}, {dt()}, f32({4, 4}));
  ValueId up = mm(g, act, w, {4, 4});
  ValueId y = g.add_node1(OpKind::Mul, {act, up}, {dt()}, f32({4, 4}));
  g.add_output(y);
  auto plan = lowering::plan_graph(g);
  ASSERT_EQ(plan.steps.size(), 4u);
  EXPECT_EQ(plan.steps[1].kind, Step::Kind::Kernel);
  EXPECT_EQ(plan.steps[2].kind, Step::Kind::Aten);
  EXPECT_EQ(plan.steps[3].kind, Step::Kind::Kernel);
  EXPECT_EQ(plan.kernels.at(plan.steps[1].kernel).stores, std::vector<ValueId>{act});
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

// LLVM's optimizer is superlinear in one function's size: a 1,000-op chain
// fused into one kernel compiled in 6 s, in kernels of 64 nodes in 2.2 s (and
// a 4,000-op chain in 9.8 s instead of minutes). The plan bounds each kernel.
TEST(Plan, LongChainsAreSplitIntoKernelsOfBoundedSize) {
  Graph g;
  ValueId x = g.add_input(f32({8, 16}));
  ValueId y = x;
  for (int i = 0; i < 1000; ++i) y = g.add_node1(i % 2 ? OpKind::Tanh : OpKind::Neg, {y}, {dt()}, f32({8, 16}));
  g.add_output(y);
  for (int32_t cap : {64, 7}) {
    lowering::PlanOptions o;
    o.max_kernel_nodes = cap;
    auto plan = lowering::plan_graph(g, o);
    EXPECT_EQ(plan.kernels.size(), static_cast<size_t>((1000 + cap - 1) / cap));
    size_t total = 0;
    for (const auto& k : plan.kernels) {
      EXPECT_LE(k.nodes.size(), static_cast<size_t>(cap));
      total += k.nodes.size();
    }
    EXPECT_EQ(total, 1000u);
  }
}

TEST(RowSchedule, SoftmaxKeepsExpInScratchAndRunsThreeColLoops) {
  Rows r{{}, 4, 8};
  ValueId x = r.input();
  ValueId y = r.softmax(x);
  r.g.add_output(y);
  auto plan = lowering::plan_graph(r.g);
  const auto& s = r.only_kernel(plan).schedule;
  EXPECT_EQ(s.scratch, Positions{2});  // exp(x - max): made for the sum, read for the output
  ASSERT_EQ(s.steps.size(), 3u);
  EXPECT_EQ(s.steps[0].kind, RowStep::Kind::Reduce);  // max reads x, computes nothing
  EXPECT_EQ(s.steps[0].node, 0);
  ASSERT_TRUE(s.steps[0].cols);
  EXPECT_EQ(s.steps[0].cols->compute, Positions{});
  EXPECT_EQ(s.steps[1].kind, RowStep::Kind::Reduce);  // sum computes x - max and exp, keeps exp
  EXPECT_EQ(s.steps[1].node, 3);
  ASSERT_TRUE(s.steps[1].cols);
  EXPECT_EQ(s.steps[1].cols->compute, (Positions{1, 2}));
  EXPECT_EQ(s.steps[1].cols->keep, Positions{2});
  EXPECT_EQ(s.steps[1].cols->reload, Positions{});
  EXPECT_EQ(s.steps[2].kind, RowStep::Kind::StoreCols);  // the output reads exp back
  ASSERT_TRUE(s.steps[2].cols);
  EXPECT_EQ(s.steps[2].cols->reload, Positions{2});
  EXPECT_EQ(s.steps[2].cols->compute, Positions{4});
  EXPECT_EQ(s.steps[2].stores, Positions{0});
  EXPECT_EQ(plan.str(r.g),
            "fused_0 sizes=[4,8] reduce_rank=1 nodes=5 loads=%0 stores=%5 \n"
            "  launch block=128 rows=warp\n"
            "  scratch #2:exp\n"
            "  cols -> reduce #0:reduce_max\n"
            "  cols compute #1:sub #2:exp keep #2:exp -> reduce #3:reduce_sum\n"
            "  cols reload #2:exp compute #4:div -> store %5\n"
            "buffers: peak 128 bytes of 128 made\n");
}

// mean = sum(x) * (1/N); d = x - mean; rstd = rsqrt(sum(d * d) * (1/N) + eps);
// y = d * rstd. Outputs y, mean and rstd.
TEST(RowSchedule, LayerNormKeepsTheCenteredRowAndStoresRowValuesOncePerRow) {
  Rows r{{}, 3, 16};
  ValueId x = r.input();
  ValueId inv_n = r.g.add_scalar(DType::Float64);
  ValueId eps = r.g.add_scalar(DType::Float64);
  ValueId mean = r.row_op(OpKind::Mul, {r.reduce(OpKind::ReduceSum, x), inv_n});    // #0 #1
  ValueId d = r.full_op(OpKind::Sub, {x, mean});                                    // #2
  ValueId var = r.row_op(OpKind::Mul, {r.reduce(OpKind::ReduceSum, r.full_op(OpKind::Mul, {d, d})), inv_n});
  ValueId rstd = r.row_op(OpKind::Rsqrt, {r.row_op(OpKind::Add, {var, eps})});      // #6 #7
  ValueId y = r.full_op(OpKind::Mul, {d, rstd});                                    // #8
  r.g.add_output(y);
  r.g.add_output(mean);
  r.g.add_output(rstd);
  auto plan = lowering::plan_graph(r.g);
  const auto& k = r.only_kernel(plan);
  EXPECT_EQ(k.stores, (std::vector<ValueId>{mean, rstd, y}));
  const auto& s = k.schedule;
  EXPECT_EQ(s.scratch, Positions{2});
  std::vector<RowStep::Kind> kinds;
  for (const RowStep& st : s.steps) kinds.push_back(st.kind);
  using K = RowStep::Kind;
  EXPECT_EQ(kinds, (std::vector<K>{K::Reduce, K::Node, K::Reduce, K::Node, K::Node, K::Node,
                                   K::StoreRows, K::StoreCols}));
  ASSERT_TRUE(s.steps[2].cols);
  EXPECT_EQ(s.steps[2].cols->compute, (Positions{2, 3}));
  EXPECT_EQ(s.steps[2].cols->keep, Positions{2});
  EXPECT_EQ(s.steps[6].stores, (Positions{0, 1}));  // mean and rstd: one element per row
  ASSERT_TRUE(s.steps[7].cols);
  EXPECT_EQ(s.steps[7].cols->reload, Positions{2});
  EXPECT_EQ(s.steps[7].cols->compute, Positions{8});
  EXPECT_EQ(s.steps[7].stores, Positions{2});
}

TEST(RowSchedule, RowsPastTheScratchBudgetRecompute) {
  // 8 bytes a col per kept node: 8192 cols fill kRowScratchBytes exactly.
  ASSERT_EQ(lowering::kRowScratchBytes, 8192 * 8);
  for (int64_t cols : {8192, 8193}) {
    Rows r{{}, 2, cols};
    r.g.add_output(r.softmax(r.input()));
    auto plan = lowering::plan_graph(r.g);
    const auto& s = r.only_kernel(plan).schedule;
    ASSERT_EQ(s.steps.size(), 3u);
    ASSERT_TRUE(s.steps[2].cols);
    if (cols == 8192) {
      EXPECT_EQ(s.scratch, Positions{2});
      EXPECT_EQ(s.steps[2].cols->compute, Positions{4});
    } else {
      EXPECT_EQ(s.scratch, Positions{});
      EXPECT_EQ(s.steps[1].cols->keep, Positions{});
      EXPECT_EQ(s.steps[2].cols->reload, Positions{});
      EXPECT_EQ(s.steps[2].cols->compute, (Positions{1, 2, 4}));  // x - max and exp again
    }
  }
}

// Float sums over rows longer than kSumBlockCols run in blocks (the max, an
// exact operation, does not); the dump says so.
TEST(RowSchedule, LongFloatSumsRunInBlocks) {
  const int64_t long_row = lowering::kSumBlockCols + 1;
  for (int64_t cols : {lowering::kSumBlockCols, long_row}) {
    Rows r{{}, 2, cols};
    r.g.add_output(r.softmax(r.input()));
    auto plan = lowering::plan_graph(r.g);
    const auto& s = r.only_kernel(plan).schedule;
    ASSERT_EQ(s.steps.size(), 3u);
    EXPECT_FALSE(s.steps[0].blocks);  // max
    EXPECT_EQ(s.steps[1].blocks.has_value(), cols == long_row);
    if (cols == long_row) {
      EXPECT_EQ(s.steps[1].blocks->dim, 1);
      EXPECT_EQ(s.steps[1].blocks->chunk, lowering::kSumBlockCols);
      EXPECT_NE(plan.str(r.g).find("-> reduce #3:reduce_sum in blocks of 4096 along d1\n"), std::string::npos)
          << plan.str(r.g);
    }
  }
}

// A block is whole inner col dims times a chunk of the first dim that passes
// the limit; integer sums are exact and never blocked.
TEST(RowSchedule, SumBlocksSpanInnerColDims) {
  Graph g;
  ValueId x = g.add_input(f32({3, 2, 5000}));  // viewed as [2, 5000, 3]: no col dims merge
  ValueId v = g.add_node1(OpKind::AsStrided, {x}, {Attr{std::vector<int64_t>{2, 5000, 3}, true},
                                                  Attr{std::vector<int64_t>{5000, 1, 10000}, true},
                                                  Attr{int64_t{0}, true}},
                          f32({2, 5000, 3}));
  ValueId sum = g.add_node1(OpKind::ReduceSum, {v}, {dt(), Attr{std::vector<int64_t>{1, 2}}}, f32({2, 1, 1}));
  ValueId vi = g.add_node1(OpKind::Cast, {v}, {Attr{static_cast<int64_t>(DType::Int64)}},
                           {DType::Int64, {2, 5000, 3}, ir::contiguous_strides({2, 5000, 3})});
  ValueId isum = g.add_node1(OpKind::ReduceSum, {vi}, {Attr{static_cast<int64_t>(DType::Int64)},
                                                       Attr{std::vector<int64_t>{1, 2}}},
                             {DType::Int64, {2, 1, 1}, ir::contiguous_strides({2, 1, 1})});
  g.add_output(sum);
  g.add_output(isum);
  ASSERT_EQ(g.verify(), "");
  auto plan = lowering::plan_graph(g);
  ASSERT_EQ(plan.kernels.size(), 1u) << plan.str(g);
  const auto& k = plan.kernels[0];
  EXPECT_EQ(k.sizes, (std::vector<int64_t>{2, 5000, 3}));
  std::vector<const RowStep*> reduces;
  for (const RowStep& st : k.schedule.steps)
    if (st.kind == RowStep::Kind::Reduce) reduces.push_back(&st);
  ASSERT_EQ(reduces.size(), 2u);
  ASSERT_TRUE(reduces[0]->blocks);
  EXPECT_EQ(reduces[0]->blocks->dim, 1);
  EXPECT_EQ(reduces[0]->blocks->chunk, lowering::kSumBlockCols / 3);
  EXPECT_FALSE(reduces[1]->blocks);
}

TEST(RowSchedule, EmptyRowsRunNoColLoops) {
  Rows r{{}, 3, 0};
  ValueId x = r.input();
  ValueId m = r.reduce(OpKind::ReduceSum, x);
  ValueId y = r.full_op(OpKind::Sub, {x, m});
  r.g.add_output(y);
  r.g.add_output(m);
  auto plan = lowering::plan_graph(r.g);
  const auto& s = r.only_kernel(plan).schedule;
  EXPECT_EQ(s.scratch, Positions{});
  ASSERT_EQ(s.steps.size(), 2u);  // the sum is its identity; no loop writes the empty y
  EXPECT_EQ(s.steps[0].kind, RowStep::Kind::Reduce);
  EXPECT_FALSE(s.steps[0].cols);
  EXPECT_EQ(s.steps[1].kind, RowStep::Kind::StoreRows);
}

// A Cat joins the kernel of its consumers; its pieces are its operands' extents
// along the cat dim, which coalescing never merges with a neighbour (here the
// operands' rows are contiguous with their cols, yet [2, 3] merge and 9 stays).
TEST(Plan, CatJoinsItsConsumersKernelAndKeepsItsDimApart) {
  Graph g;
  ValueId a = g.add_input(f32({2, 3, 4}));
  ValueId big = g.add_input(f32({2, 3, 10}));
  ValueId b = g.add_node1(OpKind::AsStrided, {big}, {shape({2, 3, 5}), shape({30, 10, 1}), shape(5)}, f32({2, 3, 5}));
  ValueId c = g.add_node1(OpKind::Cat, {a, b}, {dt(), Attr{int64_t{2}}}, f32({2, 3, 9}));
  ValueId y = g.add_node1(OpKind::Exp, {c}, {dt()}, f32({2, 3, 9}));
  g.add_output(y);
  ASSERT_EQ(g.verify(), "");
  auto plan = lowering::plan_graph(g);
  ASSERT_EQ(plan.kernels.size(), 1u) << plan.str(g);
  const auto& k = plan.kernels[0];
  EXPECT_EQ(k.sizes, (std::vector<int64_t>{6, 9}));
  EXPECT_EQ(k.cat_dim, 1);
  EXPECT_EQ(k.cat_ends, (std::vector<int64_t>{4, 9}));
  ASSERT_EQ(k.loads.size(), 2u);
  EXPECT_EQ(k.loads[0].piece, 0);
  EXPECT_EQ(k.loads[0].strides, (std::vector<int64_t>{4, 1}));
  EXPECT_EQ(k.loads[0].offset, 0);
  EXPECT_EQ(k.loads[1].piece, 1);
  EXPECT_EQ(k.loads[1].value, big);  // the folded view's base
  EXPECT_EQ(k.loads[1].strides, (std::vector<int64_t>{10, 1}));
  EXPECT_EQ(k.loads[1].offset, 5 - 4);  // the view's offset, shifted back by piece 1's start
  EXPECT_EQ(k.stores, std::vector<ValueId>{y});
}

TEST(Plan, CatsOfOtherPiecesOrAReductionTakeAKernelOfTheirOwn) {
  Graph g;
  ValueId a = g.add_input(f32({4, 3}));
  ValueId b = g.add_input(f32({4, 3}));
  ValueId c = g.add_input(f32({4, 2}));
  ValueId d = g.add_input(f32({4, 4}));
  auto cat = [&](std::vector<ValueId> in) { return g.add_node1(OpKind::Cat, in, {dt(), Attr{int64_t{1}}}, f32({4, 6})); };
  ValueId x = cat({a, b});
  ValueId same = g.add_node1(OpKind::Mul, {x, cat({b, a})}, {dt()}, f32({4, 6}));  // same pieces: one kernel
  ValueId other = g.add_node1(OpKind::Add, {same, cat({c, d})}, {dt()}, f32({4, 6}));  // pieces 2, 4
  ValueId sum = g.add_node1(OpKind::ReduceSum, {other}, {dt(), Attr{std::vector<int64_t>{1}}}, f32({4, 1}));
  g.add_output(sum);
  ASSERT_EQ(g.verify(), "");
  auto plan = lowering::plan_graph(g);
  ASSERT_EQ(plan.kernels.size(), 3u) << plan.str(g);
  EXPECT_EQ(plan.kernels[0].nodes.size(), 3u) << plan.str(g);
  EXPECT_EQ(plan.kernels[0].cat_ends, (std::vector<int64_t>{3, 6}));
  EXPECT_EQ(plan.kernels[0].loads.size(), 4u);  // a and b, once per piece each
  EXPECT_EQ(plan.kernels[1].cat_ends, (std::vector<int64_t>{2, 6}));
  EXPECT_TRUE(plan.kernels[2].row);
  EXPECT_EQ(plan.kernels[2].cat_dim, -1);
}
