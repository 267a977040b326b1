#include "tracer/op_recorder.h"

#include <ATen/ATen.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/native/BinaryOps.h>
#include <ATen/core/op_registration/op_registration.h>

#include <unordered_map>
#include <unordered_set>

#include "graph_ir/hash.h"

#include "debug/metrics.h"
#include "executor/executor.h"
#include "tracer/hooks.h"
#include "tracer/lazyjit.h"
#include "tracer/trace_context.h"

namespace lazyjit::tracer {

using c10::IValue;
using ir::DType;
using ir::OpKind;
using ir::ValueId;
using torch::jit::Stack;

namespace {

std::string full_name(const c10::OperatorHandle& op) {
  const auto& n = op.schema().operator_name();
  return n.overload_name.empty() ? n.name : n.name + "." + n.overload_name;
}

// What recording needs to know about an op that never changes: computed once.
struct OpInfo {
  std::string name;   // "aten::add_.Tensor"
  std::string fname;  // its functional form, "aten::add.Tensor"
  bool inplace = false;
};
std::string functional_name(const std::string& name, bool* inplace);
const OpInfo& op_info(const c10::OperatorHandle& op) {
  static std::unordered_map<const void*, OpInfo> infos;  // guarded by the trace lock
  auto [it, fresh] = infos.try_emplace(&op.schema());
  if (fresh) {
    OpInfo& i = it->second;
    i.name = full_name(op);
    i.fname = functional_name(i.name, &i.inplace);
    const auto& args = op.schema().arguments();
    if (i.inplace && !(args.size() && args[0].alias_info() && args[0].alias_info()->isWrite())) i.inplace = false;
  }
  return it->second;
}

bool is_cpu_scalar(const at::Tensor& t) {
  return t.defined() && t.device().is_cpu() && t.dim() == 0;
}

// PyTorch's rule, as on CUDA: a lazyjit op accepts CPU tensors only when 0-d.
void check_devices(const Stack& args) {
  auto check = [](const at::Tensor& t) {
    if (t.defined() && t.device().is_cpu() && t.dim() != 0)
      TORCH_CHECK(false,
                  "Expected all tensors to be on the same device, but found at least two "
                  "devices, lazyjit:0 and cpu!");
  };
  bool lazy = false;
  for (const IValue& v : args) {
    if (v.isTensor()) lazy |= is_lazy(v.toTensor());
    else if (v.isTensorList())
      for (const at::Tensor& t : v.toTensorVector()) lazy |= is_lazy(t);
  }
  if (!lazy) return;
  for (const IValue& v : args) {
    if (v.isTensor()) check(v.toTensor());
    else if (v.isTensorList())
      for (const at::Tensor& t : v.toTensorVector()) check(t);
    else if (v.isList())
      for (const IValue& e : v.toListRef())
        if (e.isTensor()) check(e.toTensor());
  }
}

// ---- meta inference ---------------------------------------------------------

at::Tensor to_meta(const at::Tensor& t) {
  if (!t.defined()) return t;
  // CPU scalars mix with meta tensors as they do with any device; wrapped
  // numbers must stay on the CPU to reach Python meta kernels as numbers.
  if (is_cpu_scalar(t)) {
    if (t.unsafeGetTensorImpl()->is_wrapped_number()) return t;
    return at::empty({}, t.options().device(at::kMeta));
  }
  int64_t storage_numel = static_cast<int64_t>(t.storage().nbytes() / t.element_size());
  return at::empty({storage_numel}, t.options().device(at::kMeta))
      .as_strided(t.sizes(), t.strides(), t.storage_offset());
}

IValue ivalue_to_meta(const IValue& v) {
  if (v.isTensor()) return to_meta(v.toTensor());
  if (v.isTensorList()) {
    std::vector<at::Tensor> l;
    for (const at::Tensor& t : v.toTensorVector()) l.push_back(to_meta(t));
    return l;
  }
  if (v.isOptionalTensorList()) {
    c10::List<std::optional<at::Tensor>> l;
    for (const IValue& e : v.toListRef())
      l.push_back(e.isNone() ? std::optional<at::Tensor>() : std::optional<at::Tensor>(to_meta(e.toTensor())));
    return l;
  }
  if (v.isDevice() && v.toDevice().type() == c10::DeviceType::PrivateUse1) return c10::Device(at::kMeta);
  return v;
}

// Meta kernels cost 5-100 us (many are Python decompositions), so their results
// are memoized by everything they can depend on: the op, every tensor's dtype
// and geometry, and every other argument's value. Scalar values are included
// too (arange's size depends on them); a changing scalar costs a meta call,
// never a recompile.
struct MetaResult {
  Stack args;  // meta arguments after the call (mutated ones resized)
  Stack rets;
};

bool meta_key(const c10::OperatorHandle& op, const Stack& args, ir::Hash128* key) {
  thread_local ir::BufferHasher h;
  h.clear();
  const void* opp = &op.schema();
  h.update(&opp, sizeof opp);
  auto tensor = [&](const at::Tensor& t) {
    if (!t.defined()) return h.update_i64(-7);
    int64_t head[5] = {static_cast<int64_t>(t.scalar_type()), t.dim(), t.storage_offset(),
                       is_lazy(t) ? static_cast<int64_t>(t.storage().nbytes()) : -1,
                       t.unsafeGetTensorImpl()->is_wrapped_number()};
    h.update(head, sizeof head);
    h.update(t.sizes().data(), t.dim() * sizeof(int64_t));
    h.update(t.strides().data(), t.dim() * sizeof(int64_t));
  };
  for (const IValue& v : args) {
    h.update_i64(static_cast<int64_t>(v.tagKind().size()));
    if (v.isTensor()) tensor(v.toTensor());
    else if (v.isTensorList()) {
      h.update_i64(-1);
      for (const at::Tensor& t : v.toTensorVector()) tensor(t);
    } else if (v.isOptionalTensorList()) {
      h.update_i64(-2);
      for (const IValue& e : v.toListRef()) e.isNone() ? h.update_i64(-3) : tensor(e.toTensor());
    } else if (v.isNone()) h.update_i64(-4);
    else if (v.isBool()) h.update_i64(v.toBool() ? 11 : 10);
    else if (v.isInt()) { h.update_i64(1); h.update_i64(v.toInt()); }
    else if (v.isDouble()) { double d = v.toDouble(); h.update_i64(2); h.update(&d, sizeof d); }
    else if (v.isIntList()) { h.update_i64(3); for (int64_t x : v.toIntVector()) h.update_i64(x); }
    else if (v.isString()) h.update_str(v.toStringRef());
    else if (v.isDevice()) h.update_str(v.toDevice().str());
    else if (v.isScalar()) {
      c10::Scalar sc = v.toScalar();
      h.update_i64(static_cast<int64_t>(sc.type()));
      h.update_i64(executor::slot_from_scalar(sc));
    } else if (v.isList()) {  // SymInt[] and friends
      h.update_i64(4);
      for (const IValue& e : v.toListRef()) {
        if (e.isInt()) h.update_i64(e.toInt());
        else if (e.isSymInt()) h.update_i64(e.toSymInt().expect_int());
        else if (e.isDouble()) { double d = e.toDouble(); h.update(&d, sizeof d); }
        else if (e.isBool()) h.update_i64(e.toBool());
        else return false;
      }
    } else {
      return false;  // an argument we cannot key: no memo
    }
  }
  *key = h.digest128();
  return true;
}

struct Hash128Hasher {
  size_t operator()(const ir::Hash128& k) const { return k.lo; }
};

std::unordered_map<ir::Hash128, MetaResult, Hash128Hasher>& meta_memo() {
  static auto* m = new std::unordered_map<ir::Hash128, MetaResult, Hash128Hasher>();
  return *m;
}

// ---- classification ---------------------------------------------------------

// Ops whose output sizes depend on values: they cut the graph.
const std::unordered_set<std::string>& data_dependent_ops() {
  static const std::unordered_set<std::string> s = {
      "aten::nonzero", "aten::masked_select", "aten::unique_dim", "aten::_unique",
      "aten::_unique2", "aten::unique_consecutive", "aten::unique_dim_consecutive",
      "aten::nonzero_numpy", "aten::argwhere", "aten::bincount", "aten::repeat_interleave",
      "aten::_assert_async", "aten::equal", "aten::is_nonzero", "aten::allclose",
      // Meta kernels whose shapes disagree with the CPU kernels' (PyTorch 2.13).
      "aten::native_batch_norm", "aten::_native_batch_norm_legit",
      "aten::_native_batch_norm_legit_no_training", "aten::_embedding_bag",
      "aten::_embedding_bag_forward_only", "aten::linalg_lstsq"};
  return s;
}

bool needs_eager(const c10::FunctionSchema& schema, const Stack& args) {
  if (data_dependent_ops().count(schema.name())) return true;
  for (const auto& r : schema.returns()) {
    auto k = r.real_type()->kind();
    if (k != c10::TypeKind::TensorType &&
        !(k == c10::TypeKind::ListType && r.real_type()->str() == "Tensor[]"))
      return true;  // returns a number or a bool: needs the data
  }
  for (const IValue& v : args)
    if (v.isGenerator() || v.isStorage() || v.isCapsule() || v.isObject()) return true;
  // Random ops not drawn at trace time (their draws depend on tensor values)
  // run now, so draws happen in program order, as in eager.
  for (const auto& a : schema.arguments())
    if (a.real_type()->str().find("Generator") != std::string::npos) return true;
  return false;
}

// The argument index a returned alias refers to, or -1.
int aliased_arg(const c10::FunctionSchema& schema, size_t ret) {
  const auto* ai = schema.returns()[ret].alias_info();
  if (!ai) return -1;
  for (size_t i = 0; i < schema.arguments().size(); ++i) {
    const auto* a = schema.arguments()[i].alias_info();
    if (!a) continue;
    for (const auto& s : ai->beforeSets())
      if (a->beforeSets().count(s)) return static_cast<int>(i);
  }
  return -1;
}

bool is_view_op(const c10::FunctionSchema& schema) {
  if (schema.returns().empty()) return false;
  for (size_t r = 0; r < schema.returns().size(); ++r) {
    const auto* ai = schema.returns()[r].alias_info();
    if (!ai || ai->isWrite()) return false;
  }
  return true;
}

// A tensor over `base`'s storage with `m`'s geometry (m is a meta view).
at::Tensor view_like(const at::Tensor& base, const at::Tensor& m) {
  return make_tensor(base.storage(), m.scalar_type(), m.sizes(), m.strides(), m.storage_offset());
}

ir::TensorType dense_type(const at::Tensor& m) {
  ir::TensorType t{executor::from_aten(m.scalar_type()), m.sizes().vec(), m.strides().vec()};
  if (m.storage_offset() != 0 || !m.is_non_overlapping_and_dense()) t.strides = ir::contiguous_strides(t.sizes);
  return t;
}

ir::TensorType contiguous_type(const at::Tensor& m) {
  return ir::TensorType{executor::from_aten(m.scalar_type()), m.sizes().vec(),
                        ir::contiguous_strides(m.sizes().vec())};
}

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

// "aten::add_.Tensor" -> "aten::add.Tensor"
std::string functional_name(const std::string& name, bool* inplace) {
  auto dot = name.find('.');
  std::string base = name.substr(0, dot), rest = dot == std::string::npos ? "" : name.substr(dot);
  *inplace = !base.empty() && base.back() == '_' && base.compare(0, 8, "aten::__") != 0;
  if (*inplace) base.pop_back();
  return base + rest;
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

DType compute_dtype_for(DType t) {
  return (t == DType::Float16 || t == DType::BFloat16) ? DType::Float32 : t;
}

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
  DType out_dt = executor::from_aten(mo.scalar_type());
  if (!lowering::lowerable_dtype(out_dt)) return false;

  // Operand dtypes as PyTorch promotes them.
  std::vector<at::Tensor> metas;
  for (int i = 0; i < rule.arity; ++i) {
    const IValue& m = meta_args[i];
    if (m.isTensor()) metas.push_back(m.toTensor());
    else if (m.isScalar()) {
      at::Tensor w = at::empty({}, at::TensorOptions().device(at::kMeta).dtype(
                                       m.toScalar().isFloatingPoint() ? at::kDouble
                                       : m.toScalar().isBoolean()     ? at::kBool
                                                                      : at::kLong));
      w.unsafeGetTensorImpl()->set_wrapped_number(true);
      metas.push_back(w);
    } else if (m.isNone()) {
      metas.emplace_back();
    } else {
      return false;
    }
  }
  for (const auto& m : metas)
    if (m.defined() && !lowering::lowerable_dtype(executor::from_aten(m.scalar_type()))) return false;

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
    compute = executor::from_aten(metas.size() == 2 ? at::result_type(metas[0], metas[1]) : metas[0].scalar_type());
  } else if (kind == OpKind::Where) {
    compute = out_dt;
  } else if (inplace) {
    at::ScalarType rt = metas[0].scalar_type();
    for (size_t i = 1; i < metas.size(); ++i)
      if (metas[i].defined()) rt = at::result_type(at::empty({}, at::TensorOptions().device(at::kMeta).dtype(rt)), metas[i]);
    compute = executor::from_aten(ir::is_floating(out_dt) ? mo.scalar_type() : rt);
    if (ir::is_floating(executor::from_aten(rt)) && !ir::is_floating(out_dt)) return false;
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
    ValueId alpha = ctx.scalar(args[2].toScalar());
    ir::TensorType mt = g.value(ops[1]).type;
    mt.dtype = compute;
    mt.strides = ir::contiguous_strides(mt.sizes);
    ops[1] = g.add_node1(OpKind::Mul, {ops[1], alpha}, {{static_cast<int64_t>(compute)}}, mt);
  }
  ValueId v = g.add_node1(kind, ops, attrs, ot);
  if (inplace) {
    const at::Tensor& self = args[0].toTensor();
    ctx.write(in_order(self), v);
    out->push_back(self);
  } else {
    out->push_back(ctx.new_tensor(v, mo));
  }
  return true;
}

// ---- reductions and normalizations ------------------------------------------------
//
// Reductions over trailing dims, and softmax / log_softmax / layer_norm built
// from them, become row-reduction nodes: the planner fuses each into one kernel
// that reads a row once. Intermediates stay in the accumulate dtype (f32 for
// half types); only results are rounded to the output dtype.

struct RowBuilder {
  TraceContext& ctx;
  ir::Graph& g;
  DType acc;
  std::vector<int64_t> full, row;  // sizes of the input and of one value per row
  int64_t k;                       // reduced trailing dims

