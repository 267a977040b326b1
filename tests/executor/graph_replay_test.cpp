// Which programs may run as one CUDA graph (executor/graph_replay.h), each rule
// on a program built by hand, and the warm-up / capture / replay policy
// (targets/cuda/graph_replays.h) on the CPU with a stand-in capture that replays by
// running the program again into the same buffers. Eager ATen is the oracle.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstring>

#include "debug/metrics.h"
#include "executor/executable.h"
#include "executor/graph_replay.h"
#include "targets/cuda/graph_replays.h"
#include "lowering/plan.h"
#include "test_graphs.h"
#include "tests/executor/cpu_execution.h"

using namespace lazyjit;
using namespace test_graphs;

namespace {

ValueId aten(ir::Graph& g, std::vector<ValueId> operands, std::vector<Attr> attrs, ir::TensorType out) {
  return g.add_node(OpKind::Aten, std::move(operands), std::move(attrs), {std::move(out)})[0];
}

// y = tanh(x) * s + mm(x, x): a kernel and an ATen step.
ir::Graph replayable() {
  ir::Graph g;
  ValueId x = g.add_input(f32({4, 4}));
  ValueId s = g.add_scalar(DType::Float64);
  ValueId m = aten(g, {x, x}, {Attr{std::string("aten::mm")}, Attr{ir::OperandRef{0}}, Attr{ir::OperandRef{1}}}, f32({4, 4}));
  ValueId t = g.add_node1(OpKind::Tanh, {x}, {dt(DType::Float32)}, f32({4, 4}));
  ValueId ts = g.add_node1(OpKind::Mul, {t, s}, {dt(DType::Float32)}, f32({4, 4}));
  g.add_output(g.add_node1(OpKind::Add, {ts, m}, {dt(DType::Float32)}, f32({4, 4})));
  return g;
}

// relu(x), then one ATen step on it named `op` with `attrs` after its operand.
ir::Graph after_relu(const std::string& op, std::vector<Attr> attrs, ir::TensorType out) {
  ir::Graph g;
  ValueId x = g.add_input(f32({6}));
  ValueId r = g.add_node1(OpKind::Relu, {x}, {dt(DType::Float32)}, f32({6}));
  attrs.insert(attrs.begin(), {Attr{op}, Attr{ir::OperandRef{0}}});
  g.add_output(aten(g, {r}, std::move(attrs), std::move(out)));
  return g;
}

executor::ReplayVerdict verdict(ir::Graph g, bool check_stores = false) {
  return executor::graph_replay_verdict(*rt().compile(std::move(g), "graph_replay", std::nullopt, check_stores), cpu_execution());
}

int64_t slot(double v) {
  int64_t s;
  std::memcpy(&s, &v, sizeof s);
  return s;
}

}  // namespace

TEST(GraphReplayVerdict, KernelsAndLibraryStepsAreReplayable) {
  executor::ReplayVerdict v = verdict(replayable());
  EXPECT_TRUE(v.replayable) << v.text();
  EXPECT_EQ(v.text(), "yes");
}

TEST(GraphReplayVerdict, OutputSizeReadOnTheHostBlocksIt) {
  executor::ReplayVerdict v = verdict(after_relu("aten::nonzero", {}, typed(DType::Int64, {3, 1})));
  ASSERT_FALSE(v.replayable);
  EXPECT_EQ(v.op, "aten::nonzero");
  EXPECT_EQ(v.text(), "no — step " + std::to_string(v.step) + " aten::nonzero: output size read on the host");
}

TEST(GraphReplayVerdict, ItemInsideBlocksIt) {
  executor::ReplayVerdict v = verdict(after_relu("aten::_local_scalar_dense", {}, typed(DType::Float32, {})));
  ASSERT_FALSE(v.replayable);
  EXPECT_EQ(v.why(), "step 1 aten::_local_scalar_dense: value read on the host (.item())");
}

