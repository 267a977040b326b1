#include "tracer/aten_to_ir.h"

#include <ATen/ATen.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/native/BinaryOps.h>
#include <ATen/native/Resize.h>
#include <c10/util/SmallVector.h>

#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "bridge/aten_ir.h"
#include "runtime/runtime.h"
#include "tracer/device_ops.h"
#include "tracer/ivalue_tensors.h"
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

// ---- elementwise lowering -----------------------------------------------------

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

}  // namespace

// "aten::add_.Tensor" -> "aten::add.Tensor"
std::string functional_name(const std::string& name, bool* inplace) {
  auto dot = name.find('.');
  std::string base = name.substr(0, dot), rest = dot == std::string::npos ? "" : name.substr(dot);
  *inplace = !base.empty() && base.back() == '_' && base.compare(0, 8, "aten::__") != 0;
  if (*inplace) base.pop_back();
  return base + rest;
}

namespace {

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

ir::TensorType contiguous_type(const at::Tensor& m) {
  ir::TensorType t{bridge::from_aten(m.scalar_type()), m.sizes().vec(), {}};
  t.strides = ir::contiguous_strides(t.sizes);
  return t;
}

DType compute_dtype_for(DType t) { return ir::opmath_dtype(t); }

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

namespace {

// ---- reductions and normalizations ------------------------------------------------
//
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

// ---- the ladder's rungs ---------------------------------------------------------

namespace {

// A tensor over `base`'s storage with `m`'s geometry (m is a meta view).
at::Tensor view_like(const at::Tensor& base, const at::Tensor& m) {
  return make_tensor(base.storage(), m.scalar_type(), m.sizes(), m.strides(), m.storage_offset());
}

}  // namespace

bool record_view(const c10::OperatorHandle& op, const Stack& args, const MetaResult& meta, Stack* stack) {
  const auto& schema = op.schema();
  for (size_t r = 0; r < schema.returns().size(); ++r) {
    int a = aliased_arg(schema, r);
    if (a < 0 || !meta.args[a].isTensor()) return false;
    for (const at::Tensor& m : meta.outs)
      if (!m.is_alias_of(meta.args[a].toTensor())) return false;
  }
  // Meta storages have no bounds: as eager's as_strided (setStrided), a view
  // must lie within its base's storage.
  for (size_t r = 0; r < schema.returns().size(); ++r) {
    const at::Tensor& base = args[aliased_arg(schema, r)].toTensor();
    for_each_tensor(meta.rets[r], [&](const at::Tensor& m) {
      at::native::checkInBoundsForStorage(m.sizes(), m.strides(), m.storage_offset(), m.dtype(), base.storage());
    });
  }
  stack->erase(stack->end() - args.size(), stack->end());
  for (size_t r = 0; r < schema.returns().size(); ++r) {
    const at::Tensor& base = args[aliased_arg(schema, r)].toTensor();
    // A view of a conjugate or negative view is one too (ATen's views copy the
    // base's key set; conj() and _neg_view flip the bit after aliasing).
    // view(dtype), view_as_real, view_as_complex, .real/.imag of complex give
    // a view of another dtype over the base's storage: the graph has no
    // bitcast, so ops on it run through the CPU kernels (record_op.cpp).
    stack->push_back(map_tensors(meta.rets[r], [&](const at::Tensor& m) {
      return with_math_bits(view_like(base, m), base);
    }));
  }
  return true;
}

namespace {

// torch.cat of lazy tensors of the output's dtype into a contiguous result: a
// Cat node, which fuses with its consumers (rotate_half's cat with the rotary
// multiply-add). Empty operands are left out, as eager skips them; mixed
// dtypes, other layouts, fewer than two pieces and more than kMaxCatPieces stay
// ATen steps: a kernel's code holds one loop body per piece, and LLVM's time
// grows with it (torch.stack of 64 tensors: 0.6 s to compile, of 512: 16 s).
constexpr size_t kMaxCatPieces = 8;

bool try_cat(const Stack& args, const std::vector<at::Tensor>& meta_outs, Stack* out) {
  if (meta_outs.size() != 1 || args.size() != 2 || !args[0].isTensorList() || !args[1].isInt()) return false;
  const at::Tensor& mo = meta_outs[0];
  const DType dt = bridge::from_aten(mo.scalar_type());
  if (mo.dim() == 0 || mo.numel() == 0 || !mo.is_contiguous() || !runtime::kernels_support(dt)) return false;
  const int64_t dim = c10::maybe_wrap_dim(args[1].toInt(), mo.dim());
  c10::SmallVector<at::Tensor, 4> parts;
  for (const at::Tensor& t : args[0].toTensorList()) {
    if (!t.defined() || !is_lazy(t) || t.scalar_type() != mo.scalar_type()) return false;
    if (t.numel() == 0) continue;  // (legacy 1-d empties among them)
    if (t.dim() != mo.dim()) return false;
    parts.push_back(t);
  }
  if (parts.size() < 2 || parts.size() > kMaxCatPieces) return false;
  TraceContext& ctx = TraceContext::get();
  std::vector<ValueId> ops;
  for (const at::Tensor& t : parts) ops.push_back(ctx.read(t));
  ValueId v = ctx.graph().add_node1(OpKind::Cat, std::move(ops),
                                    {{static_cast<int64_t>(dt)}, {dim}}, contiguous_type(mo));
  out->push_back(ctx.new_tensor(v, mo));
  return true;
}

}  // namespace

bool record_ir_nodes(const OpInfo& info, const Stack& args, const MetaResult& meta, Stack* out) {
  const std::string& fname = info.fname;
  if (info.cat) return try_cat(args, meta.outs, out);
  if (info.reduction && !info.inplace && !info.is_mutable && try_reduction(fname, args, meta.outs, out)) return true;
  if (info.inplace || !info.is_mutable) {
    std::vector<at::Tensor> self_out;  // an in-place op's result is its self argument
    if (info.inplace) self_out.push_back(meta.args[0].toTensor());
    const std::vector<at::Tensor>& result = info.inplace ? self_out : meta.outs;
    if (try_elementwise(fname, info.inplace, args, result, meta.args, out)) return true;
    if (result.size() == 1 && try_pointwise_composite(fname, info.inplace, args, result[0], out)) return true;
    if (info.training && result.size() == 1 && try_training_op(fname, args, result[0], out)) return true;
  }
  return info.is_mutable && try_elementwise_out(fname, args, meta.outs, meta.args, out);
}

}  // namespace lazyjit::tracer
