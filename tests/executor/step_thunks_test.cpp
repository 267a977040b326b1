// A program's steps as thunks (executor/thunk.h, step_thunks.h): each thunk
// reads and makes exactly what its step touches (the facts the executor used
// to derive per step kind when a step fails), a failure loses exactly the
// outputs that depend on it through the graph, and the ExecutionTarget given
// decides where ATen steps run and which thunk runs each kernel. Eager ATen
// and the graph itself are the oracles.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstring>
#include <set>

#include "targets/cpu/kernel_thunk.h"
#include "targets/cuda_sim/kernel_thunk.h"
#include "executor/executable.h"
#include "executor/step_thunks.h"
#include "lowering/plan.h"
#include "test_graphs.h"
#include "tests/executor/cpu_execution.h"

using namespace lazyjit;
using namespace test_graphs;
using lowering::Step;

namespace {

ir::TensorType view_type(std::vector<int64_t> sizes, std::vector<int64_t> strides) {
  return {DType::Float32, std::move(sizes), std::move(strides)};
}

// picked = index_select(x, 0, idx) (an ATen step that fails for a bad index);
// row = as_strided(picked) (a view of it); doubled = row * 2 (a kernel);
// patched = as_strided_scatter(tanh(x), picked's first row) (a kernel and a
// scatter reading the failure); t = tanh(x) + 1 and m = mm(x, x^T) (a kernel
// and an ATen step that do not); outputs: row, doubled, patched, t, m, picked.
struct Case {
  ir::Graph g;
  ValueId picked;
};

Case make_case() {
  Case c;
  ir::Graph& g = c.g;
  ValueId x = g.add_input(f32({4, 5}));
  ValueId idx = g.add_input(typed(DType::Int64, {2}));
  ValueId two = g.add_scalar(DType::Float64);
  c.picked = g.add_node(OpKind::Aten, {x, idx},
                        {Attr{std::string("aten::index_select")}, Attr{ir::OperandRef{0}}, Attr{int64_t{0}},
                         Attr{ir::OperandRef{1}}},
                        {f32({2, 5})})[0];
  ValueId row = g.add_node1(OpKind::AsStrided, {c.picked},
                            {Attr{std::vector<int64_t>{5}}, Attr{std::vector<int64_t>{1}}, Attr{int64_t{5}}},
                            view_type({5}, {1}));
  ValueId doubled = g.add_node1(OpKind::Mul, {row, two}, {dt(DType::Float32)}, f32({5}));
  ValueId th = g.add_node1(OpKind::Tanh, {x}, {dt(DType::Float32)}, f32({4, 5}));
  ValueId patched = g.add_node1(OpKind::AsStridedScatter, {th, doubled},
                                {Attr{std::vector<int64_t>{5}}, Attr{std::vector<int64_t>{1}}, Attr{int64_t{10}}},
                                f32({4, 5}));
  ValueId one = g.add_scalar(DType::Float64);
  ValueId t = g.add_node1(OpKind::Add, {g.add_node1(OpKind::Tanh, {x}, {dt(DType::Float32)}, f32({4, 5})), one},
                          {dt(DType::Float32)}, f32({4, 5}));
  ValueId xt = g.add_node1(OpKind::AsStrided, {x},
                           {Attr{std::vector<int64_t>{5, 4}}, Attr{std::vector<int64_t>{1, 5}}, Attr{int64_t{0}}},
                           view_type({5, 4}, {1, 5}));
  ValueId m = g.add_node(OpKind::Aten, {x, xt},
                         {Attr{std::string("aten::mm")}, Attr{ir::OperandRef{0}}, Attr{ir::OperandRef{1}}},
                         {f32({4, 4})})[0];
  for (ValueId v : {row, doubled, patched, t, m, c.picked}) g.add_output(v);
  return c;
}

int64_t bits(double d) {
  int64_t i;
  std::memcpy(&i, &d, sizeof i);
  return i;
}

executor::Bindings bindings(std::vector<int64_t> idx) {
  torch::manual_seed(0);
  return {{torch::randn({4, 5}), torch::tensor(idx)}, {bits(2.0), bits(1.0)}};
}

// What a step touches, derived from the plan and the graph as the executor
// did per step kind before thunks: a kernel's buffer loads and stores (its
// first node named on failure), a layer norm group's reads and makes, else its
// node's operands and outputs.
struct Touched {
  std::vector<ValueId> reads, writes;
  uint32_t node;
};

Touched touched(const lowering::Program& p, const Step& s) {
  if (s.group >= 0) {
    const lowering::OpByOpLayerNorm& ln = p.plan.layer_norms[s.group];
    return {ln.reads(), ln.makes(), s.node};
  }
  if (s.kind == Step::Kind::Kernel) {
    const lowering::FusedKernel& k = p.plan.kernels[s.kernel];
    Touched t{{}, k.stores, k.nodes.front()};
    for (const lowering::Access& a : k.loads)
      if (a.scalar_index < 0) t.reads.push_back(a.value);
    return t;
  }
  const ir::Node& n = p.graph.nodes()[s.node];
  return {n.operands, n.outputs, s.node};
}

// The graph outputs that depend on value `v` (through any node), by output index.
std::set<size_t> outputs_depending_on(const ir::Graph& g, ValueId v) {
  std::vector<bool> tainted(g.values().size(), false);
  tainted[v] = true;
  for (const ir::Node& n : g.nodes()) {  // nodes are in topological order
    bool any = false;
    for (ValueId o : n.operands) any = any || tainted[o];
    if (any)
      for (ValueId o : n.outputs) tainted[o] = true;
  }
  std::set<size_t> out;
  for (size_t i = 0; i < g.outputs().size(); ++i)
    if (tainted[g.outputs()[i]]) out.insert(i);
  return out;
}

void expect_touched(const lowering::Program& p) {
  auto thunks = executor::make_step_thunks(p, cpu_execution());
  ASSERT_EQ(thunks.size(), p.plan.steps.size());
  for (size_t si = 0; si < thunks.size(); ++si) {
    Touched want = touched(p, p.plan.steps[si]);
    EXPECT_EQ(thunks[si]->reads(), want.reads) << "step " << si;
    EXPECT_EQ(thunks[si]->writes(), want.writes) << "step " << si;
    EXPECT_EQ(thunks[si]->node(), want.node) << "step " << si;
  }
}

std::set<Step::Kind> kinds(const lowering::Program& p) {
  std::set<Step::Kind> k;
  for (const Step& s : p.plan.steps) k.insert(s.kind);
  return k;
}

}  // namespace

