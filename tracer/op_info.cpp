#include "tracer/op_info.h"

#include <unordered_map>
#include <unordered_set>

#include "tracer/aten_to_ir.h"
#include "tracer/device_ops.h"

namespace lazyjit::tracer {

using c10::IValue;
using torch::jit::Stack;

namespace {

// Ops whose output sizes depend on values: they cut the graph.
const std::unordered_set<std::string>& data_dependent_ops() {
  static const std::unordered_set<std::string> s = {
      "aten::nonzero", "aten::masked_select", "aten::unique_dim", "aten::_unique",
      "aten::_unique2", "aten::unique_consecutive", "aten::unique_dim_consecutive",
      "aten::nonzero_numpy", "aten::argwhere", "aten::bincount", "aten::repeat_interleave",
      "aten::_assert_async", "aten::equal", "aten::is_nonzero", "aten::allclose",
      // Meta kernels whose shapes disagree with the CPU kernels' (PyTorch 2.13).
      "aten::native_batch_norm", "aten::_native_batch_norm_legit",
      "aten::_native_batch_norm_legit_no_training", "aten::_embedding_bag",
      "aten::_embedding_bag_forward_only", "aten::linalg_lstsq"};
  return s;
}

// The part of needs_eager that depends on the schema only.
bool eager_schema(const c10::FunctionSchema& schema) {
  if (data_dependent_ops().count(schema.name())) return true;
  for (const auto& r : schema.returns()) {
    auto k = r.real_type()->kind();
    if (k != c10::TypeKind::TensorType &&
        !(k == c10::TypeKind::ListType && r.real_type()->str() == "Tensor[]"))
      return true;  // returns a number or a bool: needs the data
  }
  // Random ops not drawn at trace time (their draws depend on tensor values)
  // run now, so draws happen in program order, as in eager.
  for (const auto& a : schema.arguments())
    if (a.real_type()->str().find("Generator") != std::string::npos) return true;
  return false;
}

bool is_view_op(const c10::FunctionSchema& schema) {
  if (schema.returns().empty()) return false;
  for (size_t r = 0; r < schema.returns().size(); ++r) {
    const auto* ai = schema.returns()[r].alias_info();
    if (!ai || ai->isWrite()) return false;
  }
  return true;
}

}  // namespace

std::string full_name(const c10::OperatorHandle& op) {
  const auto& n = op.schema().operator_name();
  return n.overload_name.empty() ? n.name : n.name + "." + n.overload_name;
}

const OpInfo& op_info(const c10::OperatorHandle& op) {
  static std::unordered_map<const void*, OpInfo> infos;  // guarded by the trace lock
  auto [it, fresh] = infos.try_emplace(&op.schema());
  if (fresh) {
    OpInfo& i = it->second;
    i.name = full_name(op);
    i.fname = functional_name(i.name, &i.inplace);
    const auto& args = op.schema().arguments();
    if (i.inplace && !(args.size() && args[0].alias_info() && args[0].alias_info()->isWrite())) i.inplace = false;
    i.special = is_special_op(i.name);
    i.index = i.name.rfind("aten::index", 0) == 0 || i.name.rfind("aten::_index_put_impl_", 0) == 0;
    if (i.name == "aten::sub.Tensor" || i.name == "aten::sub_.Tensor" || i.name == "aten::rsub.Tensor") i.sub_check = 1;
    if (i.name == "aten::sub.Scalar" || i.name == "aten::sub_.Scalar" || i.name == "aten::rsub.Scalar") i.sub_check = 2;
    i.eager = eager_schema(op.schema());
    i.draws = may_draw_at_trace_time(i.name);
    i.reduction = is_reduction_name(i.fname);
    i.training = !i.inplace && is_training_op_name(i.fname);
    i.cat = i.name == "aten::cat";
    i.view = is_view_op(op.schema());
    i.is_mutable = op.schema().is_mutable();
    for (const auto& a : args) {
      const std::string t = a.real_type()->str();
      i.bool_array_args |= t.rfind("bool[", 0) == 0;
      const bool number = t == "Scalar" || t == "Scalar?" || t == "float" || t == "float?";
      i.arg_flags.push_back((t.find("SymInt") != std::string::npos ? kSymIntArg : 0) | (number ? kNumberArg : 0));
    }
  }
  return it->second;
}

bool needs_eager(const OpInfo& info, const Stack& args) {
  if (info.eager) return true;
  for (const IValue& v : args)
    if (v.isGenerator() || v.isStorage() || v.isCapsule() || v.isObject()) return true;
  return false;
}

int aliased_arg(const c10::FunctionSchema& schema, size_t ret) {
  const auto* ai = schema.returns()[ret].alias_info();
  if (!ai) return -1;
  for (size_t i = 0; i < schema.arguments().size(); ++i) {
    const auto* a = schema.arguments()[i].alias_info();
    if (!a) continue;
    for (const auto& s : ai->beforeSets())
      if (a->beforeSets().count(s)) return static_cast<int>(i);
  }
  return -1;
}

}  // namespace lazyjit::tracer
