#include "executor/executable.h"

#include <ATen/ATen.h>

#include <chrono>

#include "debug/metrics.h"
#include "executor/kernel_launch.h"
#include "executor/tensor_layout.h"

namespace lazyjit::executor {

using ir::OpKind;
using lowering::Step;

at::Tensor with_layout(const at::Tensor& t, const ir::TensorType& type) {
  if (t.sizes().equals(type.sizes) && t.strides().equals(type.strides)) return t;
  debug::Metrics::get().add(debug::Counter::LayoutCopies);
  at::Tensor out = at::empty_strided(type.sizes, type.strides, t.options());
  out.copy_(t);
  return out;
}

namespace {

void run_view(const ir::Graph& g, const ir::Node& n, std::vector<at::Tensor>& env) {
  const auto& sizes = std::get<std::vector<int64_t>>(n.attrs[0].value);
  const auto& strides = std::get<std::vector<int64_t>>(n.attrs[1].value);
  int64_t offset = std::get<int64_t>(n.attrs[2].value);
  // Flat slots of the dense operand, in memory order.
  at::Tensor base = with_layout(env[n.operands[0]], g.value(n.operands[0]).type);
  at::Tensor flat = base.as_strided({base.numel()}, {1}, base.storage_offset());
  if (n.kind == OpKind::AsStrided) {
    env[n.outputs[0]] = flat.as_strided(sizes, strides, base.storage_offset() + offset);
    return;
  }
  at::Tensor out = base.clone(at::MemoryFormat::Preserve);
  at::Tensor out_flat = out.as_strided({out.numel()}, {1}, out.storage_offset());
  out_flat.as_strided(sizes, strides, out.storage_offset() + offset).copy_(env[n.operands[1]]);
  env[n.outputs[0]] = out;
}

}  // namespace

Executable::Executable(std::shared_ptr<const lowering::Program> program) : program_(std::move(program)) {
  const lowering::Program& p = *program_;
  aten_.resize(p.plan.steps.size());
  for (size_t si = 0; si < p.plan.steps.size(); ++si) {
    const Step& s = p.plan.steps[si];
    if (s.kind == Step::Kind::Aten) aten_[si] = std::make_unique<AtenCall>(p.graph, p.graph.nodes()[s.node]);
  }
}

std::vector<at::Tensor> Executable::run(const Bindings& b, int threads) const {
  auto t0 = std::chrono::steady_clock::now();
  const lowering::Program& p = *program_;
  const ir::Graph& g = p.graph;
  std::vector<at::Tensor> env(g.values().size());
  for (size_t i = 0; i < g.inputs().size(); ++i) env[g.inputs()[i]] = b.inputs.at(i);
  for (size_t si = 0; si < p.plan.steps.size(); ++si) {
    const Step& s = p.plan.steps[si];
    switch (s.kind) {
      case Step::Kind::Kernel:
        launch_kernel(p.plan.kernels[s.kernel], p.plan.kernel_fns[s.kernel], g, env, b.scalars, threads);
        break;
      case Step::Kind::Aten:
        aten_[si]->run(g, g.nodes()[s.node], env, b.scalars);
        break;
      case Step::Kind::AsStrided:
      case Step::Kind::AsStridedScatter:
        run_view(g, g.nodes()[s.node], env);
        break;
    }
    // The buffer plan: results no later step reads go back to the pool now.
    if (si < p.plan.frees.size())
      for (ir::ValueId v : p.plan.frees[si]) env[v].reset();
  }
  std::vector<at::Tensor> outs;
  outs.reserve(g.outputs().size());
  for (ir::ValueId v : g.outputs()) outs.push_back(with_layout(env[v], g.value(v).type));
  debug::Metrics::get().add(debug::Counter::GraphsExecuted);
  debug::Metrics::get().time(
      "execute", std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  return outs;
}

}  // namespace lazyjit::executor
