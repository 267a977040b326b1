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
#include <functional>

#include "bridge/aten_ir.h"
#include "tracer/aten_to_ir.h"
#include "tracer/lazy_storage.h"
#include "tracer/trace_context.h"

namespace lazyjit::tracer {

using c10::IValue;
using ir::DType;
using ir::OpKind;
using ir::ValueId;

namespace {

// gelu'(x) * dy, exact: dy * (cdf + x * pdf).
ValueId gelu_backward_none(const std::function<ValueId(OpKind, std::vector<ValueId>)>& node,
                           const std::function<ValueId(double)>& number, ValueId dy, ValueId x) {
  const double kAlpha = M_SQRT1_2, kBeta = M_2_SQRTPI * M_SQRT1_2 * 0.5;
  ValueId erf = node(OpKind::Erf, {node(OpKind::Mul, {x, number(kAlpha)})});
  ValueId cdf = node(OpKind::Mul, {number(0.5), node(OpKind::Add, {number(1.0), erf})});
  ValueId sq = node(OpKind::Mul, {node(OpKind::Mul, {x, x}), number(-0.5)});
  ValueId pdf = node(OpKind::Mul, {number(kBeta), node(OpKind::Exp, {sq})});
  return node(OpKind::Mul, {dy, node(OpKind::Add, {cdf, node(OpKind::Mul, {x, pdf})})});
}

// The tanh approximation's derivative times dy.
ValueId gelu_backward_tanh(const std::function<ValueId(OpKind, std::vector<ValueId>)>& node,
                           const std::function<ValueId(double)>& number, DType ct, ValueId dy, ValueId x) {
  const double kBeta = M_SQRT2 * M_2_SQRTPI * 0.5, kKappa = 0.044715;
  ValueId x_sq = node(OpKind::Mul, {x, x});
  ValueId x_cube = node(OpKind::Mul, {x_sq, x});
  ValueId inner = node(OpKind::Mul, {number(kBeta), node(OpKind::Add, {x, node(OpKind::Mul, {number(kKappa), x_cube})})});
  ValueId t = node(OpKind::Tanh, {inner});
  ValueId left = node(OpKind::Mul, {number(0.5), x});
  ValueId right = node(OpKind::Add, {number(1.0), t});
  ValueId left_derivative = node(OpKind::Mul, {number(0.5), right});
  ValueId tanh_derivative = node(OpKind::Sub, {number(1.0), node(OpKind::Mul, {t, t})});
  // ATen multiplies its two constant vectors first: (3 * kappa), rounded to
  // the compute dtype, then x_sq.
  ValueId three_kappa = number(ct == DType::Float64 ? 3.0 * kKappa : static_cast<double>(3.0f * static_cast<float>(kKappa)));
  ValueId inner_derivative =
      node(OpKind::Mul, {number(kBeta), node(OpKind::Add, {number(1.0), node(OpKind::Mul, {three_kappa, x_sq})})});
  ValueId right_derivative = node(OpKind::Mul, {node(OpKind::Mul, {left, tanh_derivative}), inner_derivative});
  return node(OpKind::Mul, {dy, node(OpKind::Add, {left_derivative, right_derivative})});
}

}  // namespace

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
  auto& g = ctx.graph();
  std::vector<int64_t> full = x.sizes().vec(), row(full.size(), 1), dims;
  for (int64_t d = 0; d < x.dim(); ++d) dims.push_back(d);
  auto type = [](const std::vector<int64_t>& sizes, DType d) {
    return ir::TensorType{d, sizes, ir::contiguous_strides(sizes)};
  };
  std::vector<ir::Attr> attrs{{static_cast<int64_t>(dt)}};
  ValueId diff = g.add_node1(OpKind::Sub, {ctx.read(x), ctx.read(t)}, attrs, type(full, dt));
  ValueId sq = g.add_node1(OpKind::Mul, {diff, diff}, attrs, type(full, dt));
  ValueId s = g.add_node1(OpKind::ReduceSum, {sq}, {{static_cast<int64_t>(dt)}, {dims}}, type(row, dt));
  if (reduction == 1)  // ATen's mean: the sum, then div_(numel)
    s = g.add_node1(OpKind::Div, {s, ctx.scalar(c10::Scalar(static_cast<double>(x.numel())))}, attrs, type(row, dt));
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
  auto& g = ctx.graph();
  std::vector<int64_t> full = mo.sizes().vec(), row = full;
  row.back() = 1;
  auto type = [&](const std::vector<int64_t>& sizes) { return ir::TensorType{dt, sizes, ir::contiguous_strides(sizes)}; };
  std::vector<ir::Attr> attrs{{static_cast<int64_t>(dt)}};
  auto node = [&](OpKind k, std::vector<ValueId> ops, const std::vector<int64_t>& sizes) {
    return g.add_node1(k, std::move(ops), attrs, type(sizes));
  };
  auto row_sum = [&](ValueId v) {
    return g.add_node1(OpKind::ReduceSum, {v}, {{static_cast<int64_t>(dt)}, {std::vector<int64_t>{rank - 1}}},
                       type(row));
  };
  ValueId d = ctx.read(dy), o = ctx.read(y), r;
  if (log) r = node(OpKind::Sub, {d, node(OpKind::Mul, {node(OpKind::Exp, {o}, full), row_sum(d)}, full)}, full);
  else r = node(OpKind::Mul, {node(OpKind::Sub, {d, row_sum(node(OpKind::Mul, {d, o}, full))}, full), o}, full);
  out->push_back(ctx.new_tensor(r, mo));
  return true;
}

