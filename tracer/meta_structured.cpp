#include "tracer/meta_structured.h"

#include <ATen/ops/add_meta_dispatch.h>
#include <ATen/ops/argmax_meta_dispatch.h>
#include <ATen/ops/argmin_meta_dispatch.h>
#include <ATen/ops/bmm_meta_dispatch.h>
#include <ATen/ops/cumsum_meta_dispatch.h>
#include <ATen/ops/div_meta_dispatch.h>
#include <ATen/ops/mul_meta_dispatch.h>
#include <ATen/ops/sub_meta_dispatch.h>
#include <ATen/ops/topk_meta_dispatch.h>

#include <optional>
#include <string>
#include <unordered_map>

namespace lazyjit::tracer {

using c10::IValue;
using torch::jit::Stack;

namespace {

enum class Op : uint8_t { None, Add, Sub, Mul, Div, DivMode, Bmm, Cumsum, Argmax, Argmin, Topk };

Op classify(const c10::FunctionSchema& s) {
  const std::string& n = s.name();
  const std::string& o = s.overload_name();
  if (o == "Tensor") {
    if (n == "aten::add") return Op::Add;
    if (n == "aten::sub") return Op::Sub;
    if (n == "aten::mul") return Op::Mul;
    if (n == "aten::div") return Op::Div;
  }
  if (n == "aten::div" && o == "Tensor_mode") return Op::DivMode;
  if (!o.empty()) return Op::None;
  if (n == "aten::bmm") return Op::Bmm;
  if (n == "aten::cumsum") return Op::Cumsum;
  if (n == "aten::argmax") return Op::Argmax;
  if (n == "aten::argmin") return Op::Argmin;
  if (n == "aten::topk") return Op::Topk;
  return Op::None;
}

Op describe(const c10::OperatorHandle& op) {
  static std::unordered_map<const c10::FunctionSchema*, Op> cache;  // guarded by the trace lock
  const c10::FunctionSchema* s = &op.schema();
  auto it = cache.find(s);
  if (it == cache.end()) it = cache.emplace(s, classify(*s)).first;
  return it->second;
}

// A tensor argument, meta or a CPU 0-d one (a wrapped number or scalar).
const at::Tensor* tensor(const IValue& v) {
  if (!v.isTensor()) return nullptr;
  const at::Tensor& t = v.toTensor();
  if (!t.defined()) return nullptr;
  if (!t.is_meta() && !(t.device().is_cpu() && t.dim() == 0)) return nullptr;
  return &t;
}

bool meta_tensor(const IValue& v) { return tensor(v) && v.toTensor().is_meta(); }

std::optional<int64_t> opt_int(const IValue& v, bool* ok) {
  if (v.isNone()) return std::nullopt;
  if (!v.isInt()) *ok = false;
  return *ok ? std::optional<int64_t>(v.toInt()) : std::nullopt;
}

bool run(Op kind, const Stack& a, Stack* rets) {
  bool ok = true;
  switch (kind) {
    case Op::Add: case Op::Sub: case Op::Mul: case Op::Div: case Op::DivMode: {
      const at::Tensor* x = tensor(a[0]);
      const at::Tensor* y = tensor(a[1]);
      if (!x || !y || !(x->is_meta() || y->is_meta())) return false;
      if (kind == Op::Add || kind == Op::Sub) {
        if (!a[2].isScalar()) return false;
        const c10::Scalar alpha = a[2].toScalar();
        rets->push_back(kind == Op::Add ? at::meta::add(*x, *y, alpha) : at::meta::sub(*x, *y, alpha));
      } else if (kind == Op::Mul) {
        rets->push_back(at::meta::mul(*x, *y));
      } else if (kind == Op::Div) {
        rets->push_back(at::meta::div(*x, *y));
      } else {
        if (!a[2].isNone() && !a[2].isString()) return false;
        std::optional<c10::string_view> mode;
        std::string m;
        if (a[2].isString()) mode = m = a[2].toStringRef();
        rets->push_back(at::meta::div(*x, *y, mode));
      }
      return true;
    }
    case Op::Bmm:
      if (!meta_tensor(a[0]) || !meta_tensor(a[1])) return false;
      rets->push_back(at::meta::bmm(a[0].toTensor(), a[1].toTensor()));
      return true;
    case Op::Cumsum: {
      if (!meta_tensor(a[0]) || !a[1].isInt()) return false;
      std::optional<int64_t> dt = opt_int(a[2], &ok);
      if (!ok) return false;
      std::optional<at::ScalarType> dtype;
      if (dt) dtype = static_cast<at::ScalarType>(*dt);
      rets->push_back(at::meta::cumsum(a[0].toTensor(), a[1].toInt(), dtype));
      return true;
    }
    case Op::Argmax: case Op::Argmin: {
      if (!meta_tensor(a[0]) || !a[2].isBool()) return false;
      std::optional<int64_t> dim = opt_int(a[1], &ok);
      if (!ok) return false;
      rets->push_back(kind == Op::Argmax ? at::meta::argmax(a[0].toTensor(), dim, a[2].toBool())
                                         : at::meta::argmin(a[0].toTensor(), dim, a[2].toBool()));
      return true;
    }
    case Op::Topk: {
      if (!meta_tensor(a[0]) || !a[1].isInt() || !a[2].isInt() || !a[3].isBool() || !a[4].isBool()) return false;
      auto [values, indices] = at::meta::topk(a[0].toTensor(), a[1].toInt(), a[2].toInt(), a[3].toBool(), a[4].toBool());
      rets->push_back(values);
      rets->push_back(indices);
      return true;
    }
    case Op::None:
      return false;
  }
  return false;
}

}  // namespace

bool meta_structured(const c10::OperatorHandle& op, const Stack& metas, Stack* rets) {
  Op kind = describe(op);
  if (kind == Op::None || metas.size() != op.schema().arguments().size()) return false;
  try {
    if (run(kind, metas, rets)) return true;
  } catch (const std::exception&) {
    // An invalid call: the registered meta kernel raises eager's error.
  }
  rets->clear();
  return false;
}

}  // namespace lazyjit::tracer
