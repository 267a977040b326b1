// Launch shapes (lowering/launch_shape.h): chosen by plan_graph per kernel as
// the rule says, shown in the plan's text, kept through bind_plan, and part of
// the kernel keys only for a target whose code follows them (the CPU's keys and
// code never depend on them).
#include <gtest/gtest.h>

#include "lowering/kernel_jobs.h"
#include "lowering/launch_shape.h"
#include "lowering/plan.h"
#include "lowering/plan_bind.h"
#include "tests/lowering/test_support.h"

namespace lazyjit::lowering {
namespace {

using ir::Attr;
using ir::OpKind;
using test::dt;
using test::tt;

const DType f = DType::Float32;

// softmax over the last dim of x[rows, cols]: one row kernel.
ir::Graph softmax(int64_t rows, int64_t cols, DType t = f) {
  ir::Graph g;
  ValueId x = g.add_input(tt(t, {rows, cols}));
  Attr last{std::vector<int64_t>{1}};
  auto full = tt(t, {rows, cols}), row = tt(t, {rows, 1});
  ValueId m = g.add_node1(OpKind::ReduceMax, {x}, {dt(t), last}, row);
  ValueId e = g.add_node1(OpKind::Exp, {g.add_node1(OpKind::Sub, {x, m}, {dt(t)}, full)}, {dt(t)}, full);
  ValueId s = g.add_node1(OpKind::ReduceSum, {e}, {dt(t), last}, row);
  g.add_output(g.add_node1(OpKind::Div, {e, s}, {dt(t)}, full));
  return g;
}

// relu(x * y) over `sizes` of dtype t; y transposed (not contiguous) when asked.
ir::Graph chain(DType t, std::vector<int64_t> sizes, bool transposed = false) {
  ir::Graph g;
  ValueId x = g.add_input(tt(t, sizes));
  ir::TensorType yt = tt(t, sizes);
  if (transposed) yt.strides = {1, sizes[0]};
  ValueId y = g.add_input(yt);
  ValueId m = g.add_node1(OpKind::Mul, {x, y}, {dt(t)}, tt(t, sizes));
  g.add_output(g.add_node1(OpKind::Relu, {m}, {dt(t)}, tt(t, sizes)));
  return g;
}

const FusedKernel& only_kernel(const Plan& p, const ir::Graph& g) {
  EXPECT_EQ(p.kernels.size(), 1u) << p.str(g);
  return p.kernels.at(0);
}

TEST(LaunchShape, ShortRowsAreOneWarpARowLongRowsOneBlock) {
  struct Case {
    int64_t rows, cols;
    LaunchShape::Rows mode;
    int32_t block;
  };
  for (const Case& c : {Case{64, 1, LaunchShape::Rows::Warp, 128}, Case{64, 32, LaunchShape::Rows::Warp, 128},
                        Case{64, 1000, LaunchShape::Rows::Warp, 128}, Case{64, 1024, LaunchShape::Rows::Warp, 128},
                        Case{2, 100, LaunchShape::Rows::Warp, 64},  // fewer rows than 4 warps: fewer warps
                        Case{64, 1025, LaunchShape::Rows::Block, 512},   // pow2 >= 1025 / 4 = 257
                        Case{64, 5000, LaunchShape::Rows::Block, 1024},  // 1250 threads wanted, at most 1024
                        Case{64, 2048, LaunchShape::Rows::Block, 512},
                        Case{1, 1000, LaunchShape::Rows::Block, 256},    // one long row: a block, not a warp
                        Case{3, 257, LaunchShape::Rows::Block, 128}}) {
    SCOPED_TRACE(std::to_string(c.rows) + " rows of " + std::to_string(c.cols));
    ir::Graph g = softmax(c.rows, c.cols);
    Plan p = plan_graph(g);
    const FusedKernel& k = only_kernel(p, g);
    ASSERT_TRUE(k.row);
    EXPECT_EQ(k.launch.rows, c.mode);
    EXPECT_EQ(k.launch.block, c.block);
    EXPECT_EQ(k.launch.vector_width, 1);  // row kernels are not vectorized
    EXPECT_EQ(k.launch.elements_per_thread, 1);
    EXPECT_EQ(k.launch.rows_per_block(), c.mode == LaunchShape::Rows::Warp ? c.block / 32 : 1);
    EXPECT_EQ(k.launch.invalid(true), "");
  }
}

TEST(LaunchShape, ElementKernelsAreVectorizedBy16BytesWhenContiguous) {
  struct Case {
    DType t;
    std::vector<int64_t> sizes;
    bool transposed;
    int32_t vec, block;
  };
  for (const Case& c : {Case{f, {1000}, false, 4, 128}, Case{DType::Float16, {1000}, false, 8, 128},
                        Case{DType::BFloat16, {37, 5}, false, 8, 128}, Case{DType::Float64, {9}, false, 2, 128},
                        Case{f, {64, 64}, true, 1, 128},            // a transposed operand: scalar accesses
                        Case{f, {3}, false, 1, 128},                // fewer elements than one vector
                        Case{f, {1 << 20}, false, 4, 256},          // 2^18 threads
                        Case{f, {1 << 25}, false, 4, 512}}) {       // 2^23 threads
    SCOPED_TRACE(std::string(ir::dtype_name(c.t)) + (c.transposed ? " transposed" : "") + ", " +
                 std::to_string(c.sizes[0]) + " x " + std::to_string(c.sizes.size()) + " dims");
    ir::Graph g = chain(c.t, c.sizes, c.transposed);
    Plan p = plan_graph(g);
    const FusedKernel& k = only_kernel(p, g);
    EXPECT_EQ(k.launch.vector_width, c.vec);
    EXPECT_EQ(k.launch.elements_per_thread, c.vec);
    EXPECT_EQ(k.launch.block, c.block);
    EXPECT_EQ(k.launch.rows, LaunchShape::Rows::Block);
    EXPECT_EQ(k.launch.invalid(false), "");
  }
}

TEST(LaunchShape, LongChainsGetNarrowerVectorsToBoundTheCode) {
  // 100 nodes of float32: 4 copies would pass kMaxLaneNodes (256), 2 do not.
  ir::Graph g;
  ValueId x = g.add_input(tt(f, {4096}));
  ValueId v = x;
  for (int i = 0; i < 100; ++i) v = g.add_node1(OpKind::Add, {v, x}, {dt(f)}, tt(f, {4096}));
  g.add_output(v);
  PlanOptions o;
  o.max_kernel_nodes = 200;
  Plan p = plan_graph(g, o);
  EXPECT_EQ(only_kernel(p, g).launch.vector_width, 2);
}

TEST(LaunchShape, ShownInThePlanText) {
  ir::Graph g = softmax(64, 100);
  std::string s = plan_graph(g).str(g);
  EXPECT_NE(s.find("\n  launch block=128 rows=warp\n"), std::string::npos) << s;
  ir::Graph e = chain(DType::Float16, {1000});
  s = plan_graph(e).str(e);
  EXPECT_NE(s.find("\n  launch block=128 ept=8 vec=8\n"), std::string::npos) << s;
}

TEST(LaunchShape, InvalidShapesSayWhatIsWrong) {
  LaunchShape s;
  s.block = 100;
  EXPECT_NE(s.invalid(false).find("block of 100 threads"), std::string::npos);
  s = LaunchShape{};
  s.vector_width = 4;
  s.elements_per_thread = 6;
  EXPECT_NE(s.invalid(false).find("6 elements per thread"), std::string::npos);
  s.elements_per_thread = 4;
  EXPECT_EQ(s.invalid(false), "");
  EXPECT_NE(s.invalid(true).find("row kernel"), std::string::npos);
  s = LaunchShape{};
  s.rows = LaunchShape::Rows::Warp;
  EXPECT_NE(s.invalid(false).find("warp rows"), std::string::npos);
  EXPECT_EQ(s.invalid(true), "");
}

TEST(LaunchShape, BindPlanKeepsTheTracedShape) {
  // Traced with short rows (warp rows); bound at long rows, the code compiled
  // for the traced shape keeps serving: the shape is a hint, valid at any size.
  ir::Graph a = softmax(64, 100);
  Plan p = plan_graph(a);
  ir::Graph b = softmax(64, 5000);
  std::optional<Plan> bound = bind_plan(b, p);
  ASSERT_TRUE(bound);
  EXPECT_EQ(bound->kernels.at(0).launch, p.kernels.at(0).launch);
  EXPECT_NE(plan_graph(b).kernels.at(0).launch, p.kernels.at(0).launch);
}

TEST(LaunchShape, OnlyATargetFollowingShapesKeysOnThem) {
  ir::Graph g = chain(f, {1000});
  Plan p = plan_graph(g);
  Plan q = p;
  q.kernels[0].launch.block = 512;
  q.kernels[0].launch.elements_per_thread = 8;
  // The CPU's keys: the same whatever the shape.
  ASSERT_EQ(plan_kernel_keys(g, p).size(), 1u);
  EXPECT_EQ(plan_kernel_keys(g, p)[0].exact, plan_kernel_keys(g, q)[0].exact);
  EXPECT_EQ(plan_kernel_keys(g, p)[0].generic, plan_kernel_keys(g, q)[0].generic);
  EXPECT_EQ(plan_kernel_keys(g, p)[0].exact, kernel_key(g, p.kernels[0]).exact);
  // The GPU's: other shapes, other code.
  EXPECT_NE(plan_kernel_keys(g, p, true)[0].exact, plan_kernel_keys(g, q, true)[0].exact);
  EXPECT_NE(plan_kernel_keys(g, p, true)[0].generic, plan_kernel_keys(g, q, true)[0].generic);
  EXPECT_EQ(plan_kernel_keys(g, p, true)[0].generic, plan_kernel_keys(g, p, true)[0].generic);
  // Row kernels: the row mode is code; elements per thread is not (always 1).
  ir::Graph s = softmax(64, 100);
  Plan r = plan_graph(s);
  Plan w = r;
  w.kernels[0].launch.rows = LaunchShape::Rows::Block;
  EXPECT_EQ(plan_kernel_keys(s, r)[0].exact, plan_kernel_keys(s, w)[0].exact);
  EXPECT_NE(plan_kernel_keys(s, r, true)[0].exact, plan_kernel_keys(s, w, true)[0].exact);
  // The CPU target compiles once: a plan differing only in its shapes finds
  // every kernel compiled.
  test::target().clear_kernels();
  auto first = test::target().compile(g, p);
  auto again = test::target().compile(g, q);
  EXPECT_EQ(first->llvm_compiles, 1);
  EXPECT_EQ(again->llvm_compiles, 0);
  EXPECT_EQ(again->kernel_hits, 1);
}

}  // namespace
}  // namespace lazyjit::lowering