TEST(GraphReplayVerdict, SchemaReturningANumberBlocksIt) {
  executor::ReplayVerdict v = verdict(after_relu("aten::size.int", {Attr{int64_t{0}}}, typed(DType::Int64, {})));
  ASSERT_FALSE(v.replayable);
  EXPECT_EQ(v.why(), "step 1 aten::size.int: returns a number, read on the host");
}

TEST(GraphReplayVerdict, DefaultGeneratorIsReplayableAnExplicitOneIsNot) {
  // bernoulli(Tensor self, *, Generator? generator=None)
  EXPECT_TRUE(verdict(after_relu("aten::bernoulli", {Attr{}}, f32({6}))).replayable);
  executor::ReplayVerdict v = verdict(after_relu("aten::bernoulli", {Attr{std::string("gen")}}, f32({6})));
  ASSERT_FALSE(v.replayable);
  EXPECT_EQ(v.why(), "step 1 aten::bernoulli: draws from an explicit generator, whose state would not advance "
                     "between replays");
}

TEST(GraphReplayVerdict, CollectiveBlocksIt) {
  executor::ReplayVerdict v = verdict(after_relu(
      "lazyjit_c10d::all_reduce", {Attr{std::string("sum")}, Attr{std::string("0")}}, f32({6})));
  ASSERT_FALSE(v.replayable);
  EXPECT_EQ(v.why(), "step 1 lazyjit_c10d::all_reduce: a collective: the process group runs it off the stream, "
                     "waited for on the host");
}

TEST(GraphReplayVerdict, NanChecksBlockIt) {
  executor::ReplayVerdict v = verdict(replayable(), /*check_stores=*/true);
  ASSERT_FALSE(v.replayable);
  EXPECT_EQ(v.step, -1);
  EXPECT_EQ(v.text(), "no — NaN checks (LAZYJIT_DEBUG_NANS) read each kernel's NaN flag on the host");
}

TEST(GraphReplayVerdict, OpByOpPlansAndStepsBlockIt) {
  auto compiled = rt().compile(replayable(), "graph_replay");
  lowering::Program p;
  p.graph = compiled->graph;
  p.plan = lowering::plan_op_by_op(p.graph);
  EXPECT_EQ(executor::graph_replay_verdict(p, cpu_execution()).text(), "no — the program runs op by op (its compile is pending)");
  p.plan.op_by_op = false;  // op-by-op steps inside a compiled program
  executor::ReplayVerdict v = executor::graph_replay_verdict(p, cpu_execution());
  ASSERT_FALSE(v.replayable);
  EXPECT_NE(v.why().find("runs op by op through ATen (not checked for capture)"), std::string::npos) << v.why();
}

TEST(GraphReplayVerdict, ViewsOnlyLaunchNothing) {
  ir::Graph g;
  ValueId x = g.add_input(f32({4, 6}));
  g.add_output(g.add_node1(OpKind::AsStrided, {x},
                           {Attr{std::vector<int64_t>{6, 4}}, Attr{std::vector<int64_t>{1, 6}}, Attr{int64_t{0}}},
                           ir::TensorType{DType::Float32, {6, 4}, {1, 6}}));
  executor::ReplayVerdict v = verdict(std::move(g));
  ASSERT_FALSE(v.replayable);
  EXPECT_EQ(v.text(), "no — nothing to launch (views of its inputs only)");
}

// The CPU stand-in for a CUDA graph: capture records `body`, replay runs it.
struct RerunGraph : executor::CapturedRun {
  std::function<void()> body;
  void replay() override { body(); }
};

executor::CaptureFn rerun_capture(int* captures) {
  return [captures](const std::function<void()>& body) {
    ++*captures;
    auto g = std::make_unique<RerunGraph>();
    g->body = body;
    return std::unique_ptr<executor::CapturedRun>(std::move(g));
  };
}

at::Tensor expected(const at::Tensor& x, double s) { return x.tanh() * s + x.mm(x); }

