// Which outputs a program may store straight into an input's memory
// (executor/store_in_place.h), on compiled plans: allowed for an update whose
// kernel reads the input only for it; refused when a later step reads the old
// input, when the kernel reads it for another value or at another element,
// and for row kernels. Running with Bindings::into writes the input in place
// and computes what a run without it computes.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "executor/executable.h"
#include "executor/store_in_place.h"
#include "runtime/runtime.h"
#include "test_graphs.h"
#include "tests/executor/cpu_execution.h"

using namespace lazyjit;
using namespace test_graphs;

namespace {

Attr f32_attr() { return dt(DType::Float32); }

ValueId ew(ir::Graph& g, OpKind k, std::vector<ValueId> ops, std::vector<int64_t> sizes = {64, 32}) {
  return g.add_node1(k, std::move(ops), {f32_attr()}, f32(sizes));
}

}  // namespace

// p' = p * 0.5 + g (output 0, into input 0) and m' = m + g (output 1, into input 2).
TEST(StoreInPlace, AnUpdateReadingItsInputOnlyForItselfIsStoredThere) {
  ir::Graph g;
  ValueId p = g.add_input(f32({64, 32})), gr = g.add_input(f32({64, 32})), m = g.add_input(f32({64, 32}));
  ValueId half = g.add_scalar(DType::Float64);
  ValueId p2 = ew(g, OpKind::Add, {ew(g, OpKind::Mul, {p, half}), gr});
  ValueId m2 = ew(g, OpKind::Add, {m, gr});
  g.add_output(p2);
  g.add_output(m2);
  auto prog = rt().compile(std::move(g), "in_place");
  EXPECT_TRUE(executor::can_store_into_input(*prog, 0, 0));
  EXPECT_TRUE(executor::can_store_into_input(*prog, 1, 2));
  EXPECT_FALSE(executor::can_store_into_input(*prog, 0, 2));  // m is read for m', not p'

  torch::manual_seed(0);
  at::Tensor tp = torch::randn({64, 32}), tg = torch::randn({64, 32}), tm = torch::randn({64, 32});
  double h = 0.5;
  int64_t slot;
  std::memcpy(&slot, &h, sizeof slot);
  at::Tensor want_p = tp * 0.5 + tg, want_m = tm + tg;
  executor::Executable e(prog, cpu_execution());
  executor::Bindings b{{tp, tg, tm}, {slot}};
  b.into = {{prog->graph.outputs()[0], tp}, {prog->graph.outputs()[1], tm}};
  auto out = e.run(b, 2).outputs;
  EXPECT_TRUE(out[0].is_same(tp));
  EXPECT_TRUE(out[1].is_same(tm));
  EXPECT_TRUE(at::allclose(tp, want_p));
  EXPECT_TRUE(at::allclose(tm, want_m));
  // A destination of another layout is not used: the result gets its own buffer.
  at::Tensor t_wrong = torch::zeros({32, 64}).t();
  b.into = {{prog->graph.outputs()[1], t_wrong}};
  out = e.run(b, 1).outputs;
  EXPECT_FALSE(out[1].is_alias_of(t_wrong));
  EXPECT_TRUE(at::equal(t_wrong, torch::zeros({64, 32})));
}

TEST(StoreInPlace, RefusedWhenALaterStepReadsTheOldInput) {
  // x' = x + 1 (a kernel), then y = mm(x, w): an ATen step reading the old x.
  ir::Graph g;
  ValueId x = g.add_input(f32({64, 32})), w = g.add_input(f32({32, 8}));
  ValueId one = g.add_scalar(DType::Float64);
  ValueId x2 = ew(g, OpKind::Add, {x, one});
  ValueId y = g.add_node(OpKind::Aten, {x, w}, {Attr{std::string("aten::mm")}, Attr{ir::OperandRef{0}}, Attr{ir::OperandRef{1}}},
                         {f32({64, 8})})[0];
  g.add_output(x2);
  g.add_output(y);
  auto prog = rt().compile(std::move(g), "read_after");
  bool mm_after = false, seen_kernel = false;
  for (const auto& s : prog->plan.steps) {
    seen_kernel |= s.kind == lowering::Step::Kind::Kernel;
    mm_after |= seen_kernel && s.kind == lowering::Step::Kind::Aten;
  }
  EXPECT_EQ(executor::can_store_into_input(*prog, 0, 0), !mm_after);
}

