#include "executor/aten_call_thunk.h"

#include <ATen/core/dispatch/Dispatcher.h>

#include <optional>
#include <unordered_map>

#include "executor/aten_call.h"
#include "graph_ir/node_name.h"

namespace lazyjit::executor {

namespace {

// CUDA graph rule 5 by name (executor/graph_replay.h; the base name,
// before the overload): the ops the tracer cuts a graph at
// (tracer/op_info.cpp) and scalar reads. Programs from the tracer hold none
// today; a program loaded, bound or built another way is checked too.
const char* host_read(const std::string& name) {
  static const std::unordered_map<std::string, const char*> ops = {
      {"aten::nonzero", "output size read on the host"},
      {"aten::nonzero_numpy", "output size read on the host"},
      {"aten::argwhere", "output size read on the host"},
      {"aten::masked_select", "output size read on the host"},
      {"aten::unique_dim", "output size read on the host"},
      {"aten::_unique", "output size read on the host"},
      {"aten::_unique2", "output size read on the host"},
      {"aten::unique_consecutive", "output size read on the host"},
      {"aten::unique_dim_consecutive", "output size read on the host"},
      {"aten::bincount", "output size read on the host"},
      {"aten::repeat_interleave", "output size read on the host"},
      {"aten::_local_scalar_dense", "value read on the host (.item())"},
      {"aten::item", "value read on the host (.item())"},
      {"aten::is_nonzero", "value read on the host"},
      {"aten::equal", "value read on the host"},
      {"aten::allclose", "value read on the host"},
      {"aten::_assert_async", "value read on the host"},
  };
  auto it = ops.find(name.substr(0, name.find('.')));
  return it == ops.end() ? nullptr : it->second;
}

// Rules 5 (returns) and 6 (generators) from the schema; null when neither holds
// or the schema is unknown (running the step would fail first).
const char* schema_rule(const ir::Node& n) {
  const std::string& full = std::get<std::string>(n.attrs[0].value);
  auto dot = full.find('.');
  std::string name = full.substr(0, dot), overload = dot == std::string::npos ? "" : full.substr(dot + 1);
  std::optional<c10::OperatorHandle> op = c10::Dispatcher::singleton().findSchema({name, overload});
  if (!op) return nullptr;
  const c10::FunctionSchema& schema = op->schema();
  for (const c10::Argument& r : schema.returns()) {
    const std::string type = r.real_type()->str();
    if (type != "Tensor" && type != "Tensor[]" && type != "Tensor?") return "returns a number, read on the host";
  }
  for (size_t i = 0; i < schema.arguments().size() && i + 1 < n.attrs.size(); ++i)
    if (schema.arguments()[i].real_type()->str().find("Generator") != std::string::npos &&
        !std::holds_alternative<std::monostate>(n.attrs[i + 1].value))
      return "draws from an explicit generator, whose state would not advance between replays";
  return nullptr;
}

std::string capture_rule(const ir::Node& n) {
  const char* why = host_read(ir::node_op_name(n, "lazyjit::"));
  if (!why) why = schema_rule(n);
  return why ? why : "";
}

class AtenCallThunk final : public Thunk {
 public:
  AtenCallThunk(const lowering::Program& p, uint32_t node, c10::Device device)
      : AtenCallThunk(p, node, p.graph.nodes().at(node), device) {}

  void run(StepRun& r) const override { call_.run(g_, n_, r.env, r.bindings.scalars); }

 private:
  AtenCallThunk(const lowering::Program& p, uint32_t node, const ir::Node& n, c10::Device device)
      : Thunk(n.operands, n.outputs, node, capture_rule(n)), g_(p.graph), n_(n),
        call_(p.graph, n, device, /*onednn_gemms=*/!p.plan.op_by_op) {}

  const ir::Graph& g_;
  const ir::Node& n_;
  AtenCall call_;
};

}  // namespace

std::unique_ptr<Thunk> aten_call_thunk(const lowering::Program& p, size_t step, c10::Device device) {
  return std::make_unique<AtenCallThunk>(p, p.plan.steps.at(step).node, device);
}

}  // namespace lazyjit::executor
