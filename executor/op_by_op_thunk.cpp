#include "executor/op_by_op_thunk.h"

#include "executor/op_by_op_node.h"

namespace lazyjit::executor {

namespace {

// CUDA graph rule 3 (executor/cuda/graph_replay.h).
constexpr const char* kNotChecked = "runs op by op through ATen (not checked for capture)";

class OpByOpNodeThunk final : public Thunk {
 public:
  OpByOpNodeThunk(const lowering::Program& p, uint32_t node, c10::Device device)
      : Thunk(p.graph.nodes().at(node).operands, p.graph.nodes().at(node).outputs, node, kNotChecked), g_(p.graph),
        n_(p.graph.nodes()[node]), device_(device) {}

  void run(StepRun& r) const override { run_op_by_op_node(g_, n_, r.env, r.bindings.scalars, device_); }

 private:
  const ir::Graph& g_;
  const ir::Node& n_;
  c10::Device device_;
};

class OpByOpLayerNormThunk final : public Thunk {
 public:
  OpByOpLayerNormThunk(const lowering::Program& p, uint32_t node, const lowering::OpByOpLayerNorm& ln,
                       c10::Device device)
      : Thunk(ln.reads(), ln.makes(), node, kNotChecked), g_(p.graph), ln_(ln), device_(device) {}

  void run(StepRun& r) const override { run_op_by_op_layer_norm(g_, ln_, r.env, r.bindings.scalars, device_); }

 private:
  const ir::Graph& g_;
  const lowering::OpByOpLayerNorm& ln_;
  c10::Device device_;
};

}  // namespace

std::unique_ptr<Thunk> op_by_op_thunk(const lowering::Program& p, size_t step, c10::Device device) {
  const lowering::Step& s = p.plan.steps.at(step);
  if (s.group >= 0) return std::make_unique<OpByOpLayerNormThunk>(p, s.node, p.plan.layer_norms.at(s.group), device);
  return std::make_unique<OpByOpNodeThunk>(p, s.node, device);
}

}  // namespace lazyjit::executor