TEST(StoreInPlace, RefusedForAnotherElementAndForRowKernels) {
  {  // x' = x + x^T (reads x at the transposed element)
    ir::Graph g;
    ValueId x = g.add_input(f32({32, 32}));
    ValueId xt = g.add_node1(OpKind::AsStrided, {x},
                             {Attr{std::vector<int64_t>{32, 32}}, Attr{std::vector<int64_t>{1, 32}}, Attr{int64_t{0}}},
                             ir::TensorType{DType::Float32, {32, 32}, {1, 32}});
    g.add_output(ew(g, OpKind::Add, {x, xt}, {32, 32}));
    auto prog = rt().compile(std::move(g), "transposed");
    EXPECT_FALSE(executor::can_store_into_input(*prog, 0, 0));
  }
  {  // x' = x - max(x, dim 1): a row kernel
    ir::Graph g;
    ValueId x = g.add_input(f32({64, 32}));
    ValueId m = g.add_node1(OpKind::ReduceMax, {x}, {f32_attr(), Attr{std::vector<int64_t>{1}}}, f32({64, 1}));
    g.add_output(ew(g, OpKind::Sub, {x, m}));
    auto prog = rt().compile(std::move(g), "row");
    EXPECT_FALSE(executor::can_store_into_input(*prog, 0, 0));
  }
  {  // Another dtype or size than the input's.
    ir::Graph g;
    ValueId x = g.add_input(f32({64, 32}));
    g.add_output(ew(g, OpKind::Exp, {x}, {64, 32}));
    ValueId y = g.add_input(f32({64, 1}));
    g.add_output(ew(g, OpKind::Add, {x, y}));
    auto prog = rt().compile(std::move(g), "types");
    EXPECT_TRUE(executor::can_store_into_input(*prog, 0, 0));
    EXPECT_FALSE(executor::can_store_into_input(*prog, 1, 1));  // [64, 1] input, [64, 32] output
  }
}

TEST(StoreInPlace, ALibraryStepsNewResultDoesNotAliasTheInputItRead) {
  // y = mm(x, w), then x' = x * 2: the mm's result is new memory (its schema
  // says so), so x' may still go into x once nothing reads x after it. A view
  // library step's result (aten::alias) that is an output refuses it.
  for (const char* op : {"aten::mm", "aten::alias"}) {
    ir::Graph g;
    ValueId x = g.add_input(f32({64, 32})), w = g.add_input(f32({32, 8}));
    const bool view = std::string(op) == "aten::alias";
    ValueId y = view ? g.add_node(OpKind::Aten, {x}, {Attr{std::string(op)}, Attr{ir::OperandRef{0}}}, {f32({64, 32})})[0]
                     : g.add_node(OpKind::Aten, {x, w},
                                  {Attr{std::string(op)}, Attr{ir::OperandRef{0}}, Attr{ir::OperandRef{1}}},
                                  {f32({64, 8})})[0];
    ValueId two = g.add_scalar(DType::Float64);
    g.add_output(ew(g, OpKind::Mul, {x, two}));
    g.add_output(y);
    auto prog = rt().compile(std::move(g), std::string("lib_then_kernel_") + op);
    bool kernel_before_aten = false, seen_kernel = false;
    for (const auto& s : prog->plan.steps) {
      seen_kernel |= s.kind == lowering::Step::Kind::Kernel;
      kernel_before_aten |= seen_kernel && s.kind == lowering::Step::Kind::Aten;
    }
    ASSERT_FALSE(kernel_before_aten) << op;
    EXPECT_EQ(executor::can_store_into_input(*prog, 0, 0), !view) << op;
  }
}