TEST(StepThunks, EachReadsAndMakesWhatItsStepTouches) {
  auto p = rt().compile(make_case().g, "step_thunks");
  EXPECT_EQ(kinds(*p), (std::set<Step::Kind>{Step::Kind::Kernel, Step::Kind::Aten, Step::Kind::AsStrided,
                                             Step::Kind::AsStridedScatter}));
  expect_touched(*p);
  lowering::Program op_by_op;
  op_by_op.graph = p->graph;
  op_by_op.plan = lowering::plan_op_by_op(op_by_op.graph);
  EXPECT_TRUE(kinds(op_by_op).count(Step::Kind::OpByOp));
  expect_touched(op_by_op);
}

TEST(StepThunks, AFailureLosesExactlyTheOutputsThatDependOnIt) {
  Case c = make_case();
  std::set<size_t> lost = outputs_depending_on(c.g, c.picked);
  ASSERT_EQ(lost, (std::set<size_t>{0, 1, 2, 5}));
  auto compiled = rt().compile(make_case().g, "step_thunks");
  auto op_by_op = std::make_shared<lowering::Program>();
  op_by_op->graph = compiled->graph;
  op_by_op->plan = lowering::plan_op_by_op(op_by_op->graph);
  for (std::shared_ptr<const lowering::Program> p : {compiled, std::shared_ptr<const lowering::Program>(op_by_op)}) {
    executor::Bindings b = bindings({1, 9});
    executor::RunResult r = executor::Executable(p, cpu_execution()).run(b, 1);
    ASSERT_EQ(r.failures.size(), 1u);
    const ir::Graph& g = p->graph;
    EXPECT_EQ(r.failures[0].node, g.value(g.outputs()[5]).node);
    for (size_t o = 0; o < g.outputs().size(); ++o) {
      EXPECT_EQ(r.outputs[o].defined(), !lost.count(o)) << "output " << o;
      EXPECT_EQ(r.lost_by.at(o), lost.count(o) ? 0 : -1) << "output " << o;
    }
    const at::Tensor& x = b.inputs[0];
    EXPECT_TRUE(torch::allclose(r.outputs[3], x.tanh() + 1));
    EXPECT_TRUE(torch::allclose(r.outputs[4], x.mm(x.t())));
  }
}

