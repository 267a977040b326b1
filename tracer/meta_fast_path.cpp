#include "tracer/meta_fast_path.h"

#include <ATen/ATen.h>
#include <ATen/native/TypeProperties.h>
#include <c10/core/DefaultDtype.h>

#include <algorithm>
#include <string>
#include <unordered_map>

#include "tracer/ivalue_ints.h"
#include "tracer/lazy_storage.h"

namespace lazyjit::tracer {

using c10::IValue;
using torch::jit::Stack;

namespace {

enum class Kind : uint8_t {
  None,
  Binary,       // TensorIterator binary op: common dtype (add, sub, mul, maximum, pow, div with rounding)
  BinaryFloat,  // ... integer common dtype promoted to the default float (div)
  Compare,      // ... bool result (eq, lt, ...)
  UnarySame,    // unary, the input's dtype (neg, abs, relu, floor, ...)
  UnaryFloat,   // unary, integers promoted to the default float (exp, tanh, sqrt, ...)
  FloatOnly,    // unary, floating inputs only, same dtype (gelu, silu)
  Where,
  Clamp,        // clamp / clamp_min / clamp_max with Scalar bounds
  PowScalar,
  LayerNorm,
  Addmm,
  Mm,
  Tri,          // triu / tril
  Cat,
  Reduce,       // sum / mean over dims
  IndexSelect,
  Softmax,      // _softmax / _log_softmax
  Var,          // var / var_mean with a correction
  FlashCpu,     // _scaled_dot_product_flash_attention_for_cpu
};

struct OpDesc {
  Kind kind = Kind::None;
  bool no_bool = false;  // bool inputs fall back (neg's "-" on bool and the like)
  bool alpha = false;    // the third argument is add/sub's alpha
  bool rounding = false; // div's rounding_mode argument
  bool mean = false;     // Reduce: mean (else sum)
};

OpDesc classify(const c10::FunctionSchema& s) {
  const std::string& full = s.name();
  if (full.rfind("aten::", 0) != 0) return {};
  std::string n = full.substr(6);
  const std::string& o = s.overload_name();
  auto any = [&](std::initializer_list<const char*> l) {
    return std::any_of(l.begin(), l.end(), [&](const char* x) { return n == x; });
  };
  bool ts = o == "Tensor" || o == "Scalar";
  if ((n == "add" || n == "sub") && ts) return {Kind::Binary, n == "sub", true};
  if (n == "mul" && ts) return {Kind::Binary};
  if (any({"maximum", "minimum"}) && o.empty()) return {Kind::Binary, true};
  if (n == "pow" && o == "Tensor_Tensor") return {Kind::Binary, true};
  if (n == "div" && ts) return {Kind::BinaryFloat};
  if (n == "div" && (o == "Tensor_mode" || o == "Scalar_mode")) return {Kind::Binary, true, false, true};
  if (any({"eq", "ne", "lt", "le", "gt", "ge"}) && ts) return {Kind::Compare};
  if (o.empty() && any({"neg", "abs", "relu", "floor", "ceil", "trunc"})) return {Kind::UnarySame, true};
  if (o.empty() && any({"gelu", "silu"})) return {Kind::FloatOnly, true};
  if (o.empty() && any({"exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sin", "cos", "tan", "asin", "acos",
                        "atan", "sinh", "cosh", "tanh", "sigmoid", "sqrt", "rsqrt", "reciprocal", "erf", "erfc",
                        "erfinv"}))
    return {Kind::UnaryFloat};
  if (n == "where" && o == "self") return {Kind::Where};
  if (o.empty() && any({"clamp", "clamp_min", "clamp_max"})) return {Kind::Clamp, true};
  if (n == "pow" && o == "Tensor_Scalar") return {Kind::PowScalar};
  if (n == "native_layer_norm" && o.empty()) return {Kind::LayerNorm};
  if (n == "addmm" && o.empty()) return {Kind::Addmm};
  if (n == "mm" && o.empty()) return {Kind::Mm};
  if (any({"triu", "tril"}) && o.empty()) return {Kind::Tri};
  if (n == "cat" && o.empty()) return {Kind::Cat};
  if ((n == "sum" && o == "dim_IntList") || (n == "mean" && o == "dim")) return {Kind::Reduce, false, false, false, n == "mean"};
  if (n == "index_select" && o.empty()) return {Kind::IndexSelect};
  if ((n == "_softmax" || n == "_log_softmax") && o.empty()) return {Kind::Softmax};
  if ((n == "var" || n == "var_mean") && o == "correction") return {Kind::Var, false, false, false, n == "var_mean"};
  if (n == "_scaled_dot_product_flash_attention_for_cpu" && o.empty()) return {Kind::FlashCpu};
  return {};
}

const OpDesc& describe(const c10::OperatorHandle& op) {
  static std::unordered_map<const c10::FunctionSchema*, OpDesc> cache;  // guarded by the trace lock
  const c10::FunctionSchema* s = &op.schema();
  auto it = cache.find(s);
  if (it == cache.end()) it = cache.emplace(s, classify(*s)).first;
  return it->second;
}

bool plain_dtype(at::ScalarType t) {
  switch (t) {
    case at::kFloat: case at::kDouble: case at::kBFloat16: case at::kHalf:
    case at::kLong: case at::kInt: case at::kShort: case at::kChar: case at::kByte: case at::kBool:
      return true;
    default:
      return false;
  }
}

bool float_dtype(at::ScalarType t) {
  return t == at::kFloat || t == at::kDouble || t == at::kBFloat16 || t == at::kHalf;
}

// Strides exactly the C-contiguous ones, size-1 dims included (is_contiguous()
// ignores those; TensorIterator's dim ordering does not).
bool dense(const at::Tensor& t) {
  int64_t expected = 1;
  for (int64_t d = t.dim() - 1; d >= 0; --d) {
    if (t.stride(d) != expected) return false;
    expected *= std::max<int64_t>(t.size(d), 1);
  }
  return true;
}

using Shape = c10::SmallVector<int64_t, 6>;

// PyTorch's broadcast; false where it fails (the meta kernel raises eager's error).
bool broadcast_into(Shape* shape, at::IntArrayRef s) {
  if (s.size() > shape->size()) shape->insert(shape->begin(), s.size() - shape->size(), 1);
  size_t off = shape->size() - s.size();
  for (size_t i = 0; i < s.size(); ++i) {
    int64_t& a = (*shape)[off + i];
    if (a != s[i] && a != 1 && s[i] != 1) return false;
    if (a == 1) a = s[i];
  }
  return true;
}

at::Tensor meta_empty(at::IntArrayRef sizes, at::ScalarType dt) {
  return at::empty(sizes, at::TensorOptions().dtype(dt).device(at::kMeta));
}

at::ScalarType default_float() { return c10::typeMetaToScalarType(c10::get_default_dtype()); }

// The operands of a TensorIterator op: tensors (0-d anywhere, others lazyjit and
// dense) and real Scalars. Accumulates eager's result-type state and the
// broadcast shape; false for anything this path does not handle.
struct Operands {
  at::native::ResultTypeState state{};
  Shape shape;
  bool any_bool = false;
  bool bad = false;