TEST(GraphReplays, WarmsUpCapturesOnceThenReplaysWithNewInputs) {
  executor::Executable e(rt().compile(replayable(), "graph_replay"), cpu_execution());
  int captures = 0;
  executor::GraphReplays gr(c10::Device(c10::kCPU), rerun_capture(&captures));
  auto run = [&](const executor::Bindings& b) { return e.run(b, 1, executor::Executable::StepObserver()); };
  int64_t replays0 = debug::Metrics::get().value(debug::Counter::CudaGraphReplays);
  std::vector<at::Tensor> held;
  for (int step = 0; step < 6; ++step) {
    at::Tensor x = torch::randn({4, 4});
    executor::RunResult r = gr.run({{x}, {slot(0.5)}}, run);
    ASSERT_EQ(r.outputs.size(), 1u);
    EXPECT_TRUE(torch::allclose(r.outputs[0], expected(x, 0.5), 1e-5, 1e-5)) << "step " << step;
    held.push_back(r.outputs[0]);
  }
  EXPECT_EQ(captures, 1);
  EXPECT_EQ(debug::Metrics::get().value(debug::Counter::CudaGraphReplays) - replays0, 5);  // runs 2..6
  for (size_t i = 1; i < held.size(); ++i) EXPECT_FALSE(held[i].is_alias_of(held[i - 1]));
  EXPECT_EQ(gr.last_not_replayed(), "");
}

TEST(GraphReplays, HeldOutputsKeepTheirValues) {
  executor::Executable e(rt().compile(replayable(), "graph_replay"), cpu_execution());
  int captures = 0;
  executor::GraphReplays gr(c10::Device(c10::kCPU), rerun_capture(&captures));
  auto run = [&](const executor::Bindings& b) { return e.run(b, 1, executor::Executable::StepObserver()); };
  std::vector<std::pair<at::Tensor, at::Tensor>> seen;  // (input, output) per run
  for (int step = 0; step < 5; ++step) {
    at::Tensor x = torch::randn({4, 4});
    seen.emplace_back(x, gr.run({{x}, {slot(2.0)}}, run).outputs[0]);
  }
  for (const auto& [x, y] : seen) EXPECT_TRUE(torch::allclose(y, expected(x, 2.0), 1e-5, 1e-5));
}

TEST(GraphReplays, NewSizesOrScalarsWarmUpAgain) {
  executor::Executable e(rt().compile(replayable(), "graph_replay"), cpu_execution());
  int captures = 0;
  executor::GraphReplays gr(c10::Device(c10::kCPU), rerun_capture(&captures));
  auto run = [&](const executor::Bindings& b) { return e.run(b, 1, executor::Executable::StepObserver()); };
  at::Tensor x = torch::randn({4, 4});
  for (int i = 0; i < 3; ++i) gr.run({{x}, {slot(1.0)}}, run);
  EXPECT_EQ(captures, 1);
  // Another scalar: baked into the graph, so this run is not a replay.
  executor::RunResult r = gr.run({{x}, {slot(3.0)}}, run);
  EXPECT_TRUE(torch::allclose(r.outputs[0], expected(x, 3.0), 1e-5, 1e-5));
  EXPECT_EQ(gr.last_not_replayed(), "sizes or scalar arguments changed since the capture");
  r = gr.run({{x}, {slot(3.0)}}, run);  // captured again
  EXPECT_EQ(captures, 2);
  EXPECT_TRUE(torch::allclose(r.outputs[0], expected(x, 3.0), 1e-5, 1e-5));
}

TEST(GraphReplays, InputsOffTheDeviceAreNotReplayed) {
  executor::Executable e(rt().compile(replayable(), "graph_replay"), cpu_execution());
  int captures = 0;
  executor::GraphReplays gr(c10::Device(c10::kMeta), rerun_capture(&captures));
  auto run = [&](const executor::Bindings& b) { return e.run(b, 1, executor::Executable::StepObserver()); };
  at::Tensor x = torch::randn({4, 4});
  for (int i = 0; i < 3; ++i)
    EXPECT_TRUE(torch::allclose(gr.run({{x}, {slot(1.0)}}, run).outputs[0], expected(x, 1.0), 1e-5, 1e-5));
  EXPECT_EQ(captures, 0);
  EXPECT_EQ(gr.last_not_replayed(), "input 0 is not on meta (a graph copies nothing from the host)");
}

