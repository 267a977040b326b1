// Reductions as IR nodes (aten_to_ir.h): sum, mean, amax and amin over
// trailing dims (or through a view that puts the reduced dims last), and
// softmax, log_softmax and layer_norm built from row reductions.
#include <ATen/ATen.h>

#include <algorithm>
#include <optional>
#include <unordered_set>

#include "bridge/aten_ir.h"
#include "runtime/runtime.h"
#include "tracer/aten_to_ir.h"
#include "tracer/lazy_storage.h"
#include "tracer/row_builder.h"
#include "tracer/trace_context.h"

namespace lazyjit::tracer {

using c10::IValue;
using ir::DType;
using ir::OpKind;
using ir::ValueId;
using torch::jit::Stack;

namespace {

// Reductions over trailing dims, and softmax / log_softmax / layer_norm built
// from them, become row-reduction nodes: the planner fuses each into one kernel
// that reads a row once. Intermediates stay in the accumulate dtype (f32 for
// half types); only results are rounded to the output dtype.

DType accumulate_dtype(DType t) {
  if (t == DType::Float16 || t == DType::BFloat16 || t == DType::Float32) return DType::Float32;
  if (t == DType::Float64) return DType::Float64;
  return DType::Int64;
}

// Reduced dims of `self` (empty list: all), or -1 unless they are exactly the trailing ones.
int64_t trailing_dims(const at::Tensor& self, const IValue& dims_arg) {
  int64_t rank = self.dim();
  std::vector<int64_t> dims;
  if (dims_arg.isInt()) dims.push_back(dims_arg.toInt());
  else if (!dims_arg.isNone()) dims = dims_arg.toIntVector();
  if (dims.empty()) return rank;
  for (int64_t& d : dims) d = c10::maybe_wrap_dim(d, std::max<int64_t>(rank, 1));
  std::sort(dims.begin(), dims.end());
  dims.erase(std::unique(dims.begin(), dims.end()), dims.end());
  for (size_t i = 0; i < dims.size(); ++i)
    if (dims[i] != rank - static_cast<int64_t>(dims.size()) + static_cast<int64_t>(i)) return -1;
  return static_cast<int64_t>(dims.size());
}

// For reduced dims that are not the trailing ones: the order of dims that puts
// the kept ones first (in their order) and the reduced ones last, and their
// count in *k; empty when the dims are all or none, or the input has a
// dimension of size 0, or is large (ATen's own kernel handles those: it
// vectorizes across the kept dims, where ours would read each reduced row with
// strided loads, which only pays while the input sits in L1).
constexpr int64_t kMaxStridedReduction = 8192;
// Sums (and means) over leading dims longer than this stay ATen's too: ATen adds
// an outer dim down the rows in float32, ours in float64 (row_schedule.h), and a
// training loop's bias gradients summed our way drift from eager's over many
// steps (tests/python/test_rounding.py); max and min are exact either way.
constexpr int64_t kMaxStridedSumLength = 16;
std::vector<int64_t> reduced_last(const at::Tensor& self, const IValue& dims_arg, int64_t* k) {
  int64_t rank = self.dim();
  std::vector<int64_t> dims;
  if (dims_arg.isInt()) dims.push_back(dims_arg.toInt());
  else if (!dims_arg.isNone()) dims = dims_arg.toIntVector();
  if (dims.empty() || rank < 2 || self.numel() == 0 || self.numel() > kMaxStridedReduction) return {};
  std::vector<bool> reduced(rank, false);
  for (int64_t d : dims) reduced[c10::maybe_wrap_dim(d, rank)] = true;
  std::vector<int64_t> perm;
  for (int64_t d = 0; d < rank; ++d)
    if (!reduced[d]) perm.push_back(d);
  *k = rank - static_cast<int64_t>(perm.size());
  for (int64_t d = 0; d < rank; ++d)
    if (reduced[d]) perm.push_back(d);
  return perm;
}

}  // namespace

bool is_reduction_name(const std::string& fname) {
  static const std::unordered_set<std::string> names = {
      "aten::sum.dim_IntList", "aten::sum", "aten::mean.dim", "aten::mean", "aten::amax", "aten::amin",
      "aten::_softmax", "aten::_log_softmax", "aten::native_layer_norm"};
  return names.count(fname) > 0;
}

bool try_reduction(const std::string& fname, const Stack& args, const std::vector<at::Tensor>& meta_outs,
                   Stack* out) {
  if (!is_reduction_name(fname) || !args[0].isTensor() || !is_lazy(args[0].toTensor())) return false;
  const at::Tensor& self = args[0].toTensor();
  DType in_dt = bridge::from_aten(self.scalar_type());
  if (!runtime::kernels_support(in_dt)) return false;
  for (const at::Tensor& m : meta_outs)
    if (!runtime::kernels_support(bridge::from_aten(m.scalar_type()))) return false;
  TraceContext& ctx = TraceContext::get();
  bool is_float = ir::is_floating(in_dt);
  int64_t k;
  if (fname == "aten::sum" || fname == "aten::mean") k = self.dim();
  else if (fname == "aten::_softmax" || fname == "aten::_log_softmax") k = trailing_dims(self, args[1]);
  else if (fname == "aten::native_layer_norm") k = static_cast<int64_t>(args[1].toListRef().size());
  else k = trailing_dims(self, args[1]);
  // Reduced dims that are not the trailing ones (a column sum, a bias gradient):
  // the input is read through a view that puts them last, which the kernel's
  // loads take as strides. The kept dims keep their order, so the result's
  // elements are in the order ATen's are.
  std::vector<int64_t> perm;
  if (k < 0 && fname != "aten::_softmax" && fname != "aten::_log_softmax")
    perm = reduced_last(self, args[1], &k);
  if (!perm.empty() && fname != "aten::amax" && fname != "aten::amin") {
    int64_t length = 1;
    for (size_t i = perm.size() - k; i < perm.size(); ++i) length *= self.size(perm[i]);
    if (length > kMaxStridedSumLength) {
      perm.clear();
      k = -1;
    }
  }
  if (k < 0 || (fname != "aten::sum.dim_IntList" && fname != "aten::sum" && !is_float)) return false;
  if ((fname == "aten::_softmax" || fname == "aten::_log_softmax") && self.dim() > 0 && k != 1) return false;
  if (fname == "aten::native_layer_norm" && self.dim() < k) return false;

  std::vector<int64_t> full = self.sizes().vec();
  ValueId x = ctx.read(self);
  if (!perm.empty()) {
    const ir::TensorType& xt = ctx.graph().value(x).type;
    std::vector<int64_t> sizes, strides;
    for (int64_t d : perm) {
      sizes.push_back(xt.sizes[d]);
      strides.push_back(xt.strides[d]);
    }
    x = ctx.graph().add_node1(OpKind::AsStrided, {x}, {{sizes, true}, {strides, true}, {int64_t{0}, true}},
                              ir::TensorType{xt.dtype, sizes, ir::contiguous_strides(sizes)});
    full = sizes;
  }
  RowBuilder b{ctx, ctx.graph(), DType::Float32, full, full, k};
  for (size_t d = b.full.size() - k; d < b.full.size(); ++d) b.row[d] = 1;
  DType out_dt = bridge::from_aten(meta_outs[0].scalar_type());
  b.acc = accumulate_dtype(fname.rfind("aten::sum", 0) == 0 || fname.rfind("aten::mean", 0) == 0 ? out_dt : in_dt);
  auto result = [&](ValueId v, const at::Tensor& m) { out->push_back(ctx.new_tensor(v, m)); };

  if (fname.rfind("aten::sum", 0) == 0 || fname.rfind("aten::mean", 0) == 0) {
    ValueId s = b.reduce(OpKind::ReduceSum, x);
    if (fname.rfind("aten::mean", 0) == 0)
      s = b.ew(OpKind::Mul, {s, b.number(1.0 / static_cast<double>(b.row_numel()))}, b.row, b.acc);
    result(b.ew(OpKind::Cast, {s}, b.row, out_dt), meta_outs[0]);
  } else if (fname == "aten::amax" || fname == "aten::amin") {
    if (b.row_numel() == 0) return false;  // ATen raises on empty rows
    b.acc = ir::opmath_dtype(in_dt);
    ValueId m = b.reduce(fname == "aten::amax" ? OpKind::ReduceMax : OpKind::ReduceMin, x);
    result(b.ew(OpKind::Cast, {m}, b.row, out_dt), meta_outs[0]);
  } else if (fname == "aten::_softmax" || fname == "aten::_log_softmax") {
    ValueId m = b.reduce(OpKind::ReduceMax, x);
    ValueId sh = b.ew(OpKind::Sub, {x, m}, b.full, b.acc);
    ValueId e = b.ew(OpKind::Exp, {sh}, b.full, b.acc);
    ValueId s = b.reduce(OpKind::ReduceSum, e);
    // Like ATen's CPU kernel: one reciprocal per row, then a multiply.
    ValueId y = fname == "aten::_softmax"
                    ? b.ew(OpKind::Mul, {e, b.ew(OpKind::Reciprocal, {s}, b.row, b.acc)}, b.full, out_dt)
                    : b.ew(OpKind::Sub, {sh, b.ew(OpKind::Log, {s}, b.row, b.acc)}, b.full, out_dt);
    result(y, meta_outs[0]);
  } else {  // native_layer_norm(input, normalized_shape, weight?, bias?, eps) -> (out, mean, rstd)
    ValueId inv_n = b.number(1.0 / static_cast<double>(std::max<int64_t>(b.row_numel(), 1)));
    ValueId eps = b.number(args[4].toDouble());
    std::vector<std::optional<ValueId>> affine;
    for (int i : {2, 3})
      affine.push_back(args[i].isTensor() && args[i].toTensor().defined() ? std::optional<ValueId>(ctx.read(args[i].toTensor()))
                                                                            : std::nullopt);
    ValueId mean = b.ew(OpKind::Mul, {b.reduce(OpKind::ReduceSum, x), inv_n}, b.row, b.acc);
    ValueId d = b.ew(OpKind::Sub, {x, mean}, b.full, b.acc);
    ValueId var = b.ew(OpKind::Mul, {b.reduce(OpKind::ReduceSum, b.ew(OpKind::Mul, {d, d}, b.full, b.acc)), inv_n}, b.row, b.acc);
    ValueId rstd = b.ew(OpKind::Rsqrt, {b.ew(OpKind::Add, {var, eps}, b.row, b.acc)}, b.row, b.acc);
    ValueId y = b.ew(OpKind::Mul, {d, rstd}, b.full, b.acc);
    if (affine[0]) y = b.ew(OpKind::Mul, {y, *affine[0]}, b.full, b.acc);
    if (affine[1]) y = b.ew(OpKind::Add, {y, *affine[1]}, b.full, b.acc);
    result(b.ew(OpKind::Cast, {y}, b.full, out_dt), meta_outs[0]);
    // The CPU kernel returns mean and rstd in the input dtype (the meta kernel
    // says float32 for half inputs), or in float32 when a bf16/f16 input comes
    // with float32 weight or bias (its "mixed type" case: autocast, which
    // leaves layer_norm's parameters in float32); eager CPU is the oracle.
    DType stat_dt = in_dt;
    if (in_dt == DType::BFloat16 || in_dt == DType::Float16) {
      bool mixed = false;
      for (int i : {2, 3})
        if (args[i].isTensor() && args[i].toTensor().defined())
          mixed |= args[i].toTensor().scalar_type() == at::kFloat;
      if (mixed) stat_dt = DType::Float32;
    }
    result(b.ew(OpKind::Cast, {mean}, b.row, stat_dt), meta_outs[1]);
    result(b.ew(OpKind::Cast, {rstd}, b.row, stat_dt), meta_outs[2]);
  }
  return true;
}

}  // namespace lazyjit::tracer
