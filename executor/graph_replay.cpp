#include "executor/graph_replay.h"

#include <ATen/core/dispatch/Dispatcher.h>

#include <unordered_map>

#include "executor/collective_step.h"
#include "lowering/step_label.h"

namespace lazyjit::executor {

using lowering::Step;

namespace {

// Rule 5 by name (the base name, before the overload): the ops the tracer cuts
// a graph at (tracer/op_info.cpp) and scalar reads. Programs from the tracer
// hold none today; a program loaded, bound or built another way is checked too.
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

ReplayVerdict blocked(int64_t step, std::string op, std::string reason) {
  return ReplayVerdict{false, step, std::move(op), std::move(reason)};
}

}  // namespace

std::string ReplayVerdict::why() const {
  if (replayable) return "";
  return step < 0 ? reason : "step " + std::to_string(step) + " " + op + ": " + reason;
}

std::string ReplayVerdict::text() const { return replayable ? "yes" : "no — " + why(); }

ReplayVerdict graph_replay_verdict(const lowering::Program& p) {
  if (p.plan.op_by_op) return blocked(-1, "", "the program runs op by op (its compile is pending)");         // 1
  if (p.plan.check_stores)
    return blocked(-1, "", "NaN checks (LAZYJIT_DEBUG_NANS) read each kernel's NaN flag on the host");  // 2
  bool launches = false;
  for (size_t si = 0; si < p.plan.steps.size(); ++si) {
    const Step& s = p.plan.steps[si];
    auto step = static_cast<int64_t>(si);
    launches |= s.kind != Step::Kind::AsStrided;
    if (s.kind == Step::Kind::OpByOp)                                                                      // 3
      return blocked(step, lowering::step_label(p, s).first, "runs op by op through ATen (not checked for capture)");
    if (s.kind != Step::Kind::Aten) continue;
    const ir::Node& n = p.graph.nodes()[s.node];
    std::string op = lowering::step_label(p, s).first;
    if (decode_collective(p.graph, n))                                                                     // 4
      return blocked(step, op, "a collective: the process group runs it off the stream, waited for on the host");
    if (const char* why = host_read(op)) return blocked(step, op, why);                                   // 5
    if (const char* why = schema_rule(n)) return blocked(step, op, why);                                  // 5, 6
  }
  if (!launches) return blocked(-1, "", "nothing to launch (views of its inputs only)");                 // 7
  return {};
}

}  // namespace lazyjit::executor