TEST(GraphReplays, ExpandedInputsRunWithoutAGraph) {
  // A stride-0 input: a graph's own buffer for it cannot be written (its
  // elements share memory), so these runs are not replays, and nothing throws.
  executor::Executable e(rt().compile(replayable(), "graph_replay"), cpu_execution());
  int captures = 0;
  executor::GraphReplays gr(c10::Device(c10::kCPU), rerun_capture(&captures));
  auto run = [&](const executor::Bindings& b) { return e.run(b, 1, executor::Executable::StepObserver()); };
  for (int step = 0; step < 4; ++step) {
    at::Tensor x = torch::randn({1, 4}).expand({4, 4});
    executor::RunResult r = gr.run({{x}, {slot(0.5)}}, run);
    ASSERT_EQ(r.outputs.size(), 1u);
    EXPECT_TRUE(torch::allclose(r.outputs[0], expected(x, 0.5), 1e-5, 1e-5)) << "step " << step;
  }
  EXPECT_EQ(captures, 0);
  EXPECT_EQ(gr.last_not_replayed(), "input 0 has elements that share memory (expanded)");
}

TEST(GraphReplays, AFailedCaptureIsNotTriedAgain) {
  executor::Executable e(rt().compile(replayable(), "graph_replay"), cpu_execution());
  int tries = 0;
  executor::GraphReplays gr(c10::Device(c10::kCPU), [&](const std::function<void()>&) -> std::unique_ptr<executor::CapturedRun> {
    ++tries;
    throw std::runtime_error("operation not permitted when stream is capturing\nmore");
  });
  auto run = [&](const executor::Bindings& b) { return e.run(b, 1, executor::Executable::StepObserver()); };
  for (int i = 0; i < 4; ++i) {
    at::Tensor x = torch::randn({4, 4});
    EXPECT_TRUE(torch::allclose(gr.run({{x}, {slot(1.0)}}, run).outputs[0], expected(x, 1.0), 1e-5, 1e-5));
  }
  EXPECT_EQ(tries, 1);
  EXPECT_EQ(gr.last_not_replayed(), "capture failed: operation not permitted when stream is capturing");
}

TEST(GraphReplays, StableInputsAreReadInPlaceAndOneThatMovesIsCopiedFromThen) {
  // x is a weight (updated in place between runs, as an optimizer does); a
  // stable input is not copied, so the replay must see the update.
  executor::Executable e(rt().compile(replayable(), "graph_replay"), cpu_execution());
  int captures = 0;
  executor::GraphReplays gr(c10::Device(c10::kCPU), rerun_capture(&captures));
  auto run = [&](const executor::Bindings& b) { return e.run(b, 1, executor::Executable::StepObserver()); };
  at::Tensor w = torch::randn({4, 4});
  for (int step = 0; step < 4; ++step) {
    executor::RunResult r = gr.run({{w}, {slot(0.5)}}, run);
    EXPECT_TRUE(torch::allclose(r.outputs.at(0), expected(w, 0.5), 1e-5, 1e-5)) << "step " << step;
    w.mul_(0.9).add_(0.01);
  }
  EXPECT_EQ(captures, 1);
  // The weight moves (a new tensor): the graph read the old address, so this
  // run starts over, and from its capture on that input is copied.
  at::Tensor moved = torch::randn({4, 4});
  executor::RunResult r = gr.run({{moved}, {slot(0.5)}}, run);
  EXPECT_TRUE(torch::allclose(r.outputs.at(0), expected(moved, 0.5), 1e-5, 1e-5));
  EXPECT_EQ(gr.last_not_replayed(), "input 0 moved since the capture");
  for (int step = 0; step < 4; ++step) {
    at::Tensor x = step % 2 ? moved : torch::randn({4, 4});  // at the old address or not: copied either way
    r = gr.run({{x}, {slot(0.5)}}, run);
    EXPECT_TRUE(torch::allclose(r.outputs.at(0), expected(x, 0.5), 1e-5, 1e-5)) << "step " << step;
  }
  EXPECT_EQ(captures, 2);
}

