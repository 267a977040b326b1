// graph_dot: the traced graph as Graphviz DOT (the <key>.graph.dot dump).
#include <gtest/gtest.h>

#include "tests/text_count.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include <unistd.h>

#include "graph_ir/graph_dot.h"

using namespace lazyjit::ir;

namespace {

TensorType f32(std::vector<int64_t> sizes) { return TensorType{DType::Float32, sizes, contiguous_strides(sizes)}; }
Attr dt(DType d) { return Attr{static_cast<int64_t>(d)}; }

// relu(x * s) @ w through ATen, plus a sum over the last dim.
Graph build() {
  Graph g;
  ValueId x = g.add_input(f32({4, 8}));
  ValueId w = g.add_input(f32({8, 3}));
  ValueId s = g.add_scalar(DType::Float64);
  ValueId xs = g.add_node1(OpKind::Mul, {x, s}, {dt(DType::Float32)}, f32({4, 8}));
  ValueId r = g.add_node1(OpKind::Relu, {xs}, {dt(DType::Float32)}, f32({4, 8}));
  ValueId mm = g.add_node1(OpKind::Aten, {r, w}, {Attr{std::string("aten::mm")}, Attr{OperandRef{0}}, Attr{OperandRef{1}}},
                           f32({4, 3}));
  ValueId sum = g.add_node1(OpKind::ReduceSum, {r}, {dt(DType::Float32), Attr{std::vector<int64_t>{1}}}, f32({4, 1}));
  g.add_output(mm);
  g.add_output(sum);
  return g;
}

using lazyjit::test_text::count;

}  // namespace

TEST(GraphDot, OneDotNodePerIrNodeEdgesLabelledWithDtypeAndShape) {
  Graph g = build();
  std::string dot = graph_dot(g, "k\"ey");
  EXPECT_EQ(dot.rfind("digraph \"k\\\"ey\" {", 0), 0u) << dot;  // the title is escaped
  EXPECT_EQ(dot.back(), '\n');
  for (uint32_t n = 0; n < g.nodes().size(); ++n) EXPECT_NE(dot.find("  n" + std::to_string(n) + " ["), std::string::npos) << n;
  // Sources, library ops, the graph's ops and outputs look different.
  EXPECT_EQ(count(dot, "shape=invhouse"), 2u);
  EXPECT_EQ(count(dot, "shape=ellipse"), 1u);
  EXPECT_EQ(count(dot, "shape=house"), 2u);
  EXPECT_NE(dot.find("aten::mm"), std::string::npos);
  EXPECT_NE(dot.find("reduce_sum dims [1]"), std::string::npos);
  // An edge per operand, plus one per output, each naming its value.
  size_t operands = 0;
  for (const Node& n : g.nodes()) operands += n.operands.size();
  EXPECT_EQ(count(dot, " -> "), operands + g.outputs().size());
  EXPECT_NE(dot.find("n3 -> n4 [label=\"%3 " + f32({4, 8}).str() + "\"]"), std::string::npos) << dot;
  EXPECT_NE(dot.find("n5 -> out0"), std::string::npos) << dot;
}

TEST(GraphDot, GraphvizAcceptsIt) {
  if (std::system("command -v dot >/dev/null 2>&1") != 0) GTEST_FAIL() << "graphviz's dot is not installed: run scripts/setup.sh";
  // One file per process, so two test runs at once cannot race on it.
  std::string path = testing::TempDir() + "graph_dot_test." + std::to_string(::getpid()) + ".dot";
  std::ofstream(path) << graph_dot(build(), "graph");
  EXPECT_EQ(std::system(("dot -Tsvg " + path + " -o /dev/null").c_str()), 0) << path;
  std::remove(path.c_str());
}
