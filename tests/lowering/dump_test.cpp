// What the dumps of LAZYJIT_DUMP / LAZYJIT_DEBUG>=2 are made of, below the
// runtime: the plan as DOT (plan_dot.h) and the kernels' assembly
// (CodegenOptions::keep_asm).
#include <gtest/gtest.h>

#include "tests/text_count.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>

#include <unistd.h>

#include "lowering/plan_dot.h"
#include "test_support.h"
#include "targets/cpu/cpu_target.h"

using namespace lazyjit;
using namespace lazyjit::ir;
using namespace lazyjit::lowering;
using lowering::test::dt;
using lowering::test::tt;

namespace {

// exp(x) * 2 + y (one kernel), mm through ATen, then softmax's row kernel.
Graph build() {
  const DType f = DType::Float32;
  Graph g;
  ValueId x = g.add_input(tt(f, {16, 32}));
  ValueId y = g.add_input(tt(f, {16, 32}));
  ValueId w = g.add_input(tt(f, {32, 32}));
  ValueId s = g.add_scalar(DType::Float64);
  ValueId e = g.add_node1(OpKind::Exp, {x}, {dt(f)}, tt(f, {16, 32}));
  ValueId es = g.add_node1(OpKind::Mul, {e, s}, {dt(f)}, tt(f, {16, 32}));
  ValueId a = g.add_node1(OpKind::Add, {es, y}, {dt(f)}, tt(f, {16, 32}));
  ValueId mm = g.add_node1(OpKind::Aten, {a, w}, {Attr{std::string("aten::mm")}, Attr{OperandRef{0}}, Attr{OperandRef{1}}},
                           tt(f, {16, 32}));
  ValueId mx = g.add_node1(OpKind::ReduceMax, {mm}, {dt(f), Attr{std::vector<int64_t>{1}}}, tt(f, {16, 1}));
  ValueId d = g.add_node1(OpKind::Sub, {mm, mx}, {dt(f)}, tt(f, {16, 32}));
  ValueId ex = g.add_node1(OpKind::Exp, {d}, {dt(f)}, tt(f, {16, 32}));
  ValueId sum = g.add_node1(OpKind::ReduceSum, {ex}, {dt(f), Attr{std::vector<int64_t>{1}}}, tt(f, {16, 1}));
  ValueId out = g.add_node1(OpKind::Div, {ex, sum}, {dt(f)}, tt(f, {16, 32}));
  g.add_output(out);
  return g;
}

using lazyjit::test_text::count;

}  // namespace

TEST(PlanDot, KernelsAreClustersLibraryStepsBoxes) {
  Graph g = build();
  Plan p = plan_graph(g);
  ASSERT_EQ(p.kernels.size(), 2u);
  std::string dot = plan_dot(g, p, "prog");
  EXPECT_EQ(dot.rfind("digraph \"prog\" {", 0), 0u);
  EXPECT_EQ(count(dot, "subgraph cluster_"), 2u) << dot;
  for (const FusedKernel& k : p.kernels) {
    EXPECT_NE(dot.find("label=\"" + k.name + " (step "), std::string::npos) << dot;
    for (uint32_t n : k.nodes) EXPECT_NE(dot.find("    n" + std::to_string(n) + " ["), std::string::npos) << n;
  }
  EXPECT_NE(dot.find("row kernel"), std::string::npos);
  // The library step: a grey box naming its op and step.
  EXPECT_NE(dot.find("aten::mm\\nstep 1: library"), std::string::npos) << dot;
  EXPECT_EQ(count(dot, "shape=invhouse"), 3u);
  EXPECT_EQ(count(dot, "shape=ellipse"), 1u);
  EXPECT_EQ(count(dot, "shape=house"), 1u);
  EXPECT_NE(dot.find("[label=\"%7 " + tt(DType::Float32, {16, 32}).str() + "\"]"), std::string::npos) << dot;
}

TEST(PlanDot, GraphvizAcceptsIt) {
  if (std::system("command -v dot >/dev/null 2>&1") != 0) GTEST_FAIL() << "graphviz's dot is not installed: run scripts/setup.sh";
  Graph g = build();
  Plan p = plan_graph(g);
  Plan eager = plan_op_by_op(g);
  for (const Plan* plan : {&p, &eager}) {
    // One file per process: ctest -j2 runs this test twice at once (as
    // PlanDot.* and exact.PlanDot.*), and a shared name raced.
    std::string path = testing::TempDir() + "plan_dot_test." + std::to_string(::getpid()) + ".dot";
    std::ofstream(path) << plan_dot(g, *plan, "plan");
    EXPECT_EQ(std::system(("dot -Tsvg " + path + " -o /dev/null").c_str()), 0) << path;
    std::remove(path.c_str());
  }
}

TEST(KernelAssembly, KeptOnlyWhenAskedAndNamedPerKernel) {
  Graph g = build();
  CodegenOptions opts;
  opts.keep_asm = true;
  auto t = make_cpu_target(opts);
  Plan p = plan_graph(g);
  auto code = t->compile(g, p);
  const std::string& s = code->assembly();
  for (const FusedKernel& k : p.kernels) EXPECT_NE(s.find("# ==== " + k.name), std::string::npos) << s;
  EXPECT_NE(s.find("\tret"), std::string::npos) << s;
  EXPECT_TRUE(s.find("%ymm") != std::string::npos || s.find("%zmm") != std::string::npos) << "no vector code:\n" << s;
  // The same plan again: every kernel found compiled, its text the one kept.
  Plan p2 = plan_graph(g);
  auto again = t->compile(g, p2);
  EXPECT_EQ(again->llvm_compiles, 0);
  EXPECT_NE(again->assembly().find("found compiled (the kernel cache)"), std::string::npos);
  EXPECT_NE(again->assembly().find("\tret"), std::string::npos);
  // Not asked: nothing kept.
  CodegenOptions plain;
  plain.keep_llvm_ir = false;
  Plan p3 = plan_graph(g);
  auto none = make_cpu_target(plain)->compile(g, p3);
  EXPECT_TRUE(none->assembly().empty());
  EXPECT_TRUE(none->llvm_ir().empty());
}
