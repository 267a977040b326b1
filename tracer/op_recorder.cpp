#include "tracer/op_recorder.h"

#include <ATen/ATen.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/native/BinaryOps.h>
#include <ATen/core/op_registration/op_registration.h>

#include <unordered_map>
#include <unordered_set>

#include "debug/metrics.h"
#include "bridge/aten_ir.h"
#include "tracer/hooks.h"
#include "tracer/aten_to_ir.h"
#include "tracer/device_ops.h"
#include "tracer/lazyjit.h"
#include "tracer/meta_inference.h"
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
  bool special = false;      // one of the device's own ops (device_ops.cpp)
  bool index = false;        // takes index tensors, which may live on the CPU
  int sub_check = 0;         // 1: sub/rsub of two tensors, 2: of a tensor and a Scalar
  bool eager = false;        // needs the data whatever its arguments (needs_eager's schema part)
  bool draws = false;        // draw_at_trace_time may handle it
  bool reduction = false;    // try_reduction may handle it
  bool view = false;         // is_view_op
  bool is_mutable = false;   // schema.is_mutable()
  bool bool_array_args = false;  // has a bool[N] argument (may arrive as a generic list)
};
bool eager_schema(const c10::FunctionSchema& schema);
bool is_view_op(const c10::FunctionSchema& schema);
const OpInfo& op_info(const c10::OperatorHandle& op) {
  static std::unordered_map<const void*, OpInfo> infos;  // guarded by the trace lock
  auto [it, fresh] = infos.try_emplace(&op.schema());
  if (fresh) {
    OpInfo& i = it->second;
    i.name = full_name(op);
    i.fname = functional_name(i.name, &i.inplace);
    const auto& args = op.schema().arguments();
    if (i.inplace && !(args.size() && args[0].alias_info() && args[0].alias_info()->isWrite())) i.inplace = false;
    i.special = is_special_op(i.name);
    i.index = i.name.rfind("aten::index", 0) == 0 || i.name.rfind("aten::_index_put_impl_", 0) == 0;
    if (i.name == "aten::sub.Tensor" || i.name == "aten::sub_.Tensor" || i.name == "aten::rsub.Tensor") i.sub_check = 1;
    if (i.name == "aten::sub.Scalar" || i.name == "aten::sub_.Scalar" || i.name == "aten::rsub.Scalar") i.sub_check = 2;
    i.eager = eager_schema(op.schema());
    i.draws = may_draw_at_trace_time(i.name);
    i.reduction = is_reduction_name(i.fname);
    i.view = is_view_op(op.schema());
    i.is_mutable = op.schema().is_mutable();
    for (const auto& a : args) i.bool_array_args |= a.real_type()->str().rfind("bool[", 0) == 0;
  }
  return it->second;
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

// The part of needs_eager that depends on the schema only.
bool eager_schema(const c10::FunctionSchema& schema) {
  if (data_dependent_ops().count(schema.name())) return true;
  for (const auto& r : schema.returns()) {
    auto k = r.real_type()->kind();
    if (k != c10::TypeKind::TensorType &&
        !(k == c10::TypeKind::ListType && r.real_type()->str() == "Tensor[]"))
      return true;  // returns a number or a bool: needs the data
  }
  // Random ops not drawn at trace time (their draws depend on tensor values)
  // run now, so draws happen in program order, as in eager.
  for (const auto& a : schema.arguments())
    if (a.real_type()->str().find("Generator") != std::string::npos) return true;
  return false;
}

bool needs_eager(const OpInfo& info, const Stack& args) {
  if (info.eager) return true;
  for (const IValue& v : args)
    if (v.isGenerator() || v.isStorage() || v.isCapsule() || v.isObject()) return true;
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
  ir::TensorType t{bridge::from_aten(m.scalar_type()), m.sizes().vec(), m.strides().vec()};
  if (m.storage_offset() != 0 || !m.is_non_overlapping_and_dense()) t.strides = ir::contiguous_strides(t.sizes);
  return t;
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

}  // namespace

ir::TensorType contiguous_type(const at::Tensor& m) {
  ir::TensorType t{bridge::from_aten(m.scalar_type()), m.sizes().vec(), {}};
  t.strides = ir::contiguous_strides(t.sizes);
  return t;
}

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
  for (size_t i = 0; info.bool_array_args && i < nargs; ++i) {
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
  bool hooked_special = info.special && lazyjit::mode() == Mode::Step && has_op_hooks();
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
  if (info.special && special_op(name, stack)) {  // copies between devices are allowed here
    if (hooked_special) {
      for (const IValue& v : *stack) event.outputs.push_back(cpu_copy(v));
      call_op_hooks(event);
    }
    return;
  }
  if (info.sub_check == 1) at::native::sub_check(args[0].toTensor(), args[1].toTensor());
  if (info.sub_check == 2) at::native::sub_check(args[0].toTensor(), args[1].toScalar());
  // Index tensors may live on the CPU, as with CUDA: they join the device.
  if (info.index) {
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
  if (info.draws && draw_at_trace_time(op, name, stack)) return;
  if (needs_eager(info, args)) return run_eager(op, stack, "needs data");

  // Shapes, dtypes and argument checks from PyTorch's meta kernels.
  MetaResult unmemoized;
  const MetaResult* mr = infer_meta(op, args, &unmemoized);
  // No meta kernel, or one that needs data (boolean masks). A genuine argument
  // error raises again, from the CPU kernel, like eager.
  if (!mr) return run_eager(op, stack, "no usable meta kernel");
  const Stack& meta_args = mr->args;
  const Stack& meta = mr->rets;
  const std::vector<at::Tensor>& meta_outs = mr->outs;

  bool views = info.view;
  for (size_t r = 0; views && r < schema.returns().size(); ++r) {
    int a = aliased_arg(schema, r);
    views = a >= 0 && meta_args[a].isTensor();
    for (const at::Tensor& m : meta_outs) views = views && m.is_alias_of(meta_args[a].toTensor());
  }
  if (!views && info.view) return run_eager(op, stack, "view op with an unexpected result");
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
  if (info.reduction && !inplace && !info.is_mutable && try_reduction(fname, args, meta_outs, stack)) return;
  if (inplace || !info.is_mutable) {
    std::vector<at::Tensor> self_out;  // an in-place op's result is its self argument
    if (inplace) self_out.push_back(meta_args[0].toTensor());
    const std::vector<at::Tensor>& result = inplace ? self_out : meta_outs;
    if (try_elementwise(fname, inplace, args, result, meta_args, stack)) return;
    if (result.size() == 1 && try_pointwise_composite(fname, inplace, args, result[0], stack)) return;
  }
  if (info.is_mutable && try_elementwise_out(fname, args, meta_outs, meta_args, stack)) return;
  record_aten(op, name, args, meta_args, meta, stack);
}

}  // namespace lazyjit::tracer