  ir::TensorType type(const std::vector<int64_t>& sizes, DType dt) const {
    return ir::TensorType{dt, sizes, ir::contiguous_strides(sizes)};
  }
  ValueId ew(OpKind kind, std::vector<ValueId> ops, const std::vector<int64_t>& sizes, DType out) {
    return g.add_node1(kind, std::move(ops), {{static_cast<int64_t>(acc)}}, type(sizes, out));
  }
  ValueId reduce(OpKind kind, ValueId x) {
    std::vector<int64_t> dims;
    for (int64_t d = static_cast<int64_t>(full.size()) - k; d < static_cast<int64_t>(full.size()); ++d) dims.push_back(d);
    return g.add_node1(kind, {x}, {{static_cast<int64_t>(acc)}, {dims}}, type(row, acc));
  }
  ValueId number(double v) { return ctx.scalar(c10::Scalar(v)); }
  int64_t row_numel() const {
    int64_t n = 1;
    for (size_t d = full.size() - k; d < full.size(); ++d) n *= full[d];
    return n;
  }
};

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

bool try_reduction(const std::string& fname, const Stack& args, const std::vector<at::Tensor>& meta_outs,
                   Stack* out) {
  static const std::unordered_set<std::string> names = {
      "aten::sum.dim_IntList", "aten::sum", "aten::mean.dim", "aten::mean", "aten::amax", "aten::amin",
      "aten::_softmax", "aten::_log_softmax", "aten::native_layer_norm"};
  if (!names.count(fname) || !args[0].isTensor() || !is_lazy(args[0].toTensor())) return false;
  const at::Tensor& self = args[0].toTensor();
  DType in_dt = executor::from_aten(self.scalar_type());
  if (!lowering::lowerable_dtype(in_dt)) return false;
  for (const at::Tensor& m : meta_outs)
    if (!lowering::lowerable_dtype(executor::from_aten(m.scalar_type()))) return false;
  TraceContext& ctx = TraceContext::get();
  bool is_float = ir::is_floating(in_dt);
  int64_t k;
  if (fname == "aten::sum" || fname == "aten::mean") k = self.dim();
  else if (fname == "aten::_softmax" || fname == "aten::_log_softmax") k = trailing_dims(self, args[1]);
  else if (fname == "aten::native_layer_norm") k = static_cast<int64_t>(args[1].toListRef().size());
  else k = trailing_dims(self, args[1]);
  if (k < 0 || (fname != "aten::sum.dim_IntList" && fname != "aten::sum" && !is_float)) return false;
  if ((fname == "aten::_softmax" || fname == "aten::_log_softmax") && self.dim() > 0 && k != 1) return false;
  if (fname == "aten::native_layer_norm" && self.dim() < k) return false;

  RowBuilder b{ctx, ctx.graph(), DType::Float32, self.sizes().vec(), self.sizes().vec(), k};
  for (size_t d = b.full.size() - k; d < b.full.size(); ++d) b.row[d] = 1;
  DType out_dt = executor::from_aten(meta_outs[0].scalar_type());
  b.acc = accumulate_dtype(fname.rfind("aten::sum", 0) == 0 || fname.rfind("aten::mean", 0) == 0 ? out_dt : in_dt);
  ValueId x = ctx.read(self);
  auto result = [&](ValueId v, const at::Tensor& m) { out->push_back(ctx.new_tensor(v, m)); };

  if (fname.rfind("aten::sum", 0) == 0 || fname.rfind("aten::mean", 0) == 0) {
    ValueId s = b.reduce(OpKind::ReduceSum, x);
    if (fname.rfind("aten::mean", 0) == 0)
      s = b.ew(OpKind::Mul, {s, b.number(1.0 / static_cast<double>(b.row_numel()))}, b.row, b.acc);
    result(b.ew(OpKind::Cast, {s}, b.row, out_dt), meta_outs[0]);
  } else if (fname == "aten::amax" || fname == "aten::amin") {
    if (b.row_numel() == 0) return false;  // ATen raises on empty rows
    b.acc = in_dt == DType::Float16 || in_dt == DType::BFloat16 ? DType::Float32 : in_dt;
    ValueId m = b.reduce(fname == "aten::amax" ? OpKind::ReduceMax : OpKind::ReduceMin, x);
    result(b.ew(OpKind::Cast, {m}, b.row, out_dt), meta_outs[0]);
  } else if (fname == "aten::_softmax" || fname == "aten::_log_softmax") {
    ValueId m = b.reduce(OpKind::ReduceMax, x);
    ValueId sh = b.ew(OpKind::Sub, {x, m}, b.full, b.acc);
    ValueId e = b.ew(OpKind::Exp, {sh}, b.full, b.acc);
    ValueId s = b.reduce(OpKind::ReduceSum, e);
    ValueId y = fname == "aten::_softmax"
                    ? b.ew(OpKind::Div, {e, s}, b.full, out_dt)
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
    // says float32 for half inputs); eager CPU is the oracle.
    result(b.ew(OpKind::Cast, {mean}, b.row, in_dt), meta_outs[1]);
    result(b.ew(OpKind::Cast, {rstd}, b.row, in_dt), meta_outs[2]);
  }
  return true;
}

// ---- generic ATen steps -------------------------------------------------------

bool is_symint_type(const c10::TypePtr& t) {
  std::string s = t->str();
  return s.find("SymInt") != std::string::npos;
}

// Numbers become runtime scalar arguments; ints (dims, sizes) and dtypes stay
// attributes of the graph.
bool is_number_arg(const c10::Argument& arg) {
  std::string t = arg.real_type()->str();
  return t == "Scalar" || t == "Scalar?" || t == "float" || t == "float?";
}

// Records `op` as one ATen node; mutated arguments get new values.
void record_aten(const c10::OperatorHandle& op, const std::string& fname, const Stack& args,
                 const Stack& meta_args, const Stack& meta_rets, Stack* out) {
  TraceContext& ctx = TraceContext::get();
  const auto& schema = op.schema();
  std::vector<ValueId> operands;
  std::vector<ir::Attr> attrs{{fname}};
  auto operand = [&](const at::Tensor& t) -> int32_t {
    operands.push_back(is_lazy(t) ? ctx.read(t) : ctx.scalar_tensor(t));
    return static_cast<int32_t>(operands.size() - 1);
  };
  std::vector<size_t> mutated;
  for (size_t i = 0; i < schema.arguments().size(); ++i) {
    const auto& arg = schema.arguments()[i];
    const IValue& v = args[i];
    bool shape = is_symint_type(arg.real_type());
    if (v.isTensor() && !v.toTensor().defined()) {
      attrs.push_back({std::monostate{}});
    } else if (v.isTensor()) {
      attrs.push_back({ir::OperandRef{operand(v.toTensor())}});
      if (arg.alias_info() && arg.alias_info()->isWrite()) mutated.push_back(i);
    } else if (v.isTensorList()) {
      ir::OperandListRef l;
      for (const at::Tensor& t : v.toTensorVector()) l.indices.push_back(operand(t));
      attrs.push_back({l});
    } else if (v.isOptionalTensorList()) {
      ir::OperandListRef l;
      for (const IValue& e : v.toListRef())
        l.indices.push_back(e.isNone() || !e.toTensor().defined() ? -1 : operand(e.toTensor()));
      attrs.push_back({l});
    } else if (v.isScalar() && is_number_arg(arg)) {
      operands.push_back(ctx.scalar(v.toScalar()));
      attrs.push_back({ir::OperandRef{static_cast<int32_t>(operands.size() - 1)}});
    } else if (v.isNone()) {
      attrs.push_back({std::monostate{}});
    } else if (v.isBool()) {
      attrs.push_back({v.toBool()});
    } else if (v.isInt()) {
      attrs.push_back({v.toInt(), shape});
    } else if (v.isSymInt()) {
      attrs.push_back({v.toSymInt().expect_int(), true});
    } else if (v.isIntList()) {
      attrs.push_back({v.toIntVector(), shape});
    } else if (v.isList() && arg.real_type()->str().find("SymInt") != std::string::npos) {
      std::vector<int64_t> l;
      for (const IValue& e : v.toListRef()) l.push_back(e.isSymInt() ? e.toSymInt().expect_int() : e.toInt());
      attrs.push_back({l, true});
    } else if (v.isDoubleList()) {
      attrs.push_back({v.toDoubleVector()});
    } else if (v.isString()) {
      attrs.push_back({std::string(v.toStringRef())});
    } else if (v.isDevice()) {
      attrs.push_back({v.toDevice().str()});
    } else if (v.isBoolList()) {
      std::vector<int64_t> l;
      for (bool b : v.toBoolList()) l.push_back(b);
      attrs.push_back({l});
    } else {
      TORCH_CHECK(false, "lazyjit: cannot record argument '", arg.name(), "' of ", fname,
                  " (", v.tagKind(), ")");
    }
  }
  std::vector<ir::TensorType> types;
  for (size_t i : mutated) types.push_back(contiguous_type(meta_args[i].toTensor()));
  for (size_t r = 0; r < schema.returns().size(); ++r) {
    if (schema.returns()[r].alias_info()) continue;
    // Undefined results (e.g. gradients an output_mask turned off) are not values.
    const IValue& m = meta_rets[r];
    if (m.isTensor()) {
      if (m.toTensor().defined()) types.push_back(dense_type(m.toTensor()));
    } else {
      for (const at::Tensor& t : m.toTensorVector())
        if (t.defined()) types.push_back(dense_type(t));
    }
  }
  std::vector<ValueId> outs = ctx.graph().add_node(OpKind::Aten, std::move(operands), std::move(attrs), types);
  size_t k = 0;
  for (size_t i : mutated) {
    const at::Tensor& t = args[i].toTensor();
    const at::Tensor& m = meta_args[i].toTensor();
    if (t.sizes() != m.sizes()) {  // an out= argument the op resized
      if (static_cast<int64_t>(t.storage().nbytes()) < (m.numel() + t.storage_offset()) * m.element_size()) {
        // Like ATen's resize_output: the tensor gets new, larger memory.
        t.unsafeGetTensorImpl()->set_storage_keep_dtype(make_storage(m.numel(), m.scalar_type()));
        t.unsafeGetTensorImpl()->set_sizes_and_strides(m.sizes(), ir::contiguous_strides(m.sizes().vec()), 0);
      } else {
        t.unsafeGetTensorImpl()->set_sizes_and_strides(m.sizes(), m.strides(), t.storage_offset());
      }
    }
    ctx.write(t, outs[k++]);
  }
  for (size_t r = 0; r < schema.returns().size(); ++r) {
    int a = aliased_arg(schema, r);
    if (a >= 0) {
      out->push_back(args[a]);
      continue;
    }
    const IValue& m = meta_rets[r];
    if (m.isTensor()) {
      out->push_back(m.toTensor().defined() ? ctx.new_tensor(outs[k++]) : at::Tensor());
    } else {
      std::vector<at::Tensor> l;
      for (const at::Tensor& t : m.toTensorVector()) l.push_back(t.defined() ? ctx.new_tensor(outs[k++]) : at::Tensor());
      out->push_back(l);
    }
  }
}

// ---- special ops ----------------------------------------------------------------

at::ScalarType dtype_arg(const IValue& v) {
  return v.isNone() ? c10::get_default_dtype_as_scalartype() : static_cast<at::ScalarType>(v.toInt());
}

std::vector<int64_t> int_list(const IValue& v) {
  std::vector<int64_t> l;
  for (const IValue& e : v.toListRef()) l.push_back(e.isSymInt() ? e.toSymInt().expect_int() : e.toInt());
  return l;
}

at::Tensor new_empty(at::IntArrayRef sizes, at::IntArrayRef strides, at::ScalarType dt) {
  int64_t storage_numel = 0;
  bool empty = false;
  for (int64_t s : sizes) empty |= s == 0;
  if (!empty) {
    storage_numel = 1;
    for (size_t d = 0; d < sizes.size(); ++d) storage_numel += (sizes[d] - 1) * strides[d];
  }
  return make_tensor(make_storage(storage_numel, dt), dt, sizes, strides, 0);
}

// dst.copy_(src) for every placement of the two.
void copy_into(const at::Tensor& dst, const at::Tensor& src) {
  TraceContext& ctx = TraceContext::get();
  if (!is_lazy(dst)) {  // to the CPU: a sync point
    dst.copy_(ctx.cpu_view(src, "copy to cpu"));
    return;
  }
  if (!is_lazy(src)) {
    at::Tensor buf = at::empty_strided(dst.sizes(), dst.strides(), dst.options().device(at::kCPU));
    buf.copy_(src);
    if (dst.storage_offset() == 0 && dst.is_non_overlapping_and_dense() &&
        static_cast<size_t>(dst.numel() * dst.element_size()) == dst.storage().nbytes()) {
      ctx.assign_data(dst, buf);
    } else {
      ctx.write(dst, ctx.input(buf));
    }
    return;
  }
  ValueId v = ctx.read(src);
  auto& g = ctx.graph();
  DType dt = executor::from_aten(dst.scalar_type());
  ir::TensorType vt = g.value(v).type;
  if (vt.dtype != dt && !(lowering::lowerable_dtype(dt) && lowering::lowerable_dtype(vt.dtype))) {
    // Complex and other unlowered conversions: convert on the CPU.
    at::Tensor cpu = ctx.cpu_view(src, "copy between unlowered dtypes");
    return copy_into(dst, cpu);
  }
  if (vt.dtype != dt) {
    vt.dtype = dt;
    vt.strides = ir::contiguous_strides(vt.sizes);
    v = g.add_node1(OpKind::Cast, {v}, {{static_cast<int64_t>(compute_dtype_for(dt))}}, vt);
  }
  if (vt.sizes != dst.sizes().vec()) {  // broadcast src to dst
    std::vector<int64_t> sizes = dst.sizes().vec(), strides(sizes.size(), 0);
    size_t off = sizes.size() - vt.sizes.size();
    for (size_t d = 0; d < vt.sizes.size(); ++d) strides[off + d] = vt.sizes[d] == 1 ? 0 : vt.strides[d];
    v = g.add_node1(OpKind::AsStrided, {v}, {{sizes, true}, {strides, true}, {int64_t{0}, true}},
                    ir::TensorType{dt, sizes, ir::contiguous_strides(sizes)});
  }
  ctx.write(dst, v);
}

bool is_special_op(const std::string& name) {
  static const std::unordered_set<std::string> names = {
      "aten::empty.memory_format", "aten::empty_strided", "aten::copy_", "aten::_copy_from",
      "aten::_copy_from_and_resize", "aten::_local_scalar_dense", "aten::resize_", "aten::zero_",
      "aten::fill_.Scalar"};
  return names.count(name) > 0;
}

// Handles the ops every device implements itself. Returns false for others.
bool special_op(const std::string& name, Stack* stack) {
  TraceContext& ctx = TraceContext::get();
  auto& s = *stack;
  if (name == "aten::zero_" || name == "aten::fill_.Scalar") {
    // Filling fresh memory (zeros_like, torch.full, an optimizer's new state)
    // makes data, not a graph node: the filled tensor is then an input like
    // any other, so the first step's graph equals the next steps'.
    at::Tensor t = s[s.size() - (name == "aten::zero_" ? 1 : 2)].toTensor();
    if (!is_lazy(t) || !ctx.is_fresh(t)) return false;
    c10::Scalar v = name == "aten::zero_" ? c10::Scalar(int64_t{0}) : s.back().toScalar();
    at::Tensor buf = at::empty_strided(t.sizes(), t.strides(), t.options().device(at::kCPU));
    buf.fill_(v);
    ctx.assign_data(t, buf);
    s.erase(s.end() - (name == "aten::zero_" ? 1 : 2), s.end());
    s.push_back(t);
    return true;
  }
  if (name == "aten::empty.memory_format") {
    auto sizes = int_list(s[0]);
    at::ScalarType dt = dtype_arg(s[1]);
    auto mf = s[5].isNone() ? at::MemoryFormat::Contiguous : s[5].toMemoryFormat();
    at::Tensor m = at::empty(sizes, at::TensorOptions().device(at::kMeta).dtype(dt), mf);
    s.clear();
    s.push_back(new_empty(m.sizes(), m.strides(), dt));
    return true;
  }
  if (name == "aten::empty_strided") {
    auto sizes = int_list(s[0]), strides = int_list(s[1]);
    at::ScalarType dt = dtype_arg(s[2]);
    s.clear();
    s.push_back(new_empty(sizes, strides, dt));
    return true;
  }
  if (name == "aten::copy_") {
    at::Tensor dst = s[0].toTensor(), src = s[1].toTensor();
    copy_into(dst, src);
    s.clear();
    s.push_back(dst);
    return true;
  }
  if (name == "aten::_copy_from" || name == "aten::_copy_from_and_resize") {
    at::Tensor src = s[0].toTensor(), dst = s[1].toTensor();
    if (name == "aten::_copy_from_and_resize" && dst.sizes() != src.sizes()) dst.resize_(src.sizes());
    copy_into(dst, src);
    s.clear();
    s.push_back(dst);
    return true;
  }
  if (name == "aten::_local_scalar_dense") {
    at::Tensor t = s[0].toTensor();
    at::Tensor cpu = ctx.cpu_view(t, "item()");
    s.clear();
    s.push_back(cpu.item());
    return true;
  }
  if (name == "aten::resize_") {
    at::Tensor t = s[0].toTensor();
    auto sizes = int_list(s[1]);
    int64_t numel = 1;
    for (int64_t d : sizes) numel *= d;
    size_t need = static_cast<size_t>(numel + t.storage_offset()) * t.element_size();
    if (need > t.storage().nbytes()) {
      at::Tensor old = ctx.cpu_view(t, "resize_").as_strided({static_cast<int64_t>(t.storage().nbytes() / t.element_size())}, {1}, 0);
      at::Tensor grown = at::zeros({static_cast<int64_t>(need / t.element_size())}, old.options());
      grown.narrow(0, 0, old.numel()).copy_(old);
      t.storage().unsafeGetStorageImpl()->set_nbytes(need);
      ctx.assign_data(t, grown);
    }
    t.unsafeGetTensorImpl()->set_sizes_contiguous(sizes);
    s.clear();
    s.push_back(t);
    return true;
  }
  return false;
}

// Random ops whose draws do not depend on tensor values are drawn at trace time
// from the CPU generator, in program order, exactly as eager on the CPU would
// draw them; the graph reads the draws as an input. A seeded program therefore
// gives the CPU's numbers, and the draws never cut the graph.
bool draw_at_trace_time(const c10::OperatorHandle& op, const std::string& name, Stack* stack) {
  static const std::unordered_set<std::string> inplace = {
      "aten::uniform_", "aten::normal_", "aten::random_", "aten::random_.from", "aten::random_.to",
      "aten::exponential_", "aten::geometric_", "aten::log_normal_", "aten::cauchy_",
      "aten::bernoulli_.float"};
  TraceContext& ctx = TraceContext::get();
  Stack& s = *stack;
  const auto& schema = op.schema();
  size_t nargs = schema.arguments().size();
  if (inplace.count(name)) {
    at::Tensor self = s[s.size() - nargs].toTensor();
    if (!is_lazy(self)) return false;
    for (size_t i = s.size() - nargs + 1; i < s.size(); ++i)
      if (s[i].isTensor() && is_lazy(s[i].toTensor())) return false;
    at::Tensor buf = at::empty(self.sizes(), self.options().device(at::kCPU));
    Stack cpu(s.end() - nargs, s.end());
    cpu[0] = buf;
    op.callBoxed(&cpu);
    ctx.write(self, ctx.input(buf));
    s.erase(s.end() - nargs, s.end());
    s.push_back(self);
    return true;
  }
  if (name == "aten::native_dropout") {
    at::Tensor input = s[s.size() - 3].toTensor();
    double p = s[s.size() - 2].toDouble();
    bool train = s.back().isNone() || s.back().toBool();
    if (!is_lazy(input) || !train || !at::isFloatingType(input.scalar_type())) return false;
    // As ATen's native_dropout_cpu: mask ~ Bernoulli(1 - p), out = x * mask / (1 - p).
    at::Tensor noise = at::empty(input.sizes(), input.options().device(at::kCPU)).bernoulli_(1 - p);
    at::Tensor lnoise = make_tensor(make_storage(noise.numel(), noise.scalar_type()), noise.scalar_type(),
                                    noise.sizes(), noise.strides(), 0);
    ctx.assign_data(lnoise, noise);
    double scale = p == 1 ? 0.0 : 1.0 / (1 - p);
    at::Tensor out = input.mul(lnoise).mul_(scale);
    at::Tensor mask = lnoise.to(at::kBool);
    s.erase(s.end() - 3, s.end());
    s.push_back(out);
    s.push_back(mask);
    return true;
  }
  return false;
}

}  // namespace

