#include "tracer/aten_node.h"

#include <ATen/ATen.h>

#include "bridge/aten_ir.h"
#include "tracer/aten_to_ir.h"
#include "tracer/ivalue_tensors.h"
#include "tracer/op_info.h"
#include "tracer/trace_context.h"

namespace lazyjit::tracer {

using c10::IValue;
using ir::OpKind;
using ir::ValueId;
using torch::jit::Stack;

namespace {

ir::TensorType dense_type(const at::Tensor& m) {
  ir::TensorType t{bridge::from_aten(m.scalar_type()), m.sizes().vec(), m.strides().vec()};
  if (m.storage_offset() != 0 || !m.is_non_overlapping_and_dense()) t.strides = ir::contiguous_strides(t.sizes);
  return t;
}

}  // namespace

void record_aten(const c10::OperatorHandle& op, const OpInfo& info, const Stack& args, const Stack& meta_args,
                 const Stack& meta_rets, Stack* out) {
  TraceContext& ctx = TraceContext::get();
  const auto& schema = op.schema();
  const std::vector<uint8_t>& flags = info.arg_flags;
  std::vector<ValueId> operands;
  std::vector<ir::Attr> attrs{{info.name}};
  // The step gets each operand in its value's declared layout (aten_call.h),
  // and that is the layout the op sees here: a view read for the op is
  // declared with its own strides, and any other value the tensor reads is
  // declared with the tensor's sizes and strides (TraceContext::read).
  auto operand = [&](const at::Tensor& t) -> int32_t {
    operands.push_back(is_lazy(t) ? ctx.read(t, /*own_layout=*/true) : ctx.scalar_tensor(t));
    return static_cast<int32_t>(operands.size() - 1);
  };
  std::vector<size_t> mutated;
  for (size_t i = 0; i < schema.arguments().size(); ++i) {
    const auto& arg = schema.arguments()[i];
    const IValue& v = args[i];
    const bool shape = flags[i] & kSymIntArg;
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
    } else if (v.isScalar() && (flags[i] & kNumberArg)) {
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
    } else if (v.isList() && shape) {
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
      TORCH_CHECK(false, "lazyjit: cannot record argument '", arg.name(), "' of ", info.name,
                  " (", v.tagKind(), ")");
    }
  }
  std::vector<ir::TensorType> types;
  for (size_t i : mutated) types.push_back(contiguous_type(meta_args[i].toTensor()));
  for (size_t r = 0; r < schema.returns().size(); ++r) {
    if (schema.returns()[r].alias_info()) continue;
    // Undefined results (e.g. gradients an output_mask turned off) are not values.
    for_each_tensor(meta_rets[r], [&](const at::Tensor& m) {
      if (m.defined()) types.push_back(dense_type(m));
    });
  }
  // What can fail when the graph runs is an op checking its data; in practice
  // indices (index_select, gather, embedding, nll_loss's targets): those get
  // the user's call site, which costs a walk of the Python stack.
  bool fallible = false;
  for (const IValue& v : args)
    for_each_tensor(v, [&](const at::Tensor& t) {
      fallible |= t.defined() && at::isIntegralType(t.scalar_type(), /*includeBool=*/false);
    });
  std::vector<ValueId> outs = ctx.graph().add_node(OpKind::Aten, std::move(operands), std::move(attrs), types);
  if (fallible) ctx.note_fallible_node(static_cast<uint32_t>(ctx.graph().nodes().size() - 1));
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
    out->push_back(map_tensors(meta_rets[r], [&](const at::Tensor& m) {
      return m.defined() ? ctx.new_tensor(outs[k++]) : at::Tensor();
    }));
  }
}

}  // namespace lazyjit::tracer
