#include "tracer/meta_structured.h"

#include <ATen/ops/add_meta_dispatch.h>
#include <ATen/ops/all_meta_dispatch.h>
#include <ATen/ops/amax_meta_dispatch.h>
#include <ATen/ops/amin_meta_dispatch.h>
#include <ATen/ops/any_meta_dispatch.h>
#include <ATen/ops/argmax_meta_dispatch.h>
#include <ATen/ops/argmin_meta_dispatch.h>
#include <ATen/ops/baddbmm_meta_dispatch.h>
#include <ATen/ops/bitwise_and_meta_dispatch.h>
#include <ATen/ops/bitwise_or_meta_dispatch.h>
#include <ATen/ops/bitwise_xor_meta_dispatch.h>
#include <ATen/ops/bmm_meta_dispatch.h>
#include <ATen/ops/cumprod_meta_dispatch.h>
#include <ATen/ops/cumsum_meta_dispatch.h>
#include <ATen/ops/div_meta_dispatch.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/ops/gather_meta_dispatch.h>
#include <ATen/ops/gelu_backward_meta_dispatch.h>
#include <ATen/ops/index_meta_dispatch.h>
#include <ATen/ops/isin_meta_dispatch.h>
#include <ATen/ops/linalg_vector_norm_meta_dispatch.h>
#include <ATen/ops/_log_softmax_backward_data_meta_dispatch.h>
#include <ATen/ops/mse_loss_meta_dispatch.h>
#include <ATen/ops/mul_meta_dispatch.h>
#include <ATen/ops/nll_loss_backward_meta_dispatch.h>
#include <ATen/ops/nll_loss_forward_meta_dispatch.h>
#include <ATen/ops/norm_meta_dispatch.h>
#include <ATen/ops/scatter_meta_dispatch.h>
#include <ATen/ops/sigmoid_backward_meta_dispatch.h>
#include <ATen/ops/silu_backward_meta_dispatch.h>
#include <ATen/ops/_softmax_backward_data_meta_dispatch.h>
#include <ATen/ops/softplus_meta_dispatch.h>
#include <ATen/ops/sort_meta_dispatch.h>
#include <ATen/ops/sub_meta_dispatch.h>
#include <ATen/ops/tanh_backward_meta_dispatch.h>
#include <ATen/ops/threshold_backward_meta_dispatch.h>
#include <ATen/ops/topk_meta_dispatch.h>

#include <optional>
#include <string>
#include <unordered_map>

#include "tracer/ivalue_ints.h"

