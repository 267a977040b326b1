#include "tracer/op_recorder.h"

#include <ATen/ATen.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/native/BinaryOps.h>
#include <ATen/core/op_registration/op_registration.h>

#include "debug/metrics.h"
#include "bridge/aten_ir.h"
#include "tracer/aten_to_ir.h"
#include "tracer/device_ops.h"
#include "tracer/lazyjit.h"
#include "tracer/meta_inference.h"
#include "tracer/op_info.h"
#include "tracer/step_mode.h"
#include "tracer/trace_context.h"

namespace lazyjit::tracer {

using c10::IValue;
using ir::DType;
using ir::OpKind;
using ir::ValueId;
using torch::jit::Stack;

namespace {

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

  if (info.special && run_special_op(name, args, stack)) return;
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
