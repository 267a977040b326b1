#include "executor/op_by_op_node.h"

#include <ATen/ATen.h>
#include <ATen/ExpandUtils.h>

#include <algorithm>
#include <limits>
#include <optional>
#include <stdexcept>

#include "bridge/aten_ir.h"
#include "executor/tensor_layout.h"

namespace lazyjit::executor {

using ir::OpKind;

namespace {

at::Tensor operand(const ir::Graph& g, ir::ValueId v, std::vector<at::Tensor>& env,
                   const std::vector<int64_t>& scalars) {
  const ir::Node& p = g.producer(v);
  if (p.kind == OpKind::Scalar) {
    ir::DType t = g.value(v).type.dtype;
    c10::Scalar s = bridge::scalar_from_slot(scalars.at(std::get<int64_t>(p.attrs[0].value)), t);
    return at::scalar_tensor(s, at::TensorOptions().dtype(bridge::to_aten(t)));
  }
  return env.at(v);
}

ir::DType attr_dtype(const ir::Node& n, size_t i) {
  return static_cast<ir::DType>(std::get<int64_t>(n.attrs.at(i).value));
}

// `in_place`: x is the value's buffer too (an operand no later step reads,
// writable_operand), computed there as eager's in-place op would.
at::Tensor unary(OpKind k, at::Tensor x, bool in_place) {
#define LAZYJIT_UNARY(K, f) \
  case OpKind::K: return in_place ? at::f##_(x) : at::f(x);
  switch (k) {
    LAZYJIT_UNARY(Abs, abs)
    LAZYJIT_UNARY(Neg, neg)
    LAZYJIT_UNARY(Exp, exp)
    LAZYJIT_UNARY(Log, log)
    LAZYJIT_UNARY(Sqrt, sqrt)
    LAZYJIT_UNARY(Rsqrt, rsqrt)
    LAZYJIT_UNARY(Tanh, tanh)
    LAZYJIT_UNARY(Sigmoid, sigmoid)
    LAZYJIT_UNARY(Relu, relu)
    LAZYJIT_UNARY(Silu, silu)
    LAZYJIT_UNARY(Reciprocal, reciprocal)
    LAZYJIT_UNARY(Sin, sin)
    LAZYJIT_UNARY(Cos, cos)
    LAZYJIT_UNARY(Log1p, log1p)
    LAZYJIT_UNARY(Expm1, expm1)
    LAZYJIT_UNARY(Erf, erf)
    case OpKind::Gelu: return in_place ? at::gelu_(x) : at::gelu(x);
    case OpKind::GeluTanh: return in_place ? at::gelu_(x, "tanh") : at::gelu(x, "tanh");
    case OpKind::LogicalNot: return at::logical_not(x);
    case OpKind::Cast: return x;
    default: break;
  }
#undef LAZYJIT_UNARY
  throw std::runtime_error("lazyjit: no eager form of " + std::string(ir::op_name(k)));
}

// Into `dst` when defined (one of a and b, writable_operand).
at::Tensor binary(OpKind k, const at::Tensor& a, const at::Tensor& b, at::Tensor dst) {
#define LAZYJIT_BINARY(K, f) \
  case OpKind::K: return dst.defined() ? at::f##_out(dst, a, b) : at::f(a, b);
  switch (k) {
    LAZYJIT_BINARY(Add, add)
    LAZYJIT_BINARY(Sub, sub)
    LAZYJIT_BINARY(Mul, mul)
    LAZYJIT_BINARY(Div, div)
    LAZYJIT_BINARY(Remainder, remainder)
    LAZYJIT_BINARY(Pow, pow)
    LAZYJIT_BINARY(Maximum, maximum)
    LAZYJIT_BINARY(Minimum, minimum)
    LAZYJIT_BINARY(Eq, eq)
    LAZYJIT_BINARY(Ne, ne)
    LAZYJIT_BINARY(Lt, lt)
    LAZYJIT_BINARY(Le, le)
    LAZYJIT_BINARY(Gt, gt)
    LAZYJIT_BINARY(Ge, ge)
    LAZYJIT_BINARY(LogicalAnd, logical_and)
    LAZYJIT_BINARY(LogicalOr, logical_or)
    LAZYJIT_BINARY(BitAnd, bitwise_and)
    LAZYJIT_BINARY(BitOr, bitwise_or)
    LAZYJIT_BINARY(BitXor, bitwise_xor)
    case OpKind::DivTrunc: return dst.defined() ? at::div_out(dst, a, b, "trunc") : at::div(a, b, "trunc");
    case OpKind::DivFloor: return dst.defined() ? at::div_out(dst, a, b, "floor") : at::div(a, b, "floor");
    default: break;
  }
#undef LAZYJIT_BINARY
  throw std::runtime_error("lazyjit: no eager form of " + std::string(ir::op_name(k)));
}

at::Tensor reduce(const ir::Node& n, const at::Tensor& x) {
  const auto& dims = std::get<std::vector<int64_t>>(n.attrs.at(1).value);
  at::Tensor a = x.to(bridge::to_aten(attr_dtype(n, 0)));
  if (n.kind == OpKind::ReduceSum) return at::sum(a, dims, /*keepdim=*/true);
  // Empty rows: -inf / +inf for floats (op_kind.h), where ATen's amax refuses.
  bool empty = false;
  for (int64_t d : dims) empty |= a.size(d) == 0;
  if (empty) {
    std::vector<int64_t> sizes = a.sizes().vec();
    for (int64_t d : dims) sizes[d] = 1;
    double v = n.kind == OpKind::ReduceMax ? -std::numeric_limits<double>::infinity()
                                           : std::numeric_limits<double>::infinity();
    if (!at::isFloatingType(a.scalar_type()))
      throw std::runtime_error("lazyjit: an integer max/min over an empty row");
    return at::full(sizes, v, a.options());
  }
  return n.kind == OpKind::ReduceMax ? at::amax(a, dims, true) : at::amin(a, dims, true);
}

// a * b + x for float32 and narrower, rounded once: exact in float64, then
// cast to `out_t`. In slices of at most kFmaSlice elements: whole, the float64
// copies of three operands and the result held 4x an AdamW moment's bytes
// beside it (1.2 GB for GPT-2's 38.6M-element embedding), where eager's lerp
// and addcmul hold none.
constexpr int64_t kFmaSlice = int64_t{1} << 18;

void fma_slices(const at::Tensor& r, const at::Tensor& a, const at::Tensor& b, const at::Tensor& x, int64_t dim) {
  if (r.numel() <= kFmaSlice || dim >= r.dim()) {
    r.copy_(at::addcmul(x.to(at::kDouble), a.to(at::kDouble), b.to(at::kDouble)));
    return;
  }
  const int64_t size = r.size(dim), inner = r.numel() / size;
  const int64_t rows = std::max<int64_t>(1, kFmaSlice / std::max<int64_t>(inner, 1));
  for (int64_t s = 0; s < size; s += rows) {
    const int64_t k = std::min(rows, size - s);
    fma_slices(r.narrow(dim, s, k), a.narrow(dim, s, k), b.narrow(dim, s, k), x.narrow(dim, s, k), dim + 1);
  }
}

at::Tensor fma_via_double(const at::Tensor& a, const at::Tensor& b, const at::Tensor& x, const ir::TensorType& out,
                          at::ScalarType out_t, c10::Device device, at::Tensor into) {
  at::Tensor r = into.defined() ? into
                                : at::empty_strided(out.sizes, out.strides, at::TensorOptions().dtype(out_t).device(device));
  fma_slices(r, a.expand(out.sizes), b.expand(out.sizes), x.expand(out.sizes), 0);
  return r;
}

}  // namespace

bool may_compute_into_operand(const ir::Graph& g, const ir::Node& n) {
  if (n.outputs.size() != 1 || n.kind == OpKind::Full || n.kind == OpKind::Cat || n.kind == OpKind::Cast ||
      n.kind == OpKind::LogicalNot || ir::is_reduction(n.kind) || n.attrs.empty())
    return false;
  if (!(ir::is_unary(n.kind) || ir::is_binary(n.kind) || n.kind == OpKind::Pow || n.kind == OpKind::Where ||
        n.kind == OpKind::Clamp || n.kind == OpKind::Fma))
    return false;
  // Computed in the output's dtype: no operand is cast first.
  return attr_dtype(n, 0) == g.value(n.outputs[0]).type.dtype;
}

// `t` without the repeats of a broadcast (dims of stride 0 as size 1): an
// elementwise op broadcasts it again, and its result has the size of what it
// read, not the broadcast's.
at::Tensor unbroadcast(const at::Tensor& t) {
  if (!t.defined() || t.dim() == 0) return t;
  std::vector<int64_t> sizes = t.sizes().vec();
  bool repeats = false;
  for (int64_t d = 0; d < t.dim(); ++d)
    if (t.stride(d) == 0 && sizes[d] > 1) {
      sizes[d] = 1;
      repeats = true;
    }
  return repeats ? t.as_strided(sizes, t.strides(), t.storage_offset()) : t;
}

void run_op_by_op_node(const ir::Graph& g, const ir::Node& n, std::vector<at::Tensor>& env,
                       const std::vector<int64_t>& scalars, c10::Device device, at::Tensor into, bool broadcast) {
  const ir::TensorType& out = g.value(n.outputs.at(0)).type;
  const at::ScalarType out_t = bridge::to_aten(out.dtype);
  std::vector<at::Tensor> in;
  for (ir::ValueId v : n.operands) in.push_back(operand(g, v, env, scalars));
  at::Tensor r;
  if (n.kind == OpKind::Full) {
    r = at::full(out.sizes, in.at(0).item(), at::TensorOptions().dtype(out_t).device(device));
  } else if (ir::is_reduction(n.kind)) {
    r = reduce(n, in.at(0));
  } else {
    // Elementwise: in the compute dtype (attr 0).
    const at::ScalarType c = bridge::to_aten(attr_dtype(n, 0));
    for (at::Tensor& t : in) t = (n.kind == OpKind::Cat ? t : unbroadcast(t)).to(c);
    if (ir::is_unary(n.kind)) {
      r = unary(n.kind, in.at(0), into.defined());
    } else if (n.kind == OpKind::Pow && g.producer(n.operands.at(1)).kind == OpKind::Scalar) {
      // x ** 2.0 as eager runs it: pow(Tensor, Scalar), whose special cases
      // (x*x, sqrt, rsqrt, ...) differ from pow(Tensor, Tensor) by an ulp, and
      // at -inf ** 0.5 by nan against inf.
      r = into.defined() ? at::pow_out(into, in.at(0), in.at(1).item()) : at::pow(in.at(0), in.at(1).item());
    } else if (ir::is_binary(n.kind)) {
      r = binary(n.kind, in.at(0), in.at(1), into);
    } else if (n.kind == OpKind::Where) {
      r = into.defined() ? at::where_out(into, in.at(0).to(at::kBool), in.at(1), in.at(2))
                         : at::where(in.at(0).to(at::kBool), in.at(1), in.at(2));
    } else if (n.kind == OpKind::Clamp) {
      int64_t has = std::get<int64_t>(n.attrs.at(1).value);
      std::optional<at::Tensor> lo, hi;
      if (has & 1) lo = in.at(1);
      if (has & 2) hi = in.at(2);
      r = into.defined() ? at::clamp_out(into, in.at(0), lo, hi) : at::clamp(in.at(0), lo, hi);
    } else if (n.kind == OpKind::Cat) {
      r = at::cat(in, std::get<int64_t>(n.attrs.at(1).value));
    } else if (n.kind == OpKind::Fma) {
      if (c == at::kDouble)
        r = into.defined() ? at::addcmul_out(into, in.at(2), in.at(0), in.at(1)) : at::addcmul(in.at(2), in.at(0), in.at(1));
      else r = fma_via_double(in.at(0), in.at(1), in.at(2), out, out_t, device, into);
    } else {
      throw std::runtime_error("lazyjit: no eager form of " + std::string(ir::op_name(n.kind)));
    }
  }
  if (into.defined()) {
    env[n.outputs[0]] = into;
    return;
  }
  r = r.to(out_t);
  // A fresh result with the declared layout is the value itself; a view of an
  // operand (a cast to its own dtype), a broadcast or another layout is copied
  // into a dense buffer of its own.
  bool own = r.sizes().equals(out.sizes) && r.strides().equals(out.strides);
  for (size_t i = 0; own && i < in.size(); ++i) own = !r.is_alias_of(in[i]);
  if (own) {
    env[n.outputs[0]] = std::move(r);
    return;
  }
  // A broadcast (the result of operands that all repeat along a dim: an
  // optimizer's scalars made tensors, a lerp's weight tests) stays one: a
  // stride-0 view for the op-by-op steps that read it, where eager computes
  // on the scalars (a lerp of GPT-2's 38.6M-element embedding held four such
  // tensors of its size, 0.5 GB, beside its update).
  if (broadcast && r.dim() <= static_cast<int64_t>(out.sizes.size()) && r.numel() < out.numel() &&
      at::infer_size(r.sizes(), out.sizes) == out.sizes) {
    env[n.outputs[0]] = r.expand(out.sizes);
    return;
  }
  at::Tensor dense = at::empty_strided(out.sizes, out.strides, r.options().dtype(out_t));
  dense.copy_(r.expand(out.sizes));
  env[n.outputs[0]] = dense;
}

void run_op_by_op_layer_norm(const ir::Graph& g, const lowering::OpByOpLayerNorm& ln, std::vector<at::Tensor>& env,
                             const std::vector<int64_t>& scalars, c10::Device device) {
  auto number = [&](ir::ValueId v) {
    const ir::Node& p = g.producer(v);
    return bridge::scalar_from_slot(scalars.at(std::get<int64_t>(p.attrs[0].value)), g.value(v).type.dtype).toDouble();
  };
  const at::Tensor& x = env.at(ln.input);
  const int64_t rank = x.dim();
  int64_t n = 1;
  for (int64_t d = rank - ln.normalized_dims; d < rank; ++d) n *= x.size(d);
  if (number(ln.inv_n) != 1.0 / static_cast<double>(std::max<int64_t>(n, 1))) {
    for (uint32_t i : ln.nodes) run_op_by_op_node(g, g.nodes()[i], env, scalars, device);
    return;
  }
  auto optional = [&](ir::ValueId v) {
    return v == lowering::OpByOpLayerNorm::kNone ? std::optional<at::Tensor>() : std::optional<at::Tensor>(env.at(v));
  };
  auto [out, mean, rstd] = at::native_layer_norm(x, x.sizes().slice(rank - ln.normalized_dims), optional(ln.weight),
                                                 optional(ln.bias), number(ln.eps));
  // mean and rstd have the row shape the tracer declared (inputs' sizes, the
  // normalized dims 1), as native_layer_norm's own.
  auto put = [&](ir::ValueId v, const at::Tensor& t) {
    const ir::TensorType& type = g.value(v).type;
    env[v] = with_layout(t.to(bridge::to_aten(type.dtype)), type);
  };
  put(ln.out, out);
  put(ln.mean, mean);
  put(ln.rstd, rstd);
}

}  // namespace lazyjit::executor
