#include "tracer/meta_inference.h"

#include <ATen/ATen.h>
#include <ATen/OpMathType.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <unordered_map>

#include "bridge/aten_ir.h"
#include "graph_ir/hash.h"
#include "runtime/backend.h"
#include "tracer/ivalue_tensors.h"
#include "tracer/lazy_storage.h"
#include "tracer/meta_fast_path.h"
#include "tracer/meta_structured.h"

namespace lazyjit::tracer {

using c10::IValue;
using torch::jit::Stack;

namespace {

at::Tensor to_meta(const at::Tensor& t) {
  if (!t.defined()) return t;
  // CPU scalars mix with meta tensors as they do with any device; wrapped
  // numbers must stay on the CPU to reach Python meta kernels as numbers.
  if (t.device().is_cpu() && t.dim() == 0) {
    if (t.unsafeGetTensorImpl()->is_wrapped_number()) return t;
    return at::empty({}, t.options().device(at::kMeta));
  }
  int64_t storage_numel = static_cast<int64_t>(t.storage().nbytes() / t.element_size());
  return at::empty({storage_numel}, t.options().device(at::kMeta))
      .as_strided(t.sizes(), t.strides(), t.storage_offset());
}

IValue ivalue_to_meta(const IValue& v) {
  if (v.isDevice() && v.toDevice().type() == c10::DeviceType::PrivateUse1) return c10::Device(at::kMeta);
  return map_tensors(v, to_meta);
}

// Dtype support is the CPU kernel's (AT_DISPATCH, TensorIterator's casting
// rule), and meta kernels do not check it: the CPU kernel runs once per memo
// key on zeros of the arguments' dtypes, every dim at most 1 (tiny and valid
// as indices). Only dtype errors count; any other error there comes from the
// stand-in data or shapes and says nothing about the real call.
at::Tensor to_probe(const at::Tensor& t) {
  if (!t.defined() || !is_lazy(t)) return t;
  std::vector<int64_t> sizes = t.sizes().vec();
  for (int64_t& s : sizes) s = std::min<int64_t>(s, 1);
  return at::zeros(sizes, t.options().device(at::kCPU));
}

bool probe_worth_it(const c10::OperatorHandle& op, const Stack& args) {
  const c10::FunctionSchema& schema = op.schema();
  // An op with GPU kernels only (the memory-efficient attention the CUDA
  // target's attention choice records, tracer/attention_choice.cpp): the CPU
  // kernel that would answer is not the one that runs, and there is none.
  if (runtime::backend().library_key() != c10::DispatchKey::CPU &&
      !op.hasComputedKernelForDispatchKey(c10::DispatchKey::CPU))
    return false;
  for (const auto& r : schema.returns())
    if (r.alias_info() && !r.alias_info()->isWrite()) return false;  // views: no kernel
  bool lazy = false;
  for (size_t i = 0; i < args.size(); ++i) {
    if (schema.arguments()[i].name() == "size") return false;  // new_zeros & co. allocate that
    for_each_tensor(args[i], [&](const at::Tensor& t) { lazy |= is_lazy(t); });
  }
  return lazy;
}

struct SilentWarnings : c10::WarningHandler {
  void process(const c10::Warning&) override {}
};

bool run_dtype_probe(const c10::OperatorHandle& op, const Stack& args) {
  Stack probe;
  for (const IValue& v : args) {
    if (v.isDevice() && v.toDevice().type() == c10::DeviceType::PrivateUse1) probe.push_back(c10::Device(at::kCPU));
    else probe.push_back(map_tensors(v, to_probe));
  }
  static SilentWarnings silent;
  c10::WarningUtils::WarningHandlerGuard quiet(&silent);
  try {
    at::AutoDispatchBelowADInplaceOrView guard;
    op.callBoxed(&probe);
  } catch (const c10::NotImplementedError&) {
    return true;  // AT_DISPATCH: "\"kernel\" not implemented for 'Float'"
  } catch (const c10::Error& e) {
    const std::string& m = e.msg();
    return m.find("type") != std::string::npos || m.find("Boolean") != std::string::npos;
  } catch (const std::exception&) {
  }
  return false;
}

// Memo keys cover everything a meta kernel can depend on: the op, every
// tensor's dtype and geometry, and every other argument's value. Scalar values
// are included too (arange's size depends on them); a changing scalar costs a
// meta call, never a recompile. Every kind of argument starts with its own tag,
// and lists with their length. False for an argument it cannot key: no memo.
//
// With `probe`, the key of the dtype probe instead, which sees a lazyjit
// tensor only as its dtype and its sizes clipped to 1 (to_probe): one probe
// serves every batch size.
bool meta_key(const c10::OperatorHandle& op, const Stack& args, ir::Hash128* key, bool probe = false) {
  static ir::BufferHasher h;  // guarded by the trace lock
  h.clear();
  const void* opp = &op.schema();
  h.update(&opp, sizeof opp);
  h.update_i64(probe ? -12 : -11);
  auto tensor = [&](const at::Tensor& t) {
    if (!t.defined()) return h.update_i64(-7);
    if (probe && is_lazy(t)) {
      h.update_i64(-8);
      h.update_i64(static_cast<int64_t>(t.scalar_type()));
      h.update_i64(t.dim());
      for (int64_t s : t.sizes()) h.update_i64(std::min<int64_t>(s, 1));
      return;
    }
    int64_t head[5] = {static_cast<int64_t>(t.scalar_type()), t.dim(), t.storage_offset(),
                       is_lazy(t) ? static_cast<int64_t>(t.storage().nbytes()) : -1,
                       t.unsafeGetTensorImpl()->is_wrapped_number()};
    h.update(head, sizeof head);
    h.update(t.sizes().data(), t.dim() * sizeof(int64_t));
    h.update(t.strides().data(), t.dim() * sizeof(int64_t));
  };
  for (const IValue& v : args) {
    if (v.isTensor()) { h.update_i64(-10); tensor(v.toTensor()); }
    else if (v.isTensorList()) {
      std::vector<at::Tensor> l = v.toTensorVector();
      h.update_i64(-1);
      h.update_i64(static_cast<int64_t>(l.size()));
      for (const at::Tensor& t : l) tensor(t);
    } else if (v.isOptionalTensorList()) {
      auto l = v.toListRef();
      h.update_i64(-2);
      h.update_i64(static_cast<int64_t>(l.size()));
      for (const IValue& e : l) e.isNone() ? h.update_i64(-3) : tensor(e.toTensor());
    } else if (v.isNone()) h.update_i64(-4);
    else if (v.isBool()) h.update_i64(v.toBool() ? 11 : 10);
    else if (v.isInt()) { h.update_i64(1); h.update_i64(v.toInt()); }
    else if (v.isDouble()) { double d = v.toDouble(); h.update_i64(2); h.update(&d, sizeof d); }
    else if (v.isIntList()) {
      auto l = v.toIntList();
      h.update_i64(3);
      h.update_i64(static_cast<int64_t>(l.size()));
      for (int64_t x : l) h.update_i64(x);
    } else if (v.isString()) { h.update_i64(5); h.update_str(v.toStringRef()); }
    else if (v.isDevice()) { h.update_i64(6); h.update_str(v.toDevice().str()); }
    else if (v.isScalar()) {
      c10::Scalar sc = v.toScalar();
      h.update_i64(7);
      h.update_i64(static_cast<int64_t>(sc.type()));
      h.update_i64(bridge::slot_from_scalar(sc));
    } else if (v.isList()) {  // SymInt[] and friends
      auto l = v.toListRef();
      h.update_i64(4);
      h.update_i64(static_cast<int64_t>(l.size()));
      for (const IValue& e : l) {
        if (e.isInt()) h.update_i64(e.toInt());
        else if (e.isSymInt()) h.update_i64(e.toSymInt().expect_int());
        else if (e.isDouble()) { double d = e.toDouble(); h.update(&d, sizeof d); }
        else if (e.isBool()) h.update_i64(e.toBool());
        else return false;
      }
    } else {
      return false;
    }
  }
  *key = h.digest128();
  return true;
}

std::unordered_map<ir::Hash128, MetaResult>& meta_memo() {
  static auto* m = new std::unordered_map<ir::Hash128, MetaResult>();
  return *m;
}

// The probe's answer, memoized by what it depends on (meta_key's probe key).
bool dtype_error(const c10::OperatorHandle& op, const Stack& args) {
  if (!probe_worth_it(op, args)) return false;
  ir::Hash128 key;
  if (!meta_key(op, args, &key, /*probe=*/true)) return run_dtype_probe(op, args);
  static auto* memo = new std::unordered_map<ir::Hash128, bool>();  // guarded by the trace lock
  auto hit = memo->find(key);
  if (hit != memo->end()) return hit->second;
  bool e = run_dtype_probe(op, args);
  if (memo->size() > (1 << 14)) memo->clear();
  memo->emplace(key, e);
  return e;
}

// `v`'s tensor as a meta tensor of dtype `dt` (its geometry kept).
IValue retyped(const IValue& v, at::ScalarType dt) {
  if (!v.isTensor() || !v.toTensor().defined() || v.toTensor().scalar_type() == dt) return v;
  const at::Tensor& t = v.toTensor();
  return at::empty_strided(t.sizes(), t.strides(), t.options().dtype(dt));
}

// Where an op's meta kernel gives another result dtype than the kernel that
// runs (ATen's native_group_norm and its backward, group_norm.cpp), the
// kernel's: the graph must type a step's result as the data it will hold, or
// the kernels after it read its bytes as another dtype (a bfloat16 dX read as
// float32: twice its bytes, past the end of its buffer). A reduced-precision X
// with float32 weights (a norm kept in float32 while the activations are
// bfloat16) is "mixed": mean and rstd are float32 on the CPU, X's dtype on
// meta; the backward's dX has X's dtype on the CPU, float32 on meta.
void kernel_dtypes(const c10::OperatorHandle& op, const Stack& args, Stack* rets) {
  const std::string& name = op.schema().name();
  if (name == "aten::native_group_norm" && args.size() >= 3 && rets->size() == 3 && args[0].isTensor()) {
    at::ScalarType x = args[0].toTensor().scalar_type(), param = at::ScalarType::Undefined;
    for (size_t i : {1, 2})  // ATen's get_parameter_type: the first defined one
      if (param == at::ScalarType::Undefined && args[i].isTensor() && args[i].toTensor().defined())
        param = args[i].toTensor().scalar_type();
    bool mixed = param != at::ScalarType::Undefined && param != x;
    at::ScalarType stats = mixed ? at::toOpMathType(x) : x;
    (*rets)[1] = retyped((*rets)[1], stats);
    (*rets)[2] = retyped((*rets)[2], stats);
  } else if (name == "aten::native_group_norm_backward" && args.size() >= 2 && rets->size() == 3 &&
             args[1].isTensor()) {
    (*rets)[0] = retyped((*rets)[0], args[1].toTensor().scalar_type());
  }
}

}  // namespace

const MetaResult* infer_meta(const c10::OperatorHandle& op, const Stack& args, MetaResult* scratch) {
  ir::Hash128 key;
  bool keyed = meta_key(op, args, &key);
  if (keyed) {
    auto hit = meta_memo().find(key);
    if (hit != meta_memo().end()) return &hit->second;
  }
  MetaResult fresh;
  for (const IValue& v : args) fresh.args.push_back(ivalue_to_meta(v));
  // Common ops in plain cases are computed natively (tracer/meta_fast_path.h),
  // some others by their C++ meta functions (tracer/meta_structured.h); the
  // rest run their meta kernels.
  if (!meta_fast_path(op, args, &fresh.rets) && !meta_structured(op, fresh.args, &fresh.rets)) {
    fresh.rets = fresh.args;
    try {
      at::AutoDispatchBelowADInplaceOrView guard;
      op.callBoxed(&fresh.rets);
    } catch (const std::exception&) {
      return nullptr;
    }
  }
  kernel_dtypes(op, args, &fresh.rets);
  for (const IValue& v : fresh.rets) for_each_tensor(v, [&](const at::Tensor& t) { fresh.outs.push_back(t); });
  fresh.dtype_error = dtype_error(op, args);
  if (!keyed) {
    *scratch = std::move(fresh);
    return scratch;
  }
  if (meta_memo().size() > (1 << 13)) meta_memo().clear();  // ~1.5 KB each: shape sweeps must not hoard
  return &meta_memo().emplace(key, std::move(fresh)).first->second;
}

}  // namespace lazyjit::tracer
