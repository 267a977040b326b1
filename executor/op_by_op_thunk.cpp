#include "executor/op_by_op_thunk.h"

#include <algorithm>
#include <unordered_set>

#include "bridge/aten_ir.h"
#include "executor/dead_after.h"
#include "executor/op_by_op_node.h"

namespace lazyjit::executor {

namespace {

// CUDA graph rule 3 (executor/graph_replay.h).
constexpr const char* kNotChecked = "runs op by op through ATen (not checked for capture)";

class OpByOpNodeThunk final : public Thunk {
 public:
  OpByOpNodeThunk(const lowering::Program& p, size_t step, uint32_t node, c10::Device device, bool broadcast)
      : Thunk(p.graph.nodes().at(node).operands, p.graph.nodes().at(node).outputs, node, kNotChecked), p_(p),
        g_(p.graph), n_(p.graph.nodes()[node]), step_(step), device_(device),
        into_operand_(may_compute_into_operand(p.graph, n_)), broadcast_(broadcast) {}

  void run(StepRun& r) const override {
    run_op_by_op_node(g_, n_, r.env, r.bindings.scalars, device_,
                      into_operand_ ? writable_operand(r.env, r.released) : at::Tensor(), broadcast_);
  }

 private:
  // An operand whose buffer this step may compute its result in, as eager's
  // in-place ops do (an AdamW update's chain of elementwise ops: each link
  // one buffer fewer at once), of the output's dtype and layout: a step
  // result no later step reads, held by nothing else (dead_after); or one in
  // the memory of an input released by now (Bindings::released: the input
  // itself at its last reader, or a result computed there no later step
  // reads), preferred: the chain then ends where the caller's value is. None
  // when no operand is.
  at::Tensor writable_operand(const std::vector<at::Tensor>& env,
                              const std::unordered_set<const c10::StorageImpl*>* released) const {
    const ir::TensorType& out = g_.value(n_.outputs[0]).type;
    const at::ScalarType dtype = bridge::to_aten(out.dtype);
    at::Tensor dead;
    for (ir::ValueId v : n_.operands) {
      const ir::TensorType& t = g_.value(v).type;
      const at::Tensor& e = env[v];
      if (t.dtype != out.dtype || t.sizes != out.sizes || t.strides != out.strides || !e.defined() ||
          e.scalar_type() != dtype || !e.sizes().equals(out.sizes) || !e.strides().equals(out.strides))
        continue;
      if (released && e.has_storage() && released->count(e.storage().unsafeGetStorageImpl()) &&
          e.storage_offset() == 0 && e.storage().nbytes() == e.nbytes() &&
          (g_.producer(v).kind == ir::OpKind::Input || (read_last_here(v) && e.use_count() == 1)) &&
          !overlapped(env, e))
        return e.alias();  // a handle of its own: the input's is the caller's
      if (!dead.defined() && dead_after(p_, step_, v, env)) dead = e;
    }
    return dead;
  }
  // Whether another operand reads the memory of `e` other than exactly as `e` (a view).
  bool overlapped(const std::vector<at::Tensor>& env, const at::Tensor& e) const {
    for (ir::ValueId w : n_.operands) {
      const at::Tensor& o = env[w];
      if (o.defined() && o.has_storage() && o.storage().is_alias_of(e.storage()) &&
          !(o.storage_offset() == e.storage_offset() && o.sizes().equals(e.sizes()) && o.strides().equals(e.strides())))
        return true;
    }
    return false;
  }
  bool read_last_here(ir::ValueId v) const {
    if (step_ >= p_.plan.frees.size()) return false;
    const auto& f = p_.plan.frees[step_];
    return std::find(f.begin(), f.end(), v) != f.end();
  }

  const lowering::Program& p_;
  const ir::Graph& g_;
  const ir::Node& n_;
  size_t step_;
  c10::Device device_;
  bool into_operand_;
  bool broadcast_;
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

std::unique_ptr<Thunk> op_by_op_thunk(const lowering::Program& p, size_t step, c10::Device device,
                                      bool broadcast_output) {
  const lowering::Step& s = p.plan.steps.at(step);
  if (s.group >= 0) return std::make_unique<OpByOpLayerNormThunk>(p, s.node, p.plan.layer_norms.at(s.group), device);
  return std::make_unique<OpByOpNodeThunk>(p, step, s.node, device, broadcast_output);
}

}  // namespace lazyjit::executor
