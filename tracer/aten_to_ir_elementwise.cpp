// Elementwise ATen ops as IR nodes (aten_to_ir.h): the op table, dtype
// promotion and memory order of try_elementwise, its .out form, and addcmul,
// addcdiv and lerp built from elementwise nodes.
#include <ATen/ATen.h>
#include <c10/util/SmallVector.h>

#include <unordered_map>

#include "bridge/aten_ir.h"
#include "runtime/runtime.h"
#include "tracer/aten_to_ir.h"
#include "tracer/lazy_storage.h"
#include "tracer/trace_context.h"

namespace lazyjit::tracer {

using c10::IValue;
using ir::DType;
using ir::OpKind;
using ir::ValueId;
using torch::jit::Stack;

namespace {

// The dims of a dense, non-contiguous `m` from outermost to innermost in
// memory; empty when `m` is contiguous or not a permutation of a dense layout.
std::vector<int64_t> memory_order(const at::Tensor& m) {
  if (m.dim() < 2 || m.is_contiguous() || m.storage_offset() != 0 || !m.is_non_overlapping_and_dense())
    return {};
  std::vector<int64_t> perm(m.dim());
  for (int64_t i = 0; i < m.dim(); ++i) perm[i] = i;
  std::stable_sort(perm.begin(), perm.end(), [&](int64_t a, int64_t b) {
    return m.stride(a) > m.stride(b) || (m.stride(a) == m.stride(b) && m.size(a) > m.size(b));
  });
  return perm;
}

// `t` (broadcast to `rank` dims) with its dims reordered: a new TensorImpl over
// the same storage, made without dispatching.
at::Tensor permuted(const at::Tensor& t, int64_t rank, const std::vector<int64_t>& perm) {
  std::vector<int64_t> sizes(rank, 1), strides(rank, 0), ps(rank), pst(rank);
  for (int64_t d = 0; d < t.dim(); ++d) {
    sizes[rank - t.dim() + d] = t.size(d);
    strides[rank - t.dim() + d] = t.stride(d);
  }
  for (int64_t d = 0; d < rank; ++d) ps[d] = sizes[perm[d]], pst[d] = strides[perm[d]];
  if (!t.device().is_meta() && !is_lazy(t)) return t;
  if (t.device().is_meta()) return at::empty_strided(ps, ir::contiguous_strides(ps), t.options());
  return make_tensor(t.storage(), t.scalar_type(), ps, pst, t.storage_offset());
}


struct EwRule {
  OpKind kind;
  int arity;  // operands taken from the leading schema arguments
};

const std::unordered_map<std::string, EwRule>& elementwise_rules() {
  static const std::unordered_map<std::string, EwRule> r = [] {
    std::unordered_map<std::string, EwRule> m;
    auto both = [&](const std::string& base, OpKind k, int arity) {
      m[base + ".Tensor"] = {k, arity};
      m[base + ".Scalar"] = {k, arity};
    };
    both("aten::add", OpKind::Add, 2);
    both("aten::sub", OpKind::Sub, 2);
    both("aten::mul", OpKind::Mul, 2);
    both("aten::div", OpKind::Div, 2);
    m["aten::div.Tensor_mode"] = {OpKind::Div, 2};
    m["aten::div.Scalar_mode"] = {OpKind::Div, 2};
    both("aten::remainder", OpKind::Remainder, 2);
    for (const char* c : {"eq", "ne", "lt", "le", "gt", "ge"}) {
      static const std::unordered_map<std::string, OpKind> k = {
          {"eq", OpKind::Eq}, {"ne", OpKind::Ne}, {"lt", OpKind::Lt},
          {"le", OpKind::Le}, {"gt", OpKind::Gt}, {"ge", OpKind::Ge}};
      both(std::string("aten::") + c, k.at(c), 2);
    }
    both("aten::bitwise_and", OpKind::BitAnd, 2);
    both("aten::bitwise_or", OpKind::BitOr, 2);
    both("aten::bitwise_xor", OpKind::BitXor, 2);
    m["aten::pow.Tensor_Scalar"] = {OpKind::Pow, 2};
    m["aten::pow.Tensor_Tensor"] = {OpKind::Pow, 2};
    m["aten::pow.Scalar"] = {OpKind::Pow, 2};
    m["aten::maximum"] = {OpKind::Maximum, 2};
    m["aten::minimum"] = {OpKind::Minimum, 2};
    m["aten::logical_and"] = {OpKind::LogicalAnd, 2};
    m["aten::logical_or"] = {OpKind::LogicalOr, 2};
    m["aten::where.self"] = {OpKind::Where, 3};
    // clamp is maximum then minimum: NaN in x or in a bound propagates, and a
    // min above max gives max, as in ATen.
    m["aten::clamp"] = {OpKind::Clamp, 3};
    m["aten::clamp.Tensor"] = {OpKind::Clamp, 3};
    m["aten::clamp_min"] = {OpKind::Maximum, 2};
    m["aten::clamp_min.Tensor"] = {OpKind::Maximum, 2};
    m["aten::clamp_max"] = {OpKind::Minimum, 2};
    m["aten::clamp_max.Tensor"] = {OpKind::Minimum, 2};
    std::pair<const char*, OpKind> unary[] = {
        {"abs", OpKind::Abs}, {"neg", OpKind::Neg}, {"exp", OpKind::Exp}, {"log", OpKind::Log},
        {"sqrt", OpKind::Sqrt}, {"rsqrt", OpKind::Rsqrt}, {"tanh", OpKind::Tanh},
        {"sigmoid", OpKind::Sigmoid}, {"relu", OpKind::Relu}, {"gelu", OpKind::Gelu},
        {"silu", OpKind::Silu}, {"reciprocal", OpKind::Reciprocal}, {"sin", OpKind::Sin},
        {"cos", OpKind::Cos}, {"log1p", OpKind::Log1p}, {"expm1", OpKind::Expm1},
        {"erf", OpKind::Erf}, {"logical_not", OpKind::LogicalNot}};
    for (auto [n, k] : unary) m[std::string("aten::") + n] = {k, 1};
    return m;
  }();
  return r;
}

bool float_only(OpKind k) {
  switch (k) {
    case OpKind::Div: case OpKind::DivTrunc: case OpKind::DivFloor: case OpKind::Remainder:
    case OpKind::Pow: case OpKind::Exp: case OpKind::Log: case OpKind::Sqrt: case OpKind::Rsqrt:
    case OpKind::Tanh: case OpKind::Sigmoid: case OpKind::Gelu: case OpKind::GeluTanh:
    case OpKind::Silu: case OpKind::Reciprocal: case OpKind::Sin: case OpKind::Cos:
    case OpKind::Log1p: case OpKind::Expm1: case OpKind::Erf:
      return true;
    default: return false;
  }
}

bool bool_ok(OpKind k) {
  return ir::is_predicate(k) || k == OpKind::BitAnd || k == OpKind::BitOr || k == OpKind::BitXor ||
         k == OpKind::Where || k == OpKind::Cast;
}

}  // namespace


// Records an elementwise op; returns false (recording nothing) when the op is not
// one the codegen handles for these dtypes.
bool try_elementwise(const std::string& fname, bool inplace, const Stack& args,
                     const std::vector<at::Tensor>& meta_outs, const Stack& meta_args,
                     Stack* out) {
  auto it = elementwise_rules().find(fname);
  if (it == elementwise_rules().end() || meta_outs.size() != 1) return false;
  EwRule rule = it->second;
  TraceContext& ctx = TraceContext::get();
  const at::Tensor& mo = meta_outs[0];
  DType out_dt = bridge::from_aten(mo.scalar_type());
  if (!runtime::kernels_support(out_dt)) return false;

  // Operand dtypes as PyTorch promotes them; a Scalar promotes like a wrapped
  // number of its kind (made once, never freed: they are only read).
  static const auto wrapped = [](at::ScalarType dt) {
    at::Tensor w = at::empty({}, at::TensorOptions().device(at::kMeta).dtype(dt));
    w.unsafeGetTensorImpl()->set_wrapped_number(true);
    return new at::Tensor(std::move(w));
  };
  static const at::Tensor &wrapped_double = *wrapped(at::kDouble), &wrapped_bool = *wrapped(at::kBool),
                          &wrapped_long = *wrapped(at::kLong);
  c10::SmallVector<at::Tensor, 3> metas;
  for (int i = 0; i < rule.arity; ++i) {
    const IValue& m = meta_args[i];
    if (m.isTensor()) metas.push_back(m.toTensor());
    else if (m.isScalar()) {
      metas.push_back(m.toScalar().isFloatingPoint() ? wrapped_double
                      : m.toScalar().isBoolean()     ? wrapped_bool
                                                     : wrapped_long);
    } else if (m.isNone()) {
      metas.emplace_back();
    } else {
      return false;
    }
  }
  for (const auto& m : metas)
    if (m.defined() && !runtime::kernels_support(bridge::from_aten(m.scalar_type()))) return false;

  OpKind kind = rule.kind;
  if (fname.find("_mode") != std::string::npos && args.size() > 2 && args[2].isString()) {
    kind = args[2].toStringRef() == "trunc" ? OpKind::DivTrunc : OpKind::DivFloor;
  }
  if (kind == OpKind::Gelu && args.size() > 1 && args[1].isString() && args[1].toStringRef() == "tanh")
    kind = OpKind::GeluTanh;

  DType compute;
  if (ir::is_predicate(kind) && kind != OpKind::Eq && kind != OpKind::Ne && kind != OpKind::Lt &&
      kind != OpKind::Le && kind != OpKind::Gt && kind != OpKind::Ge) {
    compute = DType::Bool;  // logical ops
  } else if (ir::is_predicate(kind)) {
    compute = bridge::from_aten(metas.size() == 2 ? at::result_type(metas[0], metas[1]) : metas[0].scalar_type());
  } else if (kind == OpKind::Where) {
    compute = out_dt;
  } else if (inplace) {
    at::ScalarType rt = metas[0].scalar_type();
    for (size_t i = 1; i < metas.size(); ++i)
      if (metas[i].defined()) rt = at::result_type(at::empty({}, at::TensorOptions().device(at::kMeta).dtype(rt)), metas[i]);
    compute = bridge::from_aten(ir::is_floating(out_dt) ? mo.scalar_type() : rt);
    if (ir::is_floating(bridge::from_aten(rt)) && !ir::is_floating(out_dt)) return false;
  } else {
    compute = out_dt;
  }
  compute = compute_dtype_for(compute);
  if (compute == DType::Bool && !bool_ok(kind)) return false;
  if (!ir::is_floating(compute) && float_only(kind)) return false;

  // An output laid out like a permuted input (e.g. x.t() * 2) keeps that layout,
  // as in eager: the node computes in the output's memory order and every
  // operand is read through the same permutation.
  std::vector<int64_t> perm = memory_order(mo);
  auto in_order = [&](const at::Tensor& t) { return perm.empty() ? t : permuted(t, mo.dim(), perm); };
  std::vector<ValueId> ops;
  ops.reserve(rule.arity);
  for (int i = 0; i < rule.arity; ++i) {
    const IValue& a = args[i];
    if (a.isTensor() && is_lazy(a.toTensor())) ops.push_back(ctx.read(in_order(a.toTensor())));
    else if (a.isTensor()) ops.push_back(ctx.scalar_tensor(a.toTensor()));
    else if (a.isScalar()) ops.push_back(ctx.scalar(a.toScalar()));
    else ops.push_back(ops[0]);  // an absent clamp bound: wired to x, ignored
  }
  ir::TensorType ot = contiguous_type(perm.empty() ? mo : permuted(mo, mo.dim(), perm));
  auto& g = ctx.graph();
  std::vector<ir::Attr> attrs{{static_cast<int64_t>(compute)}};
  if (kind == OpKind::Clamp) {
    ir::TensorType ct = ot;
    ct.dtype = compute;
    ValueId v = ops[0];
    if (!args[1].isNone())
      v = g.add_node1(OpKind::Maximum, {v, ops[1]}, attrs, args[2].isNone() ? ot : ct);
    if (!args[2].isNone()) v = g.add_node1(OpKind::Minimum, {v, ops[2]}, attrs, ot);
    if (v == ops[0]) v = g.add_node1(OpKind::Cast, {v}, attrs, ot);  // clamp with no bounds
    if (inplace) {
      ctx.write(in_order(args[0].toTensor()), v);
      out->push_back(args[0]);
    } else {
      out->push_back(ctx.new_tensor(v, mo));
    }
    return true;
  }
  // add/sub with alpha: x + alpha * y; alpha == 1 is specialised away.
  if ((kind == OpKind::Add || kind == OpKind::Sub) && args.size() > 2 && args[2].isScalar() &&
      !args[2].toScalar().equal(1)) {
    if (ir::is_floating(compute)) {
      // ATen's CPU kernel: fma(y, alpha, x), sub as add with -alpha, alpha first
      // rounded to the kernel's dtype (the promoted operand dtype: bf16 and f16 too).
      c10::Scalar alpha = kind == OpKind::Sub ? -args[2].toScalar() : args[2].toScalar();
      at::ScalarType kernel_dt = inplace ? at::result_type(metas[0], metas[1]) : mo.scalar_type();
      if (kernel_dt == at::kBFloat16) alpha = static_cast<double>(static_cast<float>(alpha.to<at::BFloat16>()));
      if (kernel_dt == at::kHalf) alpha = static_cast<double>(static_cast<float>(alpha.to<at::Half>()));
      ValueId v = g.add_node1(OpKind::Fma, {ops[1], ctx.scalar(alpha), ops[0]}, std::move(attrs), std::move(ot));
      if (inplace) ctx.write(in_order(args[0].toTensor()), v);
      out->push_back(inplace ? args[0] : IValue(ctx.new_tensor(v, mo)));
      return true;
    }
    ValueId alpha = ctx.scalar(args[2].toScalar());
    ir::TensorType mt = g.value(ops[1]).type;
    mt.dtype = compute;
    mt.strides = ir::contiguous_strides(mt.sizes);
    ops[1] = g.add_node1(OpKind::Mul, {ops[1], alpha}, {{static_cast<int64_t>(compute)}}, mt);
  }
  ValueId v = g.add_node1(kind, std::move(ops), std::move(attrs), std::move(ot));
  if (inplace) {
    const at::Tensor& self = args[0].toTensor();
    ctx.write(in_order(self), v);
    out->push_back(self);
  } else {
    out->push_back(ctx.new_tensor(v, mo));
  }
  return true;
}


// `aten::mul.out(a, b, out=o)` and the like: the functional op's node, written
// into `o` when `o` is a lazy tensor already of the result's size and of every
// lazy operand's dtype (other operands: 0-d CPU tensors of that dtype, or
// wrapped Python numbers); resizes and casts on the way out stay library steps. AdamW's foreach updates write their results this way.
bool try_elementwise_out(const std::string& fname, const Stack& args, const std::vector<at::Tensor>& meta_outs,
                         const Stack& meta_args, Stack* stack) {
  static const std::string suffix = ".out";
  if (meta_outs.size() != 1 || fname.size() <= suffix.size() ||
      fname.compare(fname.size() - suffix.size(), suffix.size(), suffix) != 0 || args.empty())
    return false;
  const IValue& last = args.back();
  if (!last.isTensor() || !is_lazy(last.toTensor())) return false;
  const at::Tensor& o = last.toTensor();
  if (!o.is_contiguous() || o.sizes() != meta_outs[0].sizes()) return false;
  for (size_t i = 0; i + 1 < args.size(); ++i) {
    if (!args[i].isTensor()) continue;
    const at::Tensor& t = args[i].toTensor();
    if (is_lazy(t) ? t.scalar_type() != o.scalar_type()
                   : t.dim() != 0 || (t.scalar_type() != o.scalar_type() &&
                                      !t.unsafeGetTensorImpl()->is_wrapped_number()))
      return false;
  }
  std::string base = fname.substr(0, fname.size() - suffix.size());
  Stack fargs(args.begin(), args.end() - 1), fmeta(meta_args.begin(), meta_args.end() - 1), tmp;
  for (const std::string& f : {base + ".Tensor", base}) {
    if (!try_elementwise(f, false, fargs, meta_outs, fmeta, &tmp)) continue;
    TraceContext& ctx = TraceContext::get();
    ctx.write(o, ctx.read(tmp.at(0).toTensor()));
    stack->push_back(last);
    return true;
  }
  return false;
}

// addcmul, addcdiv and lerp (what AdamW's foreach updates call per tensor) as
// elementwise nodes, so an optimizer step fuses into a few kernels instead of
// one library call per op (each cloning the tensor it updates). Floating
// tensors of one dtype only; anything else stays a library step. Rounded as
// ATen's CPU kernels round them (fma: one rounding; the compiler contracts
// addcmul's `self + value * t1 * t2` into one, lerp calls vec::fmadd):
//   addcmul: fma(value * t1, t2, self)   addcdiv: self + value * t1 / t2
//   lerp:    |w| < 0.5 ? fma(w, end - self, self) : fma(w - 1, end - self, end)
bool try_pointwise_composite(const std::string& fname, bool inplace, const Stack& args,
                             const at::Tensor& mo, Stack* out) {
  enum class Op { Addcmul, Addcdiv, Lerp } op;
  if (fname == "aten::addcmul") op = Op::Addcmul;
  else if (fname == "aten::addcdiv") op = Op::Addcdiv;
  else if (fname == "aten::lerp.Scalar" || fname == "aten::lerp.Tensor") op = Op::Lerp;
  else return false;
  if (args.size() < 3 || !args[0].isTensor() || !args[1].isTensor()) return false;
  const at::Tensor& self = args[0].toTensor();
  DType dt = bridge::from_aten(mo.scalar_type());
  if (!ir::is_floating(dt) || !is_lazy(self) || !memory_order(mo).empty() || !mo.is_contiguous()) return false;
  // Tensor operands: lazy tensors of the result's dtype (a 0-d CPU tensor is a scalar argument).
  auto ok = [&](const IValue& v) {
    if (v.isScalar()) return v.toScalar().isFloatingPoint() || v.toScalar().isIntegral(false);
    if (!v.isTensor()) return false;
    const at::Tensor& t = v.toTensor();
    if (!is_lazy(t)) return t.dim() == 0 && t.device().is_cpu() && t.scalar_type() == mo.scalar_type();
    return t.scalar_type() == mo.scalar_type();
  };
  for (size_t i = 0; i < 3; ++i)
    if (!ok(args[i])) return false;
  if (op != Op::Lerp && args.size() > 3 && !(args[3].isScalar() && ok(args[3]))) return false;

  TraceContext& ctx = TraceContext::get();
  auto& g = ctx.graph();
  DType ct = compute_dtype_for(dt);
  ir::TensorType ft = contiguous_type(mo);  // the result's sizes, in compute dtype
  ft.dtype = ct;
  std::vector<ir::Attr> attrs{{static_cast<int64_t>(ct)}};
  auto operand = [&](const IValue& v) -> ValueId {
    if (v.isScalar()) return ctx.scalar(v.toScalar());
    const at::Tensor& t = v.toTensor();
    return is_lazy(t) ? ctx.read(t) : ctx.scalar_tensor(t);
  };
  auto node = [&](OpKind k, std::vector<ValueId> ops) { return g.add_node1(k, std::move(ops), attrs, ft); };
  ValueId a = operand(args[0]), b = operand(args[1]), c = operand(args[2]);
  ValueId r;
  if (op == Op::Lerp) {
    ValueId d = node(OpKind::Sub, {b, a});
    ir::TensorType bt = ft;
    bt.dtype = DType::Bool;
    ValueId w_abs = node(OpKind::Abs, {c});
    ValueId half = ctx.scalar(c10::Scalar(0.5));
    ValueId small = g.add_node1(OpKind::Lt, {w_abs, half}, attrs, bt);
    ValueId one = ctx.scalar(c10::Scalar(1.0));
    ValueId coeff = node(OpKind::Where, {small, c, node(OpKind::Sub, {c, one})});
    ValueId base = node(OpKind::Where, {small, a, b});
    r = node(OpKind::Fma, {coeff, d, base});
  } else {
    bool has_value = args.size() > 3 && !(args[3].toScalar().equal(1));
    ValueId t1 = has_value ? node(OpKind::Mul, {ctx.scalar(args[3].toScalar()), b}) : b;
    r = op == Op::Addcmul ? node(OpKind::Fma, {t1, c, a}) : node(OpKind::Add, {a, node(OpKind::Div, {t1, c})});
  }
  if (ct != dt) r = g.add_node1(OpKind::Cast, {r}, attrs, contiguous_type(mo));
  if (inplace) {
    ctx.write(self, r);
    out->push_back(args[0]);
  } else {
    out->push_back(ctx.new_tensor(r, mo));
  }
  return true;
}

}  // namespace lazyjit::tracer