void run_eager(const c10::OperatorHandle& op, Stack* stack, const char* reason) {
  TraceContext& ctx = TraceContext::get();
  const auto& schema = op.schema();
  std::string name = full_name(op);
  bool step = lazyjit::mode() == Mode::Step;
  std::string site = ctx.call_site();
  if (!step) debug::Metrics::get().fallback(name, reason, site);
  if (ctx.has_pending()) ctx.sync(std::string("eager op ") + name + ": " + reason, site);
  Stack args = *stack;
  Stack cpu;
  for (const IValue& v : args) {
    if (v.isTensor() && is_lazy(v.toTensor())) cpu.push_back(ctx.cpu_view(v.toTensor(), reason));
    else if (v.isTensorList()) {
      std::vector<at::Tensor> l;
      for (const at::Tensor& t : v.toTensorVector()) l.push_back(is_lazy(t) ? ctx.cpu_view(t, reason) : t);
      cpu.push_back(l);
    } else if (v.isOptionalTensorList()) {
      c10::List<std::optional<at::Tensor>> l;
      for (const IValue& e : v.toListRef())
        l.push_back(e.isNone() ? std::optional<at::Tensor>()
                               : std::optional<at::Tensor>(is_lazy(e.toTensor()) ? ctx.cpu_view(e.toTensor(), reason) : e.toTensor()));
      cpu.push_back(l);
    } else if (v.isDevice() && v.toDevice().type() == c10::DeviceType::PrivateUse1) {
      cpu.push_back(c10::Device(at::kCPU));
    } else {
      cpu.push_back(v);
    }
  }
  OpEvent event;
  bool hooked = step && has_op_hooks();
  if (hooked) {
    event.op = name;
    event.site = site;
    for (const IValue& v : cpu) event.inputs.push_back(v.isTensor() ? IValue(v.toTensor().clone()) : v);
  }
  Stack in_cpu = cpu;
  {
    // The CPU kernel must not see our keys excluded by the caller.
    op.callBoxed(&cpu);
  }
  // out= arguments the CPU kernel resized got new CPU memory: the lazyjit
  // tensor follows, as it would on any device.
  for (size_t i = 0; i < schema.arguments().size(); ++i) {
    const auto* ai = schema.arguments()[i].alias_info();
    if (!ai || !ai->isWrite() || !args[i].isTensor() || !is_lazy(args[i].toTensor())) continue;
    const at::Tensor& lazy = args[i].toTensor();
    const at::Tensor& now = in_cpu[i].toTensor();
    if (now.sizes() == lazy.sizes() && now.is_alias_of(storage_of(lazy).data)) continue;
    at::Tensor d = now.is_non_overlapping_and_dense() ? now : now.contiguous();
    lazy.unsafeGetTensorImpl()->set_storage_keep_dtype(make_storage(d.numel(), d.scalar_type()));
    lazy.unsafeGetTensorImpl()->set_sizes_and_strides(d.sizes(), d.strides(), 0);
    ctx.assign_data(lazy, d);
  }
  stack->clear();
  for (size_t r = 0; r < schema.returns().size(); ++r) {
    IValue& res = cpu[r];
    int a = aliased_arg(schema, r);
    auto wrap = [&](const at::Tensor& t, int arg) -> at::Tensor {
      if (!t.defined()) return t;
      if (arg >= 0 && args[arg].isTensor() && is_lazy(args[arg].toTensor())) {
        const at::Tensor& base = args[arg].toTensor();
        if (schema.returns()[r].alias_info()->isWrite()) return base;
        const at::Tensor& data = storage_of(base).data;
        if (t.is_alias_of(data))
          return make_tensor(base.storage(), t.scalar_type(), t.sizes(), t.strides(),
                             t.storage_offset() - data.storage_offset());
      }
      // A fresh result owns its memory; one that aliases an input is copied.
      bool aliases_input = false;
      for (const IValue& v : in_cpu)
        if (v.isTensor() && v.toTensor().defined() && t.is_alias_of(v.toTensor())) aliases_input = true;
      at::Tensor d = t.is_non_overlapping_and_dense() && !aliases_input ? t : t.clone(at::MemoryFormat::Contiguous);
      at::Tensor out = make_tensor(make_storage(d.numel(), d.scalar_type()), d.scalar_type(), d.sizes(), d.strides(), 0);
      ctx.assign_data(out, d);
      return out;
    };
    if (res.isTensor()) {
      stack->push_back(wrap(res.toTensor(), a));
    } else if (res.isTensorList()) {
      std::vector<at::Tensor> l;
      for (const at::Tensor& t : res.toTensorVector()) l.push_back(wrap(t, a));
      stack->push_back(l);
    } else {
      stack->push_back(res);
    }
  }
  if (hooked) {
    for (const IValue& v : *stack)
      event.outputs.push_back(v.isTensor() && is_lazy(v.toTensor()) ? IValue(ctx.cpu_view(v.toTensor(), "hook").clone()) : v);
    call_op_hooks(event);
  }
  if (step) debug::Metrics::get().add(debug::Counter::StepOps);
}

