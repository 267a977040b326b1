#include "executor/op_by_op_node.h"

#include <ATen/ATen.h>

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

at::Tensor unary(OpKind k, const at::Tensor& x) {
  switch (k) {
    case OpKind::Abs: return at::abs(x);
    case OpKind::Neg: return at::neg(x);
    case OpKind::Exp: return at::exp(x);
    case OpKind::Log: return at::log(x);
    case OpKind::Sqrt: return at::sqrt(x);
    case OpKind::Rsqrt: return at::rsqrt(x);
    case OpKind::Tanh: return at::tanh(x);
    case OpKind::Sigmoid: return at::sigmoid(x);
    case OpKind::Relu: return at::relu(x);
    case OpKind::Gelu: return at::gelu(x);
    case OpKind::GeluTanh: return at::gelu(x, "tanh");
    case OpKind::Silu: return at::silu(x);
    case OpKind::Reciprocal: return at::reciprocal(x);
    case OpKind::Sin: return at::sin(x);
    case OpKind::Cos: return at::cos(x);
    case OpKind::Log1p: return at::log1p(x);
    case OpKind::Expm1: return at::expm1(x);
    case OpKind::Erf: return at::erf(x);
    case OpKind::LogicalNot: return at::logical_not(x);
    case OpKind::Cast: return x;
    default: break;
  }
  throw std::runtime_error("lazyjit: no eager form of " + std::string(ir::op_name(k)));
}

at::Tensor binary(OpKind k, const at::Tensor& a, const at::Tensor& b) {
  switch (k) {
    case OpKind::Add: return at::add(a, b);
    case OpKind::Sub: return at::sub(a, b);
    case OpKind::Mul: return at::mul(a, b);
    case OpKind::Div: return at::div(a, b);
    case OpKind::DivTrunc: return at::div(a, b, "trunc");
    case OpKind::DivFloor: return at::div(a, b, "floor");
    case OpKind::Remainder: return at::remainder(a, b);
    case OpKind::Pow: return at::pow(a, b);
    case OpKind::Maximum: return at::maximum(a, b);
    case OpKind::Minimum: return at::minimum(a, b);
    case OpKind::Eq: return at::eq(a, b);
    case OpKind::Ne: return at::ne(a, b);
    case OpKind::Lt: return at::lt(a, b);
    case OpKind::Le: return at::le(a, b);
    case OpKind::Gt: return at::gt(a, b);
    case OpKind::Ge: return at::ge(a, b);
    case OpKind::LogicalAnd: return at::logical_and(a, b);
    case OpKind::LogicalOr: return at::logical_or(a, b);
    case OpKind::BitAnd: return at::bitwise_and(a, b);
    case OpKind::BitOr: return at::bitwise_or(a, b);
    case OpKind::BitXor: return at::bitwise_xor(a, b);
    default: break;
  }
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

}  // namespace

void run_op_by_op_node(const ir::Graph& g, const ir::Node& n, std::vector<at::Tensor>& env,
                       const std::vector<int64_t>& scalars, c10::Device device) {
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
    for (at::Tensor& t : in) t = t.to(c);
    if (ir::is_unary(n.kind)) {
      r = unary(n.kind, in.at(0));
    } else if (n.kind == OpKind::Pow && g.producer(n.operands.at(1)).kind == OpKind::Scalar) {
      // x ** 2.0 as eager runs it: pow(Tensor, Scalar), whose special cases
      // (x*x, sqrt, rsqrt, ...) differ from pow(Tensor, Tensor) by an ulp, and
      // at -inf ** 0.5 by nan against inf.
      r = at::pow(in.at(0), in.at(1).item());
    } else if (ir::is_binary(n.kind)) {
      r = binary(n.kind, in.at(0), in.at(1));
    } else if (n.kind == OpKind::Where) {
      r = at::where(in.at(0).to(at::kBool), in.at(1), in.at(2));
    } else if (n.kind == OpKind::Clamp) {
      int64_t has = std::get<int64_t>(n.attrs.at(1).value);
      std::optional<at::Tensor> lo, hi;
      if (has & 1) lo = in.at(1);
      if (has & 2) hi = in.at(2);
      r = at::clamp(in.at(0), lo, hi);
    } else if (n.kind == OpKind::Cat) {
      r = at::cat(in, std::get<int64_t>(n.attrs.at(1).value));
    } else if (n.kind == OpKind::Fma) {
      // Rounded once for float32 and narrower: exact in float64, then cast.
      if (c == at::kDouble) r = at::addcmul(in.at(2), in.at(0), in.at(1));
      else r = at::addcmul(in.at(2).to(at::kDouble), in.at(0).to(at::kDouble), in.at(1).to(at::kDouble));
    } else {
      throw std::runtime_error("lazyjit: no eager form of " + std::string(ir::op_name(n.kind)));
    }
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