TEST(GraphReplays, OutputsThatMoveUnderCaptureRefuseTheGraph) {
  // Memory-efficient attention's philox seed and offset are CPU tensors when
  // run and GPU tensors when captured: a graph would hand out other tensors
  // than a run does. The stand-in capture runs the body once, as a real one does.
  int captures = 0, calls = 0;
  executor::GraphReplays gr(c10::Device(c10::kCPU), [&](const std::function<void()>& body) {
    ++captures;
    body();
    auto g = std::make_unique<RerunGraph>();
    g->body = body;
    return std::unique_ptr<executor::CapturedRun>(std::move(g));
  });
  auto run = [&](const executor::Bindings&) {
    executor::RunResult r;
    ++calls;  // the second call is the captured one
    r.outputs = {calls == 2 ? at::empty({1}, at::TensorOptions().device(c10::kMeta)) : at::ones({1})};
    return r;
  };
  executor::Bindings b{{at::ones({2})}, {}, {}};
  gr.run(b, run);                                  // warm-up
  executor::RunResult r = gr.run(b, run);          // captured, refused, run as usual
  EXPECT_EQ(captures, 1);
  EXPECT_EQ(r.outputs.at(0).device(), c10::Device(c10::kCPU));
  EXPECT_EQ(gr.last_not_replayed(), "capture failed: output 0 is on meta when captured but on cpu when run");
  gr.run(b, run);  // not tried again
  EXPECT_EQ(captures, 1);
  EXPECT_EQ(calls, 4);
}

TEST(GraphReplays, OffTheCudaTargetNoProgramHasGraphs) {
  // Only a target that asks for them (the cuda backend's ExecutionTarget), with a CUDA build.
  EXPECT_FALSE(executor::ExecutionTarget{}.replays);
  std::string why;
  if (!executor::cuda_graphs_built(&why)) {
    EXPECT_NE(why.find("without CUDA graphs"), std::string::npos);
  }
}

// On a GPU (skipped elsewhere; scripts/gpu_check.sh runs it): a capture whose
// body breaks it leaves PyTorch as it found it: random draws on the GPU still
// work (the default generator left capture mode) and the graph's pool no
// longer takes allocations.
TEST(CudaGraph, AFailedCaptureLeavesRandomDrawsWorking) {
  if (!executor::cuda_graphs_built() || !torch::cuda::is_available()) GTEST_SKIP() << "no CUDA graphs or GPU here";
  at::Tensor x = at::ones({8}, at::TensorOptions().device(at::kCUDA));
  EXPECT_ANY_THROW(executor::capture_cuda_graph([&] {
    at::Tensor y = x * 2;
    (void)y.sum().item<float>();  // a host read: breaks the capture
  }));
  at::Tensor r = at::randn({1024}, at::TensorOptions().device(at::kCUDA));
  at::Tensor d = at::dropout(at::ones({1024}, at::TensorOptions().device(at::kCUDA)), 0.5, /*train=*/true);
  EXPECT_GT(r.std().item<float>(), 0.5f);
  EXPECT_GT(d.eq(0).sum().item<int64_t>(), 0);
  // And a capture after it works: replays compute.
  at::Tensor out = at::empty({8}, at::TensorOptions().device(at::kCUDA));
  auto g = executor::capture_cuda_graph([&] { out.copy_(x * 3); });
  g->replay();
  EXPECT_TRUE(at::allclose(out.cpu(), at::full({8}, 3.0f)));
}
