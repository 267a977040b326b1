// A step that throws loses only what depends on it: the executor runs every
// step that does not read the failed step's results (through the graph) and
// reports the failure with the ATen kernel's own error; the runtime names the
// traced graph's node. Eager ATen is the oracle for the values kept.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstring>

#include "executor/executable.h"
#include "runtime/runtime.h"
#include "test_graphs.h"
#include "tests/executor/cpu_execution.h"

using namespace lazyjit;
using namespace test_graphs;

namespace {

// picked = index_select(x, 0, idx) (an ATen step); doubled = picked * 2 (a kernel
// reading it); independent = tanh(x) (a kernel that does not); outputs in that order.
struct Case {
  ir::Graph g;
  uint32_t index_select_node = 0;
};

Case make_case() {
  Case c;
  ir::Graph& g = c.g;
  ValueId x = g.add_input(typed(DType::Float32, {4, 5}));
  ValueId idx = g.add_input(typed(DType::Int64, {2}));
  ValueId two = g.add_scalar(DType::Float64);
  ValueId picked = g.add_node(OpKind::Aten, {x, idx},
                              {Attr{std::string("aten::index_select")}, Attr{ir::OperandRef{0}}, Attr{int64_t{0}},
                               Attr{ir::OperandRef{1}}},
                              {typed(DType::Float32, {2, 5})})[0];
  c.index_select_node = g.value(picked).node;
  ValueId doubled = g.add_node1(OpKind::Mul, {picked, two}, {dt(DType::Float32)}, typed(DType::Float32, {2, 5}));
  ValueId independent = g.add_node1(OpKind::Tanh, {x}, {dt(DType::Float32)}, typed(DType::Float32, {4, 5}));
  g.add_output(doubled);
  g.add_output(independent);
  g.add_output(picked);
  return c;
}

executor::Bindings bindings(std::vector<int64_t> idx) {
  double two = 2.0;
  int64_t slot;
  std::memcpy(&slot, &two, sizeof slot);
  torch::manual_seed(0);
  return {{torch::randn({4, 5}), torch::tensor(idx)}, {slot}};
}

}  // namespace

TEST(FailedStep, KeepsEveryOutputThatDoesNotDependOnIt) {
  Case c = make_case();
  executor::Executable e(rt().compile(std::move(c.g), "failed_step"), cpu_execution());
  executor::Bindings b = bindings({0, 9});
  executor::RunResult r = e.run(b, 1);
  ASSERT_EQ(r.failures.size(), 1u);
  EXPECT_EQ(r.lost_by, (std::vector<int32_t>{0, -1, 0}));
  EXPECT_FALSE(r.outputs[0].defined());
  EXPECT_FALSE(r.outputs[2].defined());
  EXPECT_TRUE(at::allclose(r.outputs[1], at::tanh(b.inputs[0])));
  // The ATen kernel's own error, type and message, as eager raises it.
  try {
    std::rethrow_exception(r.failures[0].error);
  } catch (const c10::IndexError& err) {
    EXPECT_EQ(err.msg(), "index out of range in self");
  } catch (...) {
    ADD_FAILURE() << "not the kernel's c10::IndexError";
  }
}

TEST(FailedStep, ARunWithoutFailuresReportsNone) {
  Case c = make_case();
  executor::Executable e(rt().compile(std::move(c.g), "good_step"), cpu_execution());
  executor::Bindings b = bindings({3, 1});
  executor::RunResult r = e.run(b, 1);
  EXPECT_TRUE(r.failures.empty());
  EXPECT_TRUE(r.lost_by.empty());
  at::Tensor picked = b.inputs[0].index_select(0, b.inputs[1]);
  EXPECT_TRUE(at::equal(r.outputs[2], picked));
  EXPECT_TRUE(at::allclose(r.outputs[0], picked * 2));
}

TEST(FailedStep, RuntimeNamesTheTracedNode) {
  // The traced graph has a dead node before the failing one: the passes drop it,
  // so the program's node numbers differ from the traced graph's.
  ir::Graph g;
  ValueId x = g.add_input(typed(DType::Float32, {4, 5}));
  ValueId idx = g.add_input(typed(DType::Int64, {2}));
  g.add_node1(OpKind::Exp, {x}, {dt(DType::Float32)}, typed(DType::Float32, {4, 5}));
  ValueId picked = g.add_node(OpKind::Aten, {x, idx},
                              {Attr{std::string("aten::index_select")}, Attr{ir::OperandRef{0}}, Attr{int64_t{0}},
                               Attr{ir::OperandRef{1}}},
                              {typed(DType::Float32, {2, 5})})[0];
  ValueId y = g.add_node1(OpKind::Neg, {x}, {dt(DType::Float32)}, typed(DType::Float32, {4, 5}));
  g.add_output(y);
  g.add_output(picked);
  executor::Bindings b = bindings({-7, 0});
  b.scalars.clear();
  executor::RunResult r = rt().run(g, b);
  ASSERT_EQ(r.failures.size(), 1u);
  EXPECT_EQ(r.failures[0].node, g.value(picked).node);
  EXPECT_EQ(r.lost_by, (std::vector<int32_t>{-1, 0}));
  EXPECT_TRUE(at::equal(r.outputs[0], -b.inputs[0]));
}