  void tensor(const IValue& v) {
    if (bad) return;
    if (!v.isTensor()) { bad = true; return; }
    const at::Tensor& t = v.toTensor();
    if (!t.defined() || !plain_dtype(t.scalar_type())) { bad = true; return; }
    if (t.dim() > 0 && (!is_lazy(t) || !dense(t) || t.numel() == 0)) { bad = true; return; }
    any_bool |= t.scalar_type() == at::kBool;
    state = at::native::update_result_type_state(t, state);
    if (!broadcast_into(&shape, t.sizes())) bad = true;
  }
  void scalar(const IValue& v) {
    if (bad) return;
    if (!v.isScalar() || v.toScalar().isComplex()) { bad = true; return; }
    any_bool |= v.toScalar().isBoolean();
    state = at::native::update_result_type_state(v.toScalar(), state);
  }
  void operand(const IValue& v) { v.isTensor() ? tensor(v) : scalar(v); }
  at::ScalarType dtype() const { return at::native::result_type(state); }
};

bool numel_zero(const Shape& s) {
  return std::any_of(s.begin(), s.end(), [](int64_t x) { return x == 0; });
}

bool pointwise(const OpDesc& d, const Stack& args, Stack* rets) {
  Operands ops;
  at::ScalarType dt;
  switch (d.kind) {
    case Kind::Binary:
    case Kind::BinaryFloat:
    case Kind::Compare: {
      if (args.size() < 2) return false;
      ops.tensor(args[0]);
      ops.operand(args[1]);
      if (ops.bad) return false;
      dt = ops.dtype();
      if (d.kind == Kind::Compare) {
        dt = at::kBool;
      } else if (d.kind == Kind::BinaryFloat) {
        if (at::isIntegralType(dt, /*includeBool=*/true)) dt = default_float();
      } else if (dt == at::kBool && d.no_bool) {
        return false;
      }
      if (d.alpha && args.size() > 2) {  // ATen's alpha_check, as a reason to fall back
        if (!args[2].isScalar()) return false;
        const c10::Scalar a = args[2].toScalar();
        if (a.isComplex() || a.isBoolean()) return false;
        if (a.isFloatingPoint() && !at::isFloatingType(dt)) return false;
      }
      if (d.rounding) {
        if (args.size() < 3 || !args[2].isString()) return false;
        const std::string& m = args[2].toStringRef();
        if (m != "trunc" && m != "floor") return false;
      }
      break;
    }
    case Kind::UnarySame:
    case Kind::UnaryFloat:
    case Kind::FloatOnly: {
      if (args.empty()) return false;
      ops.tensor(args[0]);
      if (ops.bad) return false;
      dt = args[0].toTensor().scalar_type();
      if (d.kind == Kind::UnaryFloat && at::isIntegralType(dt, true)) dt = default_float();
      if (d.kind == Kind::FloatOnly && !float_dtype(dt)) return false;
      if (d.no_bool && dt == at::kBool) return false;
      if (args.size() > 1) {  // gelu's approximate
        if (!args[1].isString()) return false;
        const std::string& m = args[1].toStringRef();
        if (m != "none" && m != "tanh") return false;
      }
      break;
    }
    case Kind::Where: {
      if (args.size() != 3 || !args[0].isTensor() || !args[0].toTensor().defined() ||
          args[0].toTensor().scalar_type() != at::kBool)
        return false;
      ops.tensor(args[1]);
      ops.tensor(args[2]);
      if (ops.bad) return false;
      dt = ops.dtype();  // the condition takes no part in promotion
      ops.tensor(args[0]);
      if (ops.bad) return false;
      break;
    }
    case Kind::Clamp: {
      ops.tensor(args[0]);
      if (ops.bad || ops.any_bool) return false;
      bool bound = false;
      for (size_t i = 1; i < args.size(); ++i) {
        if (args[i].isNone()) continue;
        ops.scalar(args[i]);
        bound = true;
      }
      if (ops.bad || !bound) return false;
      at::ScalarType self_dt = args[0].toTensor().scalar_type();
      dt = at::isFloatingType(self_dt) ? self_dt : ops.dtype();
      break;
    }
    case Kind::PowScalar: {
      if (args.size() != 2) return false;
      ops.tensor(args[0]);
      ops.scalar(args[1]);
      if (ops.bad) return false;
      const c10::Scalar e = args[1].toScalar();  // ATen's meta: integers to negative integer powers
      if (at::isIntegralType(args[0].toTensor().scalar_type(), true) && e.isIntegral(true) && e.toLong() < 0)
        return false;
      dt = ops.dtype();
      break;
    }
    default:
      return false;
  }
  if (numel_zero(ops.shape)) return false;
  rets->push_back(meta_empty(ops.shape, dt));
  return true;
}

const at::Tensor* lazy_tensor(const IValue& v) {
  if (!v.isTensor()) return nullptr;
  const at::Tensor& t = v.toTensor();
  return t.defined() && is_lazy(t) && t.numel() > 0 ? &t : nullptr;
}

// Eager CPU's native_layer_norm: out like the input (contiguous), mean and rstd
// of the input's sizes with the normalized dims 1, in the input's dtype, or
// float for a bf16/half input with float weight and bias (the mixed type).
bool layer_norm(const Stack& args, Stack* rets) {
  if (args.size() != 5) return false;
  const at::Tensor* x = lazy_tensor(args[0]);
  std::vector<int64_t> norm;
  if (!x || !dense(*x) || !float_dtype(x->scalar_type()) || !int_list(args[1], &norm)) return false;
  int64_t n = static_cast<int64_t>(norm.size()), axis = x->dim() - n;
  if (n == 0 || axis < 0) return false;
  for (int64_t i = 0; i < n; ++i)
    if (x->size(axis + i) != norm[i]) return false;
  at::ScalarType param = at::ScalarType::Undefined;
  for (int i : {2, 3}) {
    if (args[i].isNone()) continue;
    const at::Tensor* p = lazy_tensor(args[i]);
    if (!p || p->sizes() != at::IntArrayRef(norm)) return false;
    if (param != at::ScalarType::Undefined && p->scalar_type() != param) return false;
    param = p->scalar_type();
  }
  at::ScalarType stat = x->scalar_type();
  if (param != at::ScalarType::Undefined && param != stat) {
    if (!(param == at::kFloat && (stat == at::kBFloat16 || stat == at::kHalf))) return false;
    stat = at::kFloat;
  }
  Shape stat_shape(x->sizes().begin(), x->sizes().end());
  for (int64_t i = axis; i < x->dim(); ++i) stat_shape[i] = 1;
  rets->push_back(meta_empty(x->sizes(), x->scalar_type()));
  rets->push_back(meta_empty(stat_shape, stat));
  rets->push_back(meta_empty(stat_shape, stat));
  return true;
}

// addmm / mm: a fresh contiguous [n, p] of the (common) dtype, whatever the
// operands' layouts (ATen's ADDMM_META).
bool matmul(bool add, const Stack& args, Stack* rets) {
  size_t first = add ? 1 : 0;
  if (args.size() < first + 2) return false;
  const at::Tensor* a = lazy_tensor(args[first]);
  const at::Tensor* b = lazy_tensor(args[first + 1]);
  if (!a || !b || a->dim() != 2 || b->dim() != 2 || a->size(1) != b->size(0)) return false;
  at::ScalarType dt = a->scalar_type();
  if (!float_dtype(dt) || b->scalar_type() != dt) return false;
  Shape out{a->size(0), b->size(1)};
  if (add) {
    const at::Tensor* self = lazy_tensor(args[0]);
    if (!self || self->scalar_type() != dt || self->dim() > 2) return false;
    Shape s = out;
    if (!broadcast_into(&s, self->sizes()) || s != out) return false;
    for (size_t i = 3; i < args.size(); ++i)
      if (!args[i].isScalar() || args[i].toScalar().isComplex()) return false;
  }
  rets->push_back(meta_empty(out, dt));
  return true;
}

bool tri(const Stack& args, Stack* rets) {
  const at::Tensor* x = args.empty() ? nullptr : lazy_tensor(args[0]);
  if (!x || x->dim() < 2 || !dense(*x) || !plain_dtype(x->scalar_type())) return false;
  if (args.size() > 1 && !args[1].isInt()) return false;
  rets->push_back(meta_empty(x->sizes(), x->scalar_type()));
  return true;
}

// cat: eager's result type over all inputs, sizes summed along `dim`, and a
// contiguous result when any input suggests the contiguous format
// (cat_compute_output_memory_format), whatever their strides. 1-d empty inputs
// (an empty cache) are skipped, as eager's legacy rule does.
bool cat(const Stack& args, Stack* rets) {
  if (args.size() != 2 || !args[0].isTensorList() || !args[1].isInt()) return false;
  std::vector<at::Tensor> ts = args[0].toTensorVector();
  const at::Tensor* first = nullptr;
  bool contiguous = false;
  at::native::ResultTypeState state{};
  for (const at::Tensor& t : ts) {
    if (!t.defined() || !is_lazy(t) || !plain_dtype(t.scalar_type())) return false;
    state = at::native::update_result_type_state(t, state);
    contiguous |= t.suggest_memory_format() == at::MemoryFormat::Contiguous;
    if (t.dim() == 1 && t.numel() == 0) continue;
    if (t.numel() == 0) return false;
    if (!first) first = &t;
  }
  if (!first || !contiguous) return false;
  int64_t ndim = first->dim(), dim = args[1].toInt();
  if (ndim == 0 || dim < -ndim || dim >= ndim) return false;
  if (dim < 0) dim += ndim;
  Shape out(first->sizes().begin(), first->sizes().end());
  out[dim] = 0;
  for (const at::Tensor& t : ts) {
    if (t.dim() == 1 && t.numel() == 0) continue;
    if (t.dim() != ndim) return false;
    for (int64_t d = 0; d < ndim; ++d)
      if (d != dim && t.size(d) != out[d]) return false;
    out[dim] += t.size(dim);
  }
  rets->push_back(meta_empty(out, at::native::result_type(state)));
  return true;
}

// A reduction's result sizes: `x`'s, the `reduced` dims dropped (1 with keepdim).
Shape reduced_sizes(const at::Tensor& x, const std::vector<bool>& reduced, bool keepdim) {
  Shape out;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (!reduced[d]) out.push_back(x.size(d));
    else if (keepdim) out.push_back(1);
  }
  return out;
}

// sum.dim_IntList / mean.dim of a dense input: the reduced dims dropped (or 1
// with keepdim), contiguous; sum of integers and bools gives int64, mean needs
// a floating dtype; an explicit dtype is the result's.
bool reduce(bool mean, const Stack& args, Stack* rets) {
  if (args.size() != 4) return false;
  const at::Tensor* x = lazy_tensor(args[0]);
  if (!x || x->dim() == 0 || !dense(*x) || !plain_dtype(x->scalar_type()) || !args[2].isBool()) return false;
  std::vector<int64_t> dims;
  if (!args[1].isNone() && !int_list(args[1], &dims)) return false;
  std::vector<bool> reduced(x->dim(), dims.empty());
  if (!mark_dims(dims, x->dim(), &reduced)) return false;  // eager's "appears multiple times", or out of range
  at::ScalarType dt = x->scalar_type();
  if (!args[3].isNone()) {
    if (!args[3].isInt()) return false;
    dt = static_cast<at::ScalarType>(args[3].toInt());
    if (!float_dtype(dt) || !float_dtype(x->scalar_type())) return false;
  } else if (mean) {
    if (!float_dtype(dt)) return false;
  } else if (at::isIntegralType(dt, /*includeBool=*/true)) {
    dt = at::kLong;
  }
  rets->push_back(meta_empty(reduced_sizes(*x, reduced, args[2].toBool()), dt));
  return true;
}

// index_select (embedding's lookup): the input's sizes with `dim` the index's
// length, contiguous, whatever the input's layout (eager resizes a fresh result).
bool index_select(const Stack& args, Stack* rets) {
  if (args.size() != 3 || !args[1].isInt()) return false;
  const at::Tensor* x = lazy_tensor(args[0]);
  const at::Tensor* idx = lazy_tensor(args[2]);
  if (!x || !idx || x->dim() == 0 || idx->dim() > 1 || !plain_dtype(x->scalar_type())) return false;
  if (idx->scalar_type() != at::kLong && idx->scalar_type() != at::kInt) return false;
  int64_t ndim = x->dim(), dim = args[1].toInt();
  if (dim < -ndim || dim >= ndim) return false;
  if (dim < 0) dim += ndim;
  Shape out(x->sizes().begin(), x->sizes().end());
  out[dim] = idx->numel();
  rets->push_back(meta_empty(out, x->scalar_type()));
  return true;
}

// _softmax / _log_softmax (softmax's and log_softmax's ATen op): a fresh
// contiguous result of the input's sizes and floating dtype. Their meta kernel
// is Python (torch._meta_registrations), and the first call imports sympy for
// its dtype rule: ~700 ms on the first softmax of a process. half_to_float,
// which the CPU refuses, and non-float inputs take the meta kernel (eager's error).
bool softmax(const Stack& args, Stack* rets) {
  if (args.size() != 3 || !args[1].isInt() || !args[2].isBool() || args[2].toBool()) return false;
  const at::Tensor* x = lazy_tensor(args[0]);
  if (!x || x->dim() == 0 || !dense(*x) || !float_dtype(x->scalar_type())) return false;
  int64_t ndim = x->dim(), dim = args[1].toInt();
  if (dim < -ndim || dim >= ndim) return false;
  rets->push_back(meta_empty(x->sizes(), x->scalar_type()));
  return true;
}

// var / var_mean (torch.var, torch.var_mean): the reduced sizes (dims dropped,
// or 1 with keepdim; all dims when none are given), contiguous, in the input's
// floating dtype (var_mean: twice). Integer inputs, which eager refuses, take
// the meta kernel; so does an empty dim list.
bool var(bool with_mean, const Stack& args, Stack* rets) {
  if (args.size() != 4 || !args[3].isBool()) return false;
  const at::Tensor* x = lazy_tensor(args[0]);
  if (!x || x->dim() == 0 || !float_dtype(x->scalar_type())) return false;
  if (!args[2].isNone() && (!args[2].isScalar() || args[2].toScalar().isComplex())) return false;
  std::vector<int64_t> dims;
  if (!args[1].isNone() && (!int_list(args[1], &dims) || dims.empty())) return false;
  std::vector<bool> reduced(x->dim(), dims.empty());
  if (!mark_dims(dims, x->dim(), &reduced)) return false;
  Shape out = reduced_sizes(*x, reduced, args[3].toBool());
  rets->push_back(meta_empty(out, x->scalar_type()));
  if (with_mean) rets->push_back(meta_empty(out, x->scalar_type()));
  return true;
}

// The CPU flash attention (scaled_dot_product_attention's kernel on the CPU):
// the output like the query (empty_like: its strides, when it is dense), and
// logsumexp [B, H, L] laid out as [B, L, H] transposed, in float (torch 2.13's
// CPU kernel and meta kernel). Other query layouts, double inputs (whose
// logsumexp eager makes double and the Python meta float) and anything unusual
// take the meta kernel.
bool flash_cpu(const Stack& args, Stack* rets) {
  if (args.size() != 7) return false;
  const at::Tensor* q = lazy_tensor(args[0]);
  const at::Tensor* k = lazy_tensor(args[1]);
  const at::Tensor* v = lazy_tensor(args[2]);
  if (!q || !k || !v || q->dim() != 4 || k->dim() != 4 || v->dim() != 4) return false;
  at::ScalarType dt = q->scalar_type();
  if (!(dt == at::kFloat || dt == at::kBFloat16 || dt == at::kHalf)) return false;
  if (k->scalar_type() != dt || v->scalar_type() != dt) return false;
  for (int d : {0, 1})
    if (k->size(d) != q->size(d) || v->size(d) != q->size(d)) return false;
  if (k->size(3) != q->size(3) || v->size(3) != q->size(3) || v->size(2) != k->size(2)) return false;
  int64_t b = q->size(0), h = q->size(1), l = q->size(2);
  if (!q->unsafeGetTensorImpl()->is_non_overlapping_and_dense()) return false;
  rets->push_back(at::empty_strided(q->sizes(), q->strides(), at::TensorOptions().dtype(dt).device(at::kMeta)));
  rets->push_back(meta_empty({b, l, h}, at::kFloat).transpose(1, 2));
  return true;
}

}  // namespace

bool meta_fast_path(const c10::OperatorHandle& op, const Stack& args, Stack* rets) {
  const OpDesc& d = describe(op);
  if (d.kind == Kind::None || args.size() != op.schema().arguments().size()) return false;
  bool ok = false;
  switch (d.kind) {
    case Kind::LayerNorm: ok = layer_norm(args, rets); break;
    case Kind::Addmm: ok = matmul(true, args, rets); break;
    case Kind::Mm: ok = matmul(false, args, rets); break;
    case Kind::Tri: ok = tri(args, rets); break;
    case Kind::Cat: ok = cat(args, rets); break;
    case Kind::Reduce: ok = reduce(d.mean, args, rets); break;
    case Kind::IndexSelect: ok = index_select(args, rets); break;
    case Kind::Softmax: ok = softmax(args, rets); break;
    case Kind::Var: ok = var(d.mean, args, rets); break;
    case Kind::FlashCpu: ok = flash_cpu(args, rets); break;
    default: ok = pointwise(d, args, rets); break;
  }
  if (!ok) rets->clear();
  return ok;
}

}  // namespace lazyjit::tracer