namespace lazyjit::tracer {

using c10::IValue;
using torch::jit::Stack;

namespace {

enum class Op : uint8_t {
  None, Add, Sub, Mul, Div, DivMode, Bmm, Baddbmm, Cumsum, Argmax, Argmin, Topk, Sort, Gather, MaskedFill,
  NllLoss, NllLossBackward, MseLoss, GeluBackward, TanhBackward, SigmoidBackward, SiluBackward, ThresholdBackward,
  SoftmaxBackward, LogSoftmaxBackward, Amax, Amin, Any, AnyDim, AnyDims, All, AllDim, AllDims, Index, BitwiseAnd,
  BitwiseOr, BitwiseXor, VectorNorm, ScatterValue, ScatterSrc, Isin, Cumprod, Softplus, Norm, Flip,
  ArangeOut,
};

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
  if (n == "aten::masked_fill_" && (o == "Scalar" || o == "Tensor")) return Op::MaskedFill;
  if (n == "aten::sort" && o == "stable") return Op::Sort;
  if (n == "aten::any" || n == "aten::all") {
    bool any = n == "aten::any";
    if (o.empty()) return any ? Op::Any : Op::All;
    if (o == "dim") return any ? Op::AnyDim : Op::AllDim;
    if (o == "dims") return any ? Op::AnyDims : Op::AllDims;
  }
  if (n == "aten::index" && o == "Tensor") return Op::Index;
  if (o == "Tensor") {
    if (n == "aten::bitwise_and") return Op::BitwiseAnd;
    if (n == "aten::bitwise_or") return Op::BitwiseOr;
    if (n == "aten::bitwise_xor") return Op::BitwiseXor;
  }
  if (n == "aten::scatter" && o == "value") return Op::ScatterValue;
  if (n == "aten::scatter" && o == "src") return Op::ScatterSrc;
  if (n == "aten::isin" && o == "Tensor_Tensor") return Op::Isin;
  if (n == "aten::norm" && o == "ScalarOpt_dim") return Op::Norm;
  if (n == "aten::arange" && o == "start_out") return Op::ArangeOut;
  if (!o.empty()) return Op::None;
  if (n == "aten::bmm") return Op::Bmm;
  if (n == "aten::cumsum") return Op::Cumsum;
  if (n == "aten::argmax") return Op::Argmax;
  if (n == "aten::argmin") return Op::Argmin;
  if (n == "aten::topk") return Op::Topk;
  if (n == "aten::baddbmm") return Op::Baddbmm;
  if (n == "aten::gather") return Op::Gather;
  if (n == "aten::nll_loss_forward") return Op::NllLoss;
  if (n == "aten::nll_loss_backward") return Op::NllLossBackward;
  if (n == "aten::mse_loss") return Op::MseLoss;
  if (n == "aten::gelu_backward") return Op::GeluBackward;
  if (n == "aten::tanh_backward") return Op::TanhBackward;
  if (n == "aten::sigmoid_backward") return Op::SigmoidBackward;
  if (n == "aten::silu_backward") return Op::SiluBackward;
  if (n == "aten::threshold_backward") return Op::ThresholdBackward;
  if (n == "aten::_softmax_backward_data") return Op::SoftmaxBackward;
  if (n == "aten::_log_softmax_backward_data") return Op::LogSoftmaxBackward;
  if (n == "aten::amax") return Op::Amax;
  if (n == "aten::amin") return Op::Amin;
  if (n == "aten::linalg_vector_norm") return Op::VectorNorm;
  if (n == "aten::cumprod") return Op::Cumprod;
  if (n == "aten::softplus") return Op::Softplus;
  if (n == "aten::flip") return Op::Flip;
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

std::optional<at::ScalarType> opt_dtype(const IValue& v, bool* ok) {
  std::optional<int64_t> d = opt_int(v, ok);
  return d ? std::optional<at::ScalarType>(static_cast<at::ScalarType>(*d)) : std::nullopt;
}

// An optional tensor argument: None, or a meta tensor.
bool opt_tensor(const IValue& v, std::optional<at::Tensor>* out) {
  if (v.isNone()) return true;
  if (!meta_tensor(v)) return false;
  *out = v.toTensor();
  return true;
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
    case Op::Baddbmm:
      if (!meta_tensor(a[0]) || !meta_tensor(a[1]) || !meta_tensor(a[2]) || !a[3].isScalar() || !a[4].isScalar())
        return false;
      rets->push_back(at::meta::baddbmm(a[0].toTensor(), a[1].toTensor(), a[2].toTensor(), a[3].toScalar(),
                                        a[4].toScalar()));
      return true;
    case Op::Sort: {  // sort.stable(self, *, stable, dim, descending); plain sort calls it
      if (!meta_tensor(a[0]) || !(a[1].isNone() || a[1].isBool()) || !a[2].isInt() || !a[3].isBool()) return false;
      std::optional<bool> stable;
      if (a[1].isBool()) stable = a[1].toBool();
      auto [values, indices] = at::meta::sort(a[0].toTensor(), stable, a[2].toInt(), a[3].toBool());
      rets->push_back(values);
      rets->push_back(indices);
      return true;
    }
    case Op::Gather:
      if (!meta_tensor(a[0]) || !a[1].isInt() || !meta_tensor(a[2]) || !a[3].isBool()) return false;
      rets->push_back(at::meta::gather(a[0].toTensor(), a[1].toInt(), a[2].toTensor(), a[3].toBool()));
      return true;
    case Op::NllLoss: case Op::NllLossBackward: {
      size_t g = kind == Op::NllLossBackward ? 1 : 0;  // grad_output first in the backward
      std::optional<at::Tensor> weight;
      if (!meta_tensor(a[g]) || !meta_tensor(a[g + 1]) || !opt_tensor(a[g + 2], &weight) || !a[g + 3].isInt() ||
          !a[g + 4].isInt())
        return false;
      if (g == 0) {
        auto [out, total] = at::meta::nll_loss_forward(a[0].toTensor(), a[1].toTensor(), weight, a[3].toInt(),
                                                       a[4].toInt());
        rets->push_back(out);
        rets->push_back(total);
      } else {
        if (!meta_tensor(a[0]) || !meta_tensor(a[6])) return false;
        rets->push_back(at::meta::nll_loss_backward(a[0].toTensor(), a[1].toTensor(), a[2].toTensor(), weight,
                                                    a[4].toInt(), a[5].toInt(), a[6].toTensor()));
      }
      return true;
    }
    case Op::MseLoss:
      if (!meta_tensor(a[0]) || !meta_tensor(a[1]) || !a[2].isInt()) return false;
      rets->push_back(at::meta::mse_loss(a[0].toTensor(), a[1].toTensor(), a[2].toInt()));
      return true;
    case Op::GeluBackward: case Op::TanhBackward: case Op::SigmoidBackward: case Op::SiluBackward:
    case Op::ThresholdBackward: {
      if (!meta_tensor(a[0]) || !meta_tensor(a[1])) return false;
      const at::Tensor& g = a[0].toTensor();
      const at::Tensor& x = a[1].toTensor();
      if (kind == Op::GeluBackward) {
        if (!a[2].isString()) return false;
        rets->push_back(at::meta::gelu_backward(g, x, a[2].toStringRef()));
      } else if (kind == Op::ThresholdBackward) {
        if (!a[2].isScalar()) return false;
        rets->push_back(at::meta::threshold_backward(g, x, a[2].toScalar()));
      } else {
        rets->push_back(kind == Op::TanhBackward      ? at::meta::tanh_backward(g, x)
                        : kind == Op::SigmoidBackward ? at::meta::sigmoid_backward(g, x)
                                                      : at::meta::silu_backward(g, x));
      }
      return true;
    }
    case Op::SoftmaxBackward: case Op::LogSoftmaxBackward: {
      if (!meta_tensor(a[0]) || !meta_tensor(a[1]) || !a[2].isInt() || !a[3].isInt()) return false;
      auto dt = static_cast<at::ScalarType>(a[3].toInt());
      rets->push_back(kind == Op::SoftmaxBackward
                          ? at::meta::_softmax_backward_data(a[0].toTensor(), a[1].toTensor(), a[2].toInt(), dt)
                          : at::meta::_log_softmax_backward_data(a[0].toTensor(), a[1].toTensor(), a[2].toInt(), dt));
      return true;
    }
    case Op::Amax: case Op::Amin: {
      std::vector<int64_t> dims;
      if (!meta_tensor(a[0]) || !int_list(a[1], &dims) || !a[2].isBool()) return false;
      rets->push_back(kind == Op::Amax ? at::meta::amax(a[0].toTensor(), dims, a[2].toBool())
                                       : at::meta::amin(a[0].toTensor(), dims, a[2].toBool()));
      return true;
    }
    case Op::Any: case Op::All:
      if (!meta_tensor(a[0])) return false;
      rets->push_back(kind == Op::Any ? at::meta::any(a[0].toTensor()) : at::meta::all(a[0].toTensor()));
      return true;
    case Op::AnyDim: case Op::AllDim:
      if (!meta_tensor(a[0]) || !a[1].isInt() || !a[2].isBool()) return false;
      rets->push_back(kind == Op::AnyDim ? at::meta::any(a[0].toTensor(), a[1].toInt(), a[2].toBool())
                                         : at::meta::all(a[0].toTensor(), a[1].toInt(), a[2].toBool()));
      return true;
    case Op::AnyDims: case Op::AllDims: {
      std::vector<int64_t> dims;
      if (!meta_tensor(a[0]) || !(a[1].isNone() || int_list(a[1], &dims)) || !a[2].isBool()) return false;
      at::OptionalIntArrayRef d = a[1].isNone() ? at::OptionalIntArrayRef() : at::OptionalIntArrayRef(dims);
      rets->push_back(kind == Op::AnyDims ? at::meta::any(a[0].toTensor(), d, a[2].toBool())
                                          : at::meta::all(a[0].toTensor(), d, a[2].toBool()));
      return true;
    }
    case Op::Index: {
      // Integer indices only: a bool mask's result size is data (nonzero).
      if (!meta_tensor(a[0]) || !a[1].isList()) return false;
      c10::List<std::optional<at::Tensor>> indices;
      for (const IValue& e : a[1].toListRef()) {
        if (e.isNone()) { indices.push_back(std::nullopt); continue; }
        if (!meta_tensor(e)) return false;
        at::ScalarType t = e.toTensor().scalar_type();
        if (t != at::kLong && t != at::kInt) return false;
        indices.push_back(e.toTensor());
      }
      rets->push_back(at::meta::index(a[0].toTensor(), indices));
      return true;
    }
    case Op::BitwiseAnd: case Op::BitwiseOr: case Op::BitwiseXor: {
      const at::Tensor* x = tensor(a[0]);
      const at::Tensor* y = tensor(a[1]);
      if (!x || !y || !(x->is_meta() || y->is_meta())) return false;
      rets->push_back(kind == Op::BitwiseAnd  ? at::meta::bitwise_and(*x, *y)
                      : kind == Op::BitwiseOr ? at::meta::bitwise_or(*x, *y)
                                              : at::meta::bitwise_xor(*x, *y));
      return true;
    }
    case Op::VectorNorm: {
      std::vector<int64_t> dims;
      if (!meta_tensor(a[0]) || !a[1].isScalar() || !(a[2].isNone() || int_list(a[2], &dims)) || !a[3].isBool())
        return false;
      std::optional<at::ScalarType> dtype = opt_dtype(a[4], &ok);
      if (!ok) return false;
      at::OptionalIntArrayRef d = a[2].isNone() ? at::OptionalIntArrayRef() : at::OptionalIntArrayRef(dims);
      rets->push_back(at::meta::linalg_vector_norm(a[0].toTensor(), a[1].toScalar(), d, a[3].toBool(), dtype));
      return true;
    }
    case Op::ScatterValue: case Op::ScatterSrc:
      if (!meta_tensor(a[0]) || !a[1].isInt() || !meta_tensor(a[2])) return false;
      if (kind == Op::ScatterValue) {
        if (!a[3].isScalar()) return false;
        rets->push_back(at::meta::scatter(a[0].toTensor(), a[1].toInt(), a[2].toTensor(), a[3].toScalar()));
      } else {
        if (!meta_tensor(a[3])) return false;
        rets->push_back(at::meta::scatter(a[0].toTensor(), a[1].toInt(), a[2].toTensor(), a[3].toTensor()));
      }
      return true;
    case Op::Isin:
      if (!meta_tensor(a[0]) || !meta_tensor(a[1]) || !a[2].isBool() || !a[3].isBool()) return false;
      rets->push_back(at::meta::isin(a[0].toTensor(), a[1].toTensor(), a[2].toBool(), a[3].toBool()));
      return true;
    case Op::Cumprod: {
      if (!meta_tensor(a[0]) || !a[1].isInt()) return false;
      std::optional<at::ScalarType> dtype = opt_dtype(a[2], &ok);
      if (!ok) return false;
      rets->push_back(at::meta::cumprod(a[0].toTensor(), a[1].toInt(), dtype));
      return true;
    }
    case Op::Softplus:
      if (!meta_tensor(a[0]) || !a[1].isScalar() || !a[2].isScalar()) return false;
      rets->push_back(at::meta::softplus(a[0].toTensor(), a[1].toScalar(), a[2].toScalar()));
      return true;
    case Op::Norm: {
      std::vector<int64_t> dims;
      if (!meta_tensor(a[0]) || !(a[1].isNone() || a[1].isScalar()) || !int_list(a[2], &dims) || !a[3].isBool())
        return false;
      std::optional<c10::Scalar> norm_p;
      if (a[1].isScalar()) norm_p = a[1].toScalar();
      rets->push_back(at::meta::norm(a[0].toTensor(), norm_p, dims, a[3].toBool()));
      return true;
    }
    case Op::Flip: {
      // Not structured: eager's result is empty_like(self), self's strides when
      // it is dense (other layouts take the meta kernel); dims must be valid.
      std::vector<int64_t> dims;
      if (!meta_tensor(a[0]) || !int_list(a[1], &dims)) return false;
      const at::Tensor& x = a[0].toTensor();
      if (!x.unsafeGetTensorImpl()->is_non_overlapping_and_dense()) return false;
      std::vector<bool> flipped(x.dim(), false);
      if (!mark_dims(dims, x.dim(), &flipped)) return false;
      rets->push_back(at::empty_strided(x.sizes(), x.strides(), x.options()));
      return true;
    }
    case Op::ArangeOut: {
      // torch.arange(n, device=...) records arange.start_out into a new int64
      // tensor: its length is RangeFactories.cpp's integer formula, then `out`
      // is resized to it (as the CPU kernel does). Floating ranges, whose
      // length rounds per dtype, and invalid ones take the meta kernel.
      if (!a[0].isInt() || !a[1].isInt() || !a[2].isInt() || !meta_tensor(a[3])) return false;
      at::Tensor out = a[3].toTensor();
      if (out.scalar_type() != at::kLong) return false;
      int64_t start = a[0].toInt(), end = a[1].toInt(), step = a[2].toInt();
      if (step == 0 || (step > 0 && end < start) || (step < 0 && end > start)) return false;
      int64_t sgn = step > 0 ? 1 : -1;
      int64_t size = (end - start + step - sgn) / step;
      if (out.numel() != size) out.resize_({size});
      rets->push_back(out);
      return true;
    }
    case Op::MaskedFill: {
      // In place: the result is `self`, once the mask (bool) broadcasts to
      // self's sizes and the value is a number or a 0-d tensor. Not structured:
      // this is the check its meta kernel makes.
      if (!meta_tensor(a[0]) || !meta_tensor(a[1])) return false;
      const at::Tensor& self = a[0].toTensor();
      const at::Tensor& mask = a[1].toTensor();
      if (mask.scalar_type() != at::kBool || mask.dim() > self.dim()) return false;
      if (a[2].isTensor() ? a[2].toTensor().dim() != 0 : !a[2].isScalar()) return false;
      int64_t off = self.dim() - mask.dim();
      for (int64_t d = 0; d < mask.dim(); ++d)
        if (mask.size(d) != 1 && mask.size(d) != self.size(off + d)) return false;
      rets->push_back(a[0]);
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