bool try_training_op(const std::string& fname, const torch::jit::Stack& args, const at::Tensor& mo,
                     torch::jit::Stack* out) {
  if (fname == "aten::mse_loss") return try_mse_loss(args, mo, out);
  if (fname == "aten::_softmax_backward_data") return try_softmax_backward(false, args, mo, out);
  if (fname == "aten::_log_softmax_backward_data") return try_softmax_backward(true, args, mo, out);
  bool gelu = fname == "aten::gelu_backward", mse = fname == "aten::mse_loss_backward";
  if (!gelu && !mse) return false;
  DType dt = bridge::from_aten(mo.scalar_type());
  // mse_loss_backward's CPU kernel rounds every step to a half type: float32
  // and float64 only. gelu_backward computes half types in float32, as here.
  if (!ir::is_floating(dt) || (mse && dt != DType::Float32 && dt != DType::Float64)) return false;
  if (!mo.is_contiguous() || mo.numel() == 0) return false;
  size_t tensors = gelu ? 2 : 3;
  if (args.size() < tensors + 1) return false;
  for (size_t i = 0; i < tensors; ++i) {
    if (!args[i].isTensor()) return false;
    const at::Tensor& t = args[i].toTensor();
    if (!is_lazy(t) || t.scalar_type() != mo.scalar_type()) return false;
    if (gelu && t.sizes() != mo.sizes()) return false;
  }
  if (gelu && !args[2].isString()) return false;
  if (mse && !args[3].isInt()) return false;

  TraceContext& ctx = TraceContext::get();
  auto& g = ctx.graph();
  DType ct = compute_dtype_for(dt);
  ir::TensorType ft = contiguous_type(mo);
  ft.dtype = ct;
  std::vector<ir::Attr> attrs{{static_cast<int64_t>(ct)}};
  auto node = [&](OpKind k, std::vector<ValueId> ops) { return g.add_node1(k, std::move(ops), attrs, ft); };
  auto number = [&](double v) { return ctx.scalar(c10::Scalar(v)); };
  ValueId r;
  if (gelu) {
    ValueId dy = ctx.read(args[0].toTensor()), x = ctx.read(args[1].toTensor());
    const std::string& approximate = args[2].toStringRef();
    if (approximate == "none") r = gelu_backward_none(node, number, dy, x);
    else if (approximate == "tanh") r = gelu_backward_tanh(node, number, ct, dy, x);
    else return false;  // ATen raises on others
  } else {
    // mse_loss_backward(grad_output, self, target, reduction): alpha * (self - target) * grad_output,
    // alpha = 2 / numel for the mean (reduction 1), 2 otherwise.
    int64_t reduction = args[3].toInt();
    double alpha = reduction == 1 ? 2.0 / static_cast<double>(args[1].toTensor().numel()) : 2.0;
    ValueId dy = ctx.read(args[0].toTensor()), x = ctx.read(args[1].toTensor()), t = ctx.read(args[2].toTensor());
    r = node(OpKind::Mul, {node(OpKind::Mul, {number(alpha), node(OpKind::Sub, {x, t})}), dy});
  }
  if (ct != dt) r = g.add_node1(OpKind::Cast, {r}, attrs, contiguous_type(mo));
  out->push_back(ctx.new_tensor(r, mo));
  return true;
}

}  // namespace lazyjit::tracer
