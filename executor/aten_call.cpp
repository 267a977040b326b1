#include "executor/aten_call.h"

#include <ATen/ATen.h>

#include "bridge/aten_ir.h"
#include "executor/tensor_layout.h"

namespace lazyjit::executor {

using ir::OpKind;

namespace {

c10::OperatorHandle resolve(const ir::Node& n) {
  const std::string& full = std::get<std::string>(n.attrs[0].value);
  auto dot = full.find('.');
  std::string name = full.substr(0, dot), overload = dot == std::string::npos ? "" : full.substr(dot + 1);
  return c10::Dispatcher::singleton().findSchemaOrThrow(name.c_str(), overload.c_str());
}

bool is_kind(const c10::TypePtr& t, c10::TypeKind k) {
  return t->kind() == k || (t->kind() == c10::TypeKind::OptionalType &&
                            t->castRaw<c10::OptionalType>()->getElementType()->kind() == k);
}

}  // namespace

AtenCall::AtenCall(const ir::Graph& g, const ir::Node& n, c10::Device device, bool onednn_gemms)
    : op_(resolve(n)) {
  if (onednn_gemms) gemm_ = gemm_kind(std::get<std::string>(n.attrs[0].value));
  const auto& schema = op_.schema();
  auto operand = [&](int32_t k, const c10::Argument& arg) {
    Operand o;
    if (k < 0) {
      o.value = static_cast<ir::ValueId>(-1);
      return o;
    }
    o.value = n.operands.at(k);
    const ir::Node& p = g.producer(o.value);
    if (p.kind != OpKind::Scalar) return o;
    o.scalar_slot = static_cast<int32_t>(std::get<int64_t>(p.attrs[0].value));
    o.dtype = g.value(o.value).type.dtype;
    o.wrapped = p.attrs.size() > 1 && std::get<bool>(p.attrs[1].value);
    const c10::TypePtr& t = arg.real_type();
    o.as = is_kind(t, c10::TypeKind::FloatType)    ? ScalarAs::Double
           : is_kind(t, c10::TypeKind::NumberType) ? ScalarAs::Number
                                                   : ScalarAs::Tensor;
    return o;
  };
  for (size_t i = 0; i < schema.arguments().size(); ++i) {
    const c10::Argument& arg = schema.arguments()[i];
    const std::string type = arg.real_type()->str();
    Arg a;
    std::visit(
        [&](const auto& x) {
          using T = std::decay_t<decltype(x)>;
          if constexpr (std::is_same_v<T, std::monostate>) {
            a.constant = arg.real_type()->kind() == c10::TypeKind::TensorType ? c10::IValue(at::Tensor())
                                                                               : c10::IValue();
          } else if constexpr (std::is_same_v<T, ir::OperandRef>) {
            a.kind = Arg::Kind::Operand;
            a.operands.push_back(operand(x.index, arg));
          } else if constexpr (std::is_same_v<T, ir::OperandListRef>) {
            a.kind = type.find('?') != std::string::npos ? Arg::Kind::OptionalTensorList : Arg::Kind::TensorList;
            for (int32_t k : x.indices) a.operands.push_back(operand(k, arg));
          } else if constexpr (std::is_same_v<T, std::string>) {
            // Device arguments name the lazyjit device; the step runs where
            // programs run (the CPU, or the GPU under the CUDA target).
            a.constant = type.find("Device") != std::string::npos ? c10::IValue(device) : c10::IValue(x);
          } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
            if (type.rfind("bool[", 0) == 0) {
              c10::List<bool> l;
              for (int64_t b : x) l.push_back(b != 0);
              a.constant = l;
            } else {
              a.constant = x;
            }
          } else {
            a.constant = x;
          }
        },
        n.attrs.at(i + 1).value);
    a.mutated = arg.alias_info() && arg.alias_info()->isWrite() && a.kind == Arg::Kind::Operand;
    args_.push_back(std::move(a));
  }
  for (const c10::Argument& r : schema.returns()) return_aliases_.push_back(r.alias_info() != nullptr);
}

c10::IValue AtenCall::operand_value(const ir::Graph& g, const Operand& o, const std::vector<at::Tensor>& env,
                                    const std::vector<int64_t>& scalars) const {
  if (o.scalar_slot < 0) {
    const at::Tensor& t = env[o.value];
    return t.defined() ? with_layout(t, g.value(o.value).type) : t;
  }
  c10::Scalar s = bridge::scalar_from_slot(scalars.at(o.scalar_slot), o.dtype);
  switch (o.as) {
    case ScalarAs::Double: return s.toDouble();
    case ScalarAs::Number: return s;
    case ScalarAs::Tensor: break;
  }
  at::Tensor z = at::scalar_tensor(s, at::TensorOptions().dtype(bridge::to_aten(o.dtype)));
  if (o.wrapped) z.unsafeGetTensorImpl()->set_wrapped_number(true);
  return z;
}

void AtenCall::run(const ir::Graph& g, const ir::Node& n, std::vector<at::Tensor>& env,
                   const std::vector<int64_t>& scalars) const {
  torch::jit::Stack stack;
  stack.reserve(args_.size());
  std::vector<at::Tensor> mutated;
  for (const Arg& a : args_) {
    switch (a.kind) {
      case Arg::Kind::Constant: stack.push_back(a.constant); break;
      case Arg::Kind::Operand: {
        c10::IValue iv = operand_value(g, a.operands[0], env, scalars);
        if (a.mutated && iv.isTensor()) {
          iv = iv.toTensor().clone(at::MemoryFormat::Preserve);
          mutated.push_back(iv.toTensor());
        }
        stack.push_back(std::move(iv));
        break;
      }
      case Arg::Kind::TensorList: {
        std::vector<at::Tensor> l;
        for (const Operand& o : a.operands) l.push_back(operand_value(g, o, env, scalars).toTensor());
        stack.push_back(std::move(l));
        break;
      }
      case Arg::Kind::OptionalTensorList: {
        c10::List<std::optional<at::Tensor>> l;
        for (const Operand& o : a.operands)
          l.push_back(o.value == static_cast<ir::ValueId>(-1)
                          ? std::optional<at::Tensor>()
                          : std::optional<at::Tensor>(operand_value(g, o, env, scalars).toTensor()));
        stack.push_back(std::move(l));
        break;
      }
    }
  }
  if (gemm_ == Gemm::None || !run_fast_gemm(gemm_, stack)) op_.callBoxed(&stack);
  size_t out = 0;
  auto bind = [&](const at::Tensor& t) {
    if (!t.defined()) return;  // the tracer saw it undefined too: not a value
    ir::ValueId v = n.outputs.at(out++);
    env[v] = with_layout(t, g.value(v).type);
  };
  for (const at::Tensor& t : mutated) bind(t);
  for (size_t r = 0; r < return_aliases_.size(); ++r) {
    if (return_aliases_[r]) continue;  // returns a mutated argument: bound above
    const c10::IValue& iv = stack.at(r);
    if (iv.isTensor()) bind(iv.toTensor());
    else if (iv.isTensorList())
      for (const at::Tensor& t : iv.toTensorVector()) bind(t);
  }
}

}  // namespace lazyjit::executor
