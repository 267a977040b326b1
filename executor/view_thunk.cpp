#include "executor/view_thunk.h"

#include <ATen/ATen.h>

#include "executor/dead_after.h"
#include "executor/tensor_layout.h"

namespace lazyjit::executor {

namespace {

using ir::OpKind;

// `reuse`: a scatter may write into its base's buffer instead of a copy of it.
void run_view(const ir::Graph& g, const ir::Node& n, std::vector<at::Tensor>& env, bool reuse) {
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
  at::Tensor out = reuse ? base : base.clone(at::MemoryFormat::Preserve);
  at::Tensor out_flat = out.as_strided({out.numel()}, {1}, out.storage_offset());
  out_flat.as_strided(sizes, strides, out.storage_offset() + offset).copy_(env[n.operands[1]]);
  env[n.outputs[0]] = out;
}

class AsStridedThunk final : public Thunk {
 public:
  AsStridedThunk(const lowering::Program& p, uint32_t node)
      : Thunk(p.graph.nodes().at(node).operands, p.graph.nodes().at(node).outputs, node), g_(p.graph),
        n_(p.graph.nodes()[node]) {}

  void run(StepRun& r) const override { run_view(g_, n_, r.env, /*reuse=*/false); }

 private:
  const ir::Graph& g_;
  const ir::Node& n_;
};

class AsStridedScatterThunk final : public Thunk {
 public:
  AsStridedScatterThunk(const lowering::Program& p, size_t step, uint32_t node)
      : Thunk(p.graph.nodes().at(node).operands, p.graph.nodes().at(node).outputs, node), p_(p), step_(step),
        n_(p.graph.nodes()[node]) {}

  void run(StepRun& r) const override {
    // A chain of scatters into one buffer (DDP filling a gradient bucket slice
    // by slice) copies the buffer once, not once per slice: a base this step
    // may overwrite (dead_after) and that the value written does not alias is
    // written in place.
    ir::ValueId base = n_.operands[0];
    bool reuse = dead_after(p_, step_, base, r.env) && !r.env[n_.operands[1]].is_alias_of(r.env[base]);
    run_view(p_.graph, n_, r.env, reuse);
  }

 private:
  const lowering::Program& p_;
  size_t step_;
  const ir::Node& n_;
};

}  // namespace

std::unique_ptr<Thunk> view_thunk(const lowering::Program& p, size_t step) {
  const lowering::Step& s = p.plan.steps.at(step);
  if (s.kind == lowering::Step::Kind::AsStridedScatter) return std::make_unique<AsStridedScatterThunk>(p, step, s.node);
  return std::make_unique<AsStridedThunk>(p, s.node);
}

}  // namespace lazyjit::executor
