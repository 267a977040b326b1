// ATen ops as IR nodes, the recording ladder's rungs (aten_to_ir.h): views,
// torch.cat, and record_ir_nodes, which tries the elementwise ops
// (aten_to_ir_elementwise.cpp) and the reductions (aten_to_ir_reductions.cpp);
// and the dtype and name helpers they share.
#include "tracer/aten_to_ir.h"

#include <ATen/native/Resize.h>
#include <c10/util/SmallVector.h>

#include "bridge/aten_ir.h"
#include "runtime/runtime.h"
#include "tracer/device_ops.h"
#include "tracer/ivalue_tensors.h"
#include "tracer/lazy_storage.h"
#include "tracer/trace_context.h"

namespace lazyjit::tracer {

using ir::DType;
using ir::OpKind;
using ir::ValueId;
using torch::jit::Stack;

// "aten::add_.Tensor" -> "aten::add.Tensor"
std::string functional_name(const std::string& name, bool* inplace) {
  auto dot = name.find('.');
  std::string base = name.substr(0, dot), rest = dot == std::string::npos ? "" : name.substr(dot);
  *inplace = !base.empty() && base.back() == '_' && base.compare(0, 8, "aten::__") != 0;
  if (*inplace) base.pop_back();
  return base + rest;
}

ir::TensorType contiguous_type(const at::Tensor& m) {
  ir::TensorType t{bridge::from_aten(m.scalar_type()), m.sizes().vec(), {}};
  t.strides = ir::contiguous_strides(t.sizes);
  return t;
}

DType compute_dtype_for(DType t) { return ir::opmath_dtype(t); }

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