void record_op(const c10::OperatorHandle& op, Stack* stack) {
  TraceContext& ctx = TraceContext::get();
  std::lock_guard<std::recursive_mutex> lock(ctx.mutex());
  const auto& schema = op.schema();
  const OpInfo& info = op_info(op);
  const std::string& name = info.name;
  size_t nargs = schema.arguments().size();
  // std::array<bool, N> arguments arrive boxed as generic lists; kernels unbox
  // them as bool lists.
  for (size_t i = 0; i < nargs; ++i) {
    IValue& v = (*stack)[stack->size() - nargs + i];
    if (v.isList() && !v.isBoolList() && schema.arguments()[i].real_type()->str().rfind("bool[", 0) == 0) {
      c10::List<bool> l;
      for (const IValue& e : v.toListRef()) l.push_back(e.toBool());
      v = l;
    }
  }
  Stack args(stack->end() - nargs, stack->end());
  debug::Metrics::get().add(debug::Counter::OpsTraced);

  // Step-mode hooks see every op, the device's own ops included.
  bool hooked_special = lazyjit::mode() == Mode::Step && has_op_hooks() && is_special_op(name);
  auto cpu_copy = [&](const IValue& v) -> IValue {
    if (!v.isTensor() || !v.toTensor().defined()) return v;
    const at::Tensor& t = v.toTensor();
    return is_lazy(t) ? ctx.cpu_view(t, "hook").clone() : t.clone();
  };
  OpEvent event;
  if (hooked_special) {
    event.op = name;
    event.site = ctx.call_site();
    for (const IValue& v : args) event.inputs.push_back(cpu_copy(v));
  }
  if (special_op(name, stack)) {  // copies between devices are allowed here
    if (hooked_special) {
      for (const IValue& v : *stack) event.outputs.push_back(cpu_copy(v));
      call_op_hooks(event);
    }
    return;
  }
  if (name == "aten::sub.Tensor" || name == "aten::sub_.Tensor" || name == "aten::rsub.Tensor") {
    at::native::sub_check(args[0].toTensor(), args[1].toTensor());
  } else if (name == "aten::sub.Scalar" || name == "aten::sub_.Scalar" || name == "aten::rsub.Scalar") {
    at::native::sub_check(args[0].toTensor(), args[1].toScalar());
  }
  // Index tensors may live on the CPU, as with CUDA: they join the device.
  if (name.rfind("aten::index", 0) == 0 || name.rfind("aten::_index_put_impl_", 0) == 0) {
    for (size_t i = 0; i < nargs; ++i) {
      IValue& v = (*stack)[stack->size() - nargs + i];
      if (!v.isOptionalTensorList() && !v.isTensorList()) continue;
      bool moved = false;
      c10::List<std::optional<at::Tensor>> l;
      for (const IValue& e : v.toListRef()) {
        if (e.isTensor() && e.toTensor().defined() && e.toTensor().device().is_cpu() && e.toTensor().dim() > 0) {
          l.push_back(e.toTensor().to(lazyjit::device()));
          moved = true;
        } else {
          l.push_back(e.isNone() ? std::optional<at::Tensor>() : std::optional<at::Tensor>(e.toTensor()));
        }
      }
      if (moved && v.isOptionalTensorList()) v = l, args[i] = l;
    }
  }
  check_devices(args);
  // Writes into a tensor whose elements share memory (an expanded view) are
  // refused at the op, as in eager, not at the next sync.
  for (size_t i = 0; i < nargs; ++i) {
    const auto* ai = schema.arguments()[i].alias_info();
    if (ai && ai->isWrite() && args[i].isTensor() && is_lazy(args[i].toTensor()))
      at::assert_no_internal_overlap(args[i].toTensor());
  }
  if (lazyjit::mode() == Mode::Step) return run_eager(op, stack, "step mode");
  if (draw_at_trace_time(op, name, stack)) return;
  if (needs_eager(schema, args)) return run_eager(op, stack, "needs data");

  // Shapes, dtypes and argument checks from PyTorch's meta kernels.
  Stack meta_args, meta;
  ir::Hash128 mkey;
  bool keyed = meta_key(op, args, &mkey);
  auto memo = keyed ? meta_memo().find(mkey) : meta_memo().end();
  if (memo != meta_memo().end()) {
    meta_args = memo->second.args;
    meta = memo->second.rets;
  } else {
    for (const IValue& v : args) meta_args.push_back(ivalue_to_meta(v));
    meta = meta_args;
    try {
      at::AutoDispatchBelowADInplaceOrView guard;
      op.callBoxed(&meta);
    } catch (const std::exception&) {
      // No meta kernel, or one that needs data (boolean masks). A genuine
      // argument error raises again, from the CPU kernel, like eager.
      return run_eager(op, stack, "no usable meta kernel");
    }
    if (keyed) {
      if (meta_memo().size() > (1 << 16)) meta_memo().clear();
      meta_memo().emplace(mkey, MetaResult{meta_args, meta});
    }
  }
  std::vector<at::Tensor> meta_outs;
  for (const IValue& v : meta) {
    if (v.isTensor()) meta_outs.push_back(v.toTensor());
    else if (v.isTensorList())
      for (const at::Tensor& t : v.toTensorVector()) meta_outs.push_back(t);
  }

  bool views = is_view_op(schema);
  for (size_t r = 0; views && r < schema.returns().size(); ++r) {
    int a = aliased_arg(schema, r);
    views = a >= 0 && meta_args[a].isTensor();
    for (const at::Tensor& m : meta_outs) views = views && m.is_alias_of(meta_args[a].toTensor());
  }
  if (!views && is_view_op(schema)) return run_eager(op, stack, "view op with an unexpected result");
  stack->erase(stack->end() - nargs, stack->end());
  if (views) {
    for (size_t r = 0; r < schema.returns().size(); ++r) {
      const at::Tensor& base = args[aliased_arg(schema, r)].toTensor();
      if (meta[r].isTensor()) stack->push_back(view_like(base, meta[r].toTensor()));
      else {
        std::vector<at::Tensor> l;
        for (const at::Tensor& m : meta[r].toTensorVector()) l.push_back(view_like(base, m));
        stack->push_back(l);
      }
    }
    return;
  }
  bool inplace = info.inplace;
  const std::string& fname = info.fname;
  if (!inplace && !schema.is_mutable() && try_reduction(fname, args, meta_outs, stack)) return;
  if ((inplace || !schema.is_mutable()) && try_elementwise(fname, inplace, args, inplace ? std::vector<at::Tensor>{meta_args[0].toTensor()} : meta_outs, meta_args, stack))
    return;
  record_aten(op, name, args, meta_args, meta, stack);
}

}  // namespace lazyjit::tracer
