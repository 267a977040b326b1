// Ops of training steps as graph nodes, so they fuse with their neighbours
// instead of running as ATen library steps: the backward of gelu, mse_loss
// and softmax / log_softmax, and mse_loss itself. Each follows
// the arithmetic of ATen's CPU kernel (aten/src/ATen/native/cpu/Activation.cpp,
// Loss.cpp) operation by operation, in the same order, with the same constants
// rounded to the compute dtype, so results match eager's to the last ulps the
// vector math (erf, exp, tanh) allows. (For contiguous float32 and bf16 inputs
// eager's exact gelu_backward is oneDNN's eltwise backward, another evaluation
// of the same formula: a few ulps apart. oneDNN also refuses operands of
// different sizes, so those stay ATen's step and raise as eager does.)
#include <ATen/core/Tensor.h>
#include <c10/core/WrapDimMinimal.h>

#include <cmath>
#include <string>
#include <unordered_set>

#include "bridge/aten_ir.h"
#include "tracer/aten_to_ir.h"
#include "tracer/lazy_storage.h"
#include "tracer/row_builder.h"
#include "tracer/trace_context.h"

namespace lazyjit::tracer {

using ir::DType;
using ir::OpKind;
using ir::ValueId;

namespace {

// gelu'(x) * dy, exact: dy * (cdf + x * pdf).
ValueId gelu_backward_none(RowBuilder& b, ValueId dy, ValueId x) {
  const double kAlpha = M_SQRT1_2, kBeta = M_2_SQRTPI * M_SQRT1_2 * 0.5;
  ValueId erf = b.ew(OpKind::Erf, {b.ew(OpKind::Mul, {x, b.number(kAlpha)})});
  ValueId cdf = b.ew(OpKind::Mul, {b.number(0.5), b.ew(OpKind::Add, {b.number(1.0), erf})});
  ValueId sq = b.ew(OpKind::Mul, {b.ew(OpKind::Mul, {x, x}), b.number(-0.5)});
  ValueId pdf = b.ew(OpKind::Mul, {b.number(kBeta), b.ew(OpKind::Exp, {sq})});
  return b.ew(OpKind::Mul, {dy, b.ew(OpKind::Add, {cdf, b.ew(OpKind::Mul, {x, pdf})})});
}

// The tanh approximation's derivative times dy.
ValueId gelu_backward_tanh(RowBuilder& b, ValueId dy, ValueId x) {
  const double kBeta = M_SQRT2 * M_2_SQRTPI * 0.5, kKappa = 0.044715;
  ValueId x_sq = b.ew(OpKind::Mul, {x, x});
  ValueId x_cube = b.ew(OpKind::Mul, {x_sq, x});
  ValueId inner =
      b.ew(OpKind::Mul, {b.number(kBeta), b.ew(OpKind::Add, {x, b.ew(OpKind::Mul, {b.number(kKappa), x_cube})})});
  ValueId t = b.ew(OpKind::Tanh, {inner});
  ValueId left = b.ew(OpKind::Mul, {b.number(0.5), x});
  ValueId right = b.ew(OpKind::Add, {b.number(1.0), t});
  ValueId left_derivative = b.ew(OpKind::Mul, {b.number(0.5), right});
  ValueId tanh_derivative = b.ew(OpKind::Sub, {b.number(1.0), b.ew(OpKind::Mul, {t, t})});
  // ATen multiplies its two constant vectors first: (3 * kappa), rounded to
  // the compute dtype, then x_sq.
  ValueId three_kappa =
      b.number(b.acc == DType::Float64 ? 3.0 * kKappa : static_cast<double>(3.0f * static_cast<float>(kKappa)));
  ValueId inner_derivative =
      b.ew(OpKind::Mul, {b.number(kBeta), b.ew(OpKind::Add, {b.number(1.0), b.ew(OpKind::Mul, {three_kappa, x_sq})})});
  ValueId right_derivative = b.ew(OpKind::Mul, {b.ew(OpKind::Mul, {left, tanh_derivative}), inner_derivative});
  return b.ew(OpKind::Mul, {dy, b.ew(OpKind::Add, {left_derivative, right_derivative})});
}

// mse_loss(self, target, reduction) of the mean (1) or sum (2): ATen squares
// the difference into a temporary, then sums it (and divides by numel).
bool try_mse_loss(const torch::jit::Stack& args, const at::Tensor& mo, torch::jit::Stack* out) {
  if (args.size() < 3 || !args[0].isTensor() || !args[1].isTensor() || !args[2].isInt()) return false;
  int64_t reduction = args[2].toInt();
  const at::Tensor& x = args[0].toTensor();
  const at::Tensor& t = args[1].toTensor();
  if (reduction != 1 && reduction != 2) return false;
  DType dt = bridge::from_aten(mo.scalar_type());
  if ((dt != DType::Float32 && dt != DType::Float64) || mo.dim() != 0) return false;
  if (!is_lazy(x) || !is_lazy(t) || x.scalar_type() != mo.scalar_type() || t.scalar_type() != mo.scalar_type())
    return false;
  if (x.dim() == 0 || x.sizes() != t.sizes() || x.numel() == 0) return false;  // broadcasting warns in eager: its step
  TraceContext& ctx = TraceContext::get();
  std::vector<int64_t> full = x.sizes().vec();
  RowBuilder b{ctx, ctx.graph(), dt, full, std::vector<int64_t>(full.size(), 1), x.dim()};
  ValueId diff = b.ew(OpKind::Sub, {ctx.read(x), ctx.read(t)});
  ValueId s = b.reduce(OpKind::ReduceSum, b.ew(OpKind::Mul, {diff, diff}));
  if (reduction == 1)  // ATen's mean: the sum, then div_(numel)
    s = b.ew(OpKind::Div, {s, b.number(static_cast<double>(x.numel()))}, b.row, dt);
  out->push_back(ctx.new_tensor(s, mo));
  return true;
}

// _softmax_backward_data / _log_softmax_backward_data(grad, output, dim,
// input_dtype) over the last dim, float32/float64: a row kernel, as ATen's
// lastdim kernel computes it per row: softmax (grad - sum(grad * output)) *
// output; log_softmax grad - exp(output) * sum(grad).
bool try_softmax_backward(bool log, const torch::jit::Stack& args, const at::Tensor& mo, torch::jit::Stack* out) {
  if (args.size() < 4 || !args[0].isTensor() || !args[1].isTensor() || !args[2].isInt()) return false;
  const at::Tensor& dy = args[0].toTensor();
  const at::Tensor& y = args[1].toTensor();
  DType dt = bridge::from_aten(mo.scalar_type());
  if ((dt != DType::Float32 && dt != DType::Float64) || !is_lazy(dy) || !is_lazy(y)) return false;
  if (dy.scalar_type() != mo.scalar_type() || y.scalar_type() != mo.scalar_type()) return false;
  if (!args[3].isInt() || args[3].toInt() != static_cast<int64_t>(mo.scalar_type())) return false;
  int64_t rank = mo.dim();
  if (rank == 0 || mo.numel() == 0 || dy.sizes() != mo.sizes() || y.sizes() != mo.sizes()) return false;
  if (c10::maybe_wrap_dim(args[2].toInt(), rank) != rank - 1) return false;
  TraceContext& ctx = TraceContext::get();
  std::vector<int64_t> full = mo.sizes().vec(), row = full;
  row.back() = 1;
  RowBuilder b{ctx, ctx.graph(), dt, full, row, 1};
  ValueId d = ctx.read(dy), o = ctx.read(y), r;
  if (log) r = b.ew(OpKind::Sub, {d, b.ew(OpKind::Mul, {b.ew(OpKind::Exp, {o}), b.reduce(OpKind::ReduceSum, d)})});
  else r = b.ew(OpKind::Mul, {b.ew(OpKind::Sub, {d, b.reduce(OpKind::ReduceSum, b.ew(OpKind::Mul, {d, o}))}), o});
  out->push_back(ctx.new_tensor(r, mo));
  return true;
}

// gelu_backward(grad, self, approximate) and mse_loss_backward(grad, self,
// target, reduction): elementwise, in the compute dtype, then cast.
bool try_pointwise_backward(bool gelu, const torch::jit::Stack& args, const at::Tensor& mo, torch::jit::Stack* out) {
  DType dt = bridge::from_aten(mo.scalar_type());
  // mse_loss_backward's CPU kernel rounds every step to a half type: float32
  // and float64 only. gelu_backward computes half types in float32, as here.
  if (!ir::is_floating(dt) || (!gelu && dt != DType::Float32 && dt != DType::Float64)) return false;
  if (!mo.is_contiguous() || mo.numel() == 0) return false;
  size_t tensors = gelu ? 2 : 3;
  if (args.size() < tensors + 1) return false;
  for (size_t i = 0; i < tensors; ++i) {
    if (!args[i].isTensor()) return false;
    const at::Tensor& t = args[i].toTensor();
    if (!is_lazy(t) || t.scalar_type() != mo.scalar_type()) return false;
    if (gelu && t.sizes() != mo.sizes()) return false;
  }
  // ATen raises on other approximations.
  if (gelu && !(args[2].isString() && (args[2].toStringRef() == "none" || args[2].toStringRef() == "tanh")))
    return false;
  if (!gelu && !args[3].isInt()) return false;

  TraceContext& ctx = TraceContext::get();
  std::vector<int64_t> full = mo.sizes().vec();
  RowBuilder b{ctx, ctx.graph(), compute_dtype_for(dt), full, full, 0};
  ValueId dy = ctx.read(args[0].toTensor()), x = ctx.read(args[1].toTensor()), r;
  if (gelu) {
    r = args[2].toStringRef() == "none" ? gelu_backward_none(b, dy, x) : gelu_backward_tanh(b, dy, x);
  } else {
    // alpha * (self - target) * grad, alpha = 2 / numel for the mean (reduction 1), 2 otherwise.
    double alpha = args[3].toInt() == 1 ? 2.0 / static_cast<double>(args[1].toTensor().numel()) : 2.0;
    ValueId t = ctx.read(args[2].toTensor());
    r = b.ew(OpKind::Mul, {b.ew(OpKind::Mul, {b.number(alpha), b.ew(OpKind::Sub, {x, t})}), dy});
  }
  if (b.acc != dt) r = b.ew(OpKind::Cast, {r}, full, dt);
  out->push_back(ctx.new_tensor(r, mo));
  return true;
}

const std::unordered_set<std::string>& training_op_names() {
  static const std::unordered_set<std::string> names = {
      "aten::gelu_backward", "aten::mse_loss_backward", "aten::mse_loss", "aten::_softmax_backward_data",
      "aten::_log_softmax_backward_data"};
  return names;
}

}  // namespace

bool is_training_op_name(const std::string& fname) { return training_op_names().count(fname) > 0; }

bool try_training_op(const std::string& fname, const torch::jit::Stack& args, const at::Tensor& mo,
                     torch::jit::Stack* out) {
  if (fname == "aten::gelu_backward") return try_pointwise_backward(true, args, mo, out);
  if (fname == "aten::mse_loss_backward") return try_pointwise_backward(false, args, mo, out);
  if (fname == "aten::mse_loss") return try_mse_loss(args, mo, out);
  if (fname == "aten::_softmax_backward_data") return try_softmax_backward(false, args, mo, out);
  if (fname == "aten::_log_softmax_backward_data") return try_softmax_backward(true, args, mo, out);
  return false;
}

}  // namespace lazyjit::tracer