TEST(StepThunks, ARunWithoutFailuresMatchesEager) {
  auto p = rt().compile(make_case().g, "step_thunks");
  executor::Bindings b = bindings({3, 1});
  executor::RunResult r = executor::Executable(p, cpu_execution()).run(b, 1);
  ASSERT_TRUE(r.failures.empty());
  const at::Tensor& x = b.inputs[0];
  at::Tensor picked = x.index_select(0, b.inputs[1]);
  at::Tensor patched = x.tanh();
  patched[2] = picked[1] * 2;
  EXPECT_TRUE(torch::equal(r.outputs[0], picked[1]));
  EXPECT_TRUE(torch::allclose(r.outputs[1], picked[1] * 2));
  EXPECT_TRUE(torch::allclose(r.outputs[2], patched));
  EXPECT_TRUE(torch::equal(r.outputs[5], picked));
}

namespace {

int g_kernel_thunks = 0;

std::unique_ptr<executor::Thunk> counting_kernel_thunk(const lowering::Program& p, size_t step) {
  ++g_kernel_thunks;
  return executor::cpu_kernel_thunk(p, step);
}

}  // namespace

TEST(StepThunks, TheTargetsKernelThunkRunsEachKernel) {
  auto p = rt().compile(make_case().g, "step_thunks");
  executor::ExecutionTarget target;
  target.kernel_thunk = counting_kernel_thunk;
  g_kernel_thunks = 0;
  executor::Executable e(p, target);
  EXPECT_EQ(g_kernel_thunks, static_cast<int>(p->plan.kernels.size()));
  EXPECT_GT(g_kernel_thunks, 0);
  executor::Bindings b = bindings({0, 2});
  EXPECT_TRUE(torch::allclose(e.run(b, 1).outputs[3], b.inputs[0].tanh() + 1));
  // The simulated GPU's factory gives a kernel without a device kernel the CPU's thunk.
  target.kernel_thunk = executor::simulated_kernel_thunk;
  executor::RunResult r = executor::Executable(p, target).run(b, 1);
  ASSERT_TRUE(r.failures.empty());
  EXPECT_TRUE(torch::allclose(r.outputs[3], b.inputs[0].tanh() + 1));
}

TEST(StepThunks, AtenStepsRunOnTheTargetsDevice) {
  // ones(size, dtype, layout, device, pin_memory) recorded on the lazyjit
  // device: the step makes it where the ExecutionTarget says (meta here).
  ir::Graph g;
  ValueId x = g.add_input(f32({3}));
  ValueId ones = g.add_node(OpKind::Aten, {},
                            {Attr{std::string("aten::ones")}, Attr{std::vector<int64_t>{3}},
                             Attr{int64_t{static_cast<int64_t>(at::kFloat)}}, Attr{}, Attr{std::string("lazyjit:0")},
                             Attr{}},
                            {f32({3})})[0];
  g.add_output(ones);
  g.add_output(g.add_node1(OpKind::Neg, {x}, {dt(DType::Float32)}, f32({3})));
  auto p = rt().compile(std::move(g), "step_thunks_device");
  executor::Bindings b{{torch::randn({3})}, {}};
  executor::RunResult cpu = executor::Executable(p, cpu_execution()).run(b, 1);
  ASSERT_TRUE(cpu.failures.empty());
  EXPECT_TRUE(torch::equal(cpu.outputs[0], torch::ones({3})));
  executor::ExecutionTarget meta = cpu_execution();
  meta.device = c10::Device(c10::kMeta);
  executor::RunResult r = executor::Executable(p, meta).run(b, 1);
  ASSERT_TRUE(r.failures.empty());
  EXPECT_EQ(r.outputs[0].device(), c10::Device(c10::kMeta));
  EXPECT_TRUE(torch::equal(r.outputs[1], -b.inputs[0]));
}
