// The ops every device implements itself, and random draws at trace time.
#include <ATen/ATen.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/native/BinaryOps.h>
#include <ATen/SparseCsrTensorImpl.h>
#include <ATen/SparseTensorImpl.h>
#include <ATen/ops/_coalesced_native.h>
#include <ATen/ops/_indices_native.h>
#include <ATen/ops/_nnz_native.h>
#include <ATen/ops/_values_native.h>
#include <ATen/ops/ccol_indices_native.h>
#include <ATen/ops/col_indices_native.h>
#include <ATen/ops/crow_indices_native.h>
#include <ATen/ops/dense_dim_native.h>
#include <ATen/ops/indices_native.h>
#include <ATen/ops/is_coalesced_native.h>
#include <ATen/ops/row_indices_native.h>
#include <ATen/ops/sparse_dim_native.h>
#include <ATen/ops/values_native.h>
#include <torch/library.h>

#include <algorithm>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "bridge/aten_ir.h"
#include "runtime/runtime.h"
#include "tracer/lazy_storage.h"
#include "tracer/lazyjit.h"
#include "tracer/aten_to_ir.h"
#include "tracer/device_ops.h"
#include "tracer/record_op.h"
#include "tracer/streams.h"
#include "tracer/trace_context.h"

namespace lazyjit::tracer {

using c10::IValue;
using ir::DType;
using ir::OpKind;
using ir::ValueId;
using torch::jit::Stack;

// ---- special ops ----------------------------------------------------------------

namespace {

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

// A tensor over `t`'s elements without t's conj/neg bits.
at::Tensor plain_alias(const at::Tensor& t) {
  return make_tensor(t.storage(), t.scalar_type(), t.sizes(), t.strides(), t.storage_offset());
}

// Whether lazyjit's graphs carry `t`'s dtype (not uint16/32/64, float8, ...).
bool named_dtype(const at::Tensor& t) { return bridge::from_aten(t.scalar_type()) != DType::Other; }

void copy_into(const at::Tensor& dst, const at::Tensor& src) {
  TraceContext& ctx = TraceContext::get();
  if (!is_lazy(dst)) {  // to the CPU (or a GPU): a sync point; that copy_ applies the bits
    // From the data where it lives: under the CUDA target, to the host is one
    // device-to-host copy and .to("cuda") one device-to-device copy.
    dst.copy_(with_math_bits(ctx.cpu_view(src, "copy to cpu"), src));
    return;
  }
  if (has_math_bits(dst)) {
    // dst's elements are its values with its bits applied (the conjugate
    // fallback copies an in-place op's result back this way).
    at::Tensor v = at::empty(dst.sizes(), dst.options());
    copy_into(v, src);
    return copy_into(plain_alias(dst), resolve_math_bits(with_math_bits(v, dst)));
  }
  if (is_lazy(src) && has_math_bits(src)) return copy_into(dst, resolve_math_bits(src));
  if (is_lazy(src) && (reinterprets(src) || !named_dtype(src)))  // the graph has no bitcast, no such dtypes
    return copy_into(dst, ctx.cpu_view(src, "copy of a dtype-reinterpreting view").clone());
  if (!is_lazy(src)) {
    // Into new data where data lives: from the CPU one host-to-device copy
    // under the CUDA target, from a CUDA tensor one device-to-device copy.
    at::Tensor buf = at::empty_strided(dst.sizes(), dst.strides(), dst.options().device(data_device()));
    buf.copy_(src);
    bool whole_storage = dst.storage_offset() == 0 && dst.is_non_overlapping_and_dense() &&
                         static_cast<size_t>(dst.numel() * dst.element_size()) == dst.storage().nbytes();
    if (reinterprets(dst) && whole_storage && dst.is_contiguous() &&
        dst.storage().nbytes() % c10::elementSize(storage_of(dst).dtype) == 0) {
      // Bytes over all of a storage of another dtype (UntypedStorage.copy_):
      // the storage keeps its dtype.
      LazyStorage& ls = storage_of(dst);
      at::Tensor typed = make_tensor(dst.storage(), ls.dtype, {ls.numel}, {1}, 0);
      ctx.assign_data(typed, buf.view(at::kByte).view(ls.dtype));
    } else if (whole_storage && !reinterprets(dst)) {
      ctx.assign_data(dst, buf);
    } else if (reinterprets(dst) || !named_dtype(dst)) {
      // Into part of a storage through a view of another dtype, or of a dtype
      // the graph does not carry: eager's copy_ writes the elements in place,
      // as run_eager's kernels do.
      if (ctx.has_pending()) ctx.sync("copy into a dtype-reinterpreting view", ctx.call_site());
      ctx.prepare_write(dst);
      ctx.cpu_view(dst, "copy into a dtype-reinterpreting view").copy_(buf);
    } else {
      ctx.write(dst, ctx.input(buf));
    }
    return;
  }
  if (reinterprets(dst) || !named_dtype(dst))
    return copy_into(dst, ctx.cpu_view(src, "copy into a dtype-reinterpreting view"));
  // Eager's copy_: nothing to do for the same elements; otherwise
  // TensorIterator's rules, overlap first, then src must broadcast to dst.
  if (dst.is_same(src) ||
      (dst.is_alias_of(src) && dst.storage_offset() == src.storage_offset() && dst.sizes().equals(src.sizes()) &&
       dst.strides().equals(src.strides()) && dst.scalar_type() == src.scalar_type()))
    return;
  at::assert_no_internal_overlap(dst);
  at::assert_no_partial_overlap(dst, src);
  auto shape = at::infer_size_dimvector(dst.sizes(), src.sizes());
  TORCH_CHECK(dst.sizes().equals(shape), "output with shape ", dst.sizes(), " doesn't match the broadcast shape ",
              at::IntArrayRef(shape));
  ValueId v = ctx.read(src);
  auto& g = ctx.graph();
  DType dt = bridge::from_aten(dst.scalar_type());
  ir::TensorType vt = g.value(v).type;
  if (vt.dtype != dt && !(runtime::kernels_support(dt) && runtime::kernels_support(vt.dtype))) {
    // Complex and other unlowered conversions: converted by eager's copy_.
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

}  // namespace

bool reinterprets(const at::Tensor& t) { return is_lazy(t) && storage_of(t).dtype != t.scalar_type(); }

at::Tensor resolve_math_bits(const at::Tensor& t) {
  if (!has_math_bits(t)) return t;
  // Recorded like any op: conj_physical and neg of the stored elements.
  at::Tensor v = plain_alias(t);
  if (t.is_conj()) v = at::conj_physical(v);
  if (t.is_neg()) v = at::neg(v);
  return v;
}

at::Tensor with_math_bits(at::Tensor cpu, const at::Tensor& t) {
  if (!has_math_bits(t)) return cpu;
  if (t.is_conj()) cpu._set_conj(true);
  if (t.is_neg()) cpu._set_neg(true);
  return cpu;
}

// ---- sparse tensors --------------------------------------------------------------

namespace {

at::Tensor component_to_cpu(const at::Tensor& t) {
  return is_lazy(t) ? TraceContext::get().cpu_view(t, "sparse tensor").clone() : t;
}

at::Tensor component_to_lazy(const at::Tensor& t) { return is_lazy(t) ? t : t.to(lazyjit::device()); }

// A COO tensor on lazyjit over lazyjit indices and values, as ATen's
// new_with_dims_and_tensor_sparse makes one on the CPU.
at::Tensor lazy_sparse_coo(int64_t sparse_dim, int64_t dense_dim, at::IntArrayRef sizes, const at::Tensor& indices,
                           const at::Tensor& values, std::optional<bool> is_coalesced) {
  at::Tensor r = at::detail::make_tensor<at::SparseTensorImpl>(
      c10::DispatchKeySet(c10::DispatchKey::SparsePrivateUse1), values.dtype());
  auto* impl = static_cast<at::SparseTensorImpl*>(r.unsafeGetTensorImpl());
  impl->resize_(sparse_dim, dense_dim, sizes);
  impl->set_indices_and_values_unsafe(component_to_lazy(indices), component_to_lazy(values));
  if (is_coalesced) impl->set_coalesced(*is_coalesced);
  return r;
}

// aten::_sparse_coo_tensor_with_dims_and_tensors(int sparse_dim, int dense_dim,
// SymInt[] size, Tensor indices, Tensor values, *, ScalarType? dtype, Layout?
// layout, Device? device, bool? pin_memory, bool? is_coalesced): what
// .to("lazyjit") of a COO tensor calls.
void sparse_coo_with_dims_and_tensors(const c10::OperatorHandle&, torch::jit::Stack* stack) {
  Stack& s = *stack;
  size_t n = s.size() - 10;
  std::vector<int64_t> sizes;
  for (const IValue& e : s[n + 2].toListRef()) sizes.push_back(e.isSymInt() ? e.toSymInt().expect_int() : e.toInt());
  at::Tensor values = s[n + 4].toTensor();
  if (!s[n + 5].isNone()) values = values.to(static_cast<at::ScalarType>(s[n + 5].toInt()));
  std::optional<bool> coalesced;
  if (!s[n + 9].isNone()) coalesced = s[n + 9].toBool();
  at::Tensor r = lazy_sparse_coo(s[n].toInt(), s[n + 1].toInt(), sizes, s[n + 3].toTensor(), values, coalesced);
  s.erase(s.begin() + static_cast<std::ptrdiff_t>(n), s.end());
  s.push_back(r);
}

}  // namespace

// Ops without a kernel for lazyjit's sparse dispatch keys reach record_op,
// which runs them through the CPU kernels (run_eager).
TORCH_LIBRARY_IMPL(_, SparsePrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&record_op>());
}
TORCH_LIBRARY_IMPL(_, SparseCsrPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&record_op>());
}
// The accessors of sparse tensors, ATen's own kernels (their CompositeExplicit
// defaults only raise "expected sparse ... layout").
TORCH_LIBRARY_IMPL(aten, SparsePrivateUse1, m) {
  m.impl("_sparse_coo_tensor_with_dims_and_tensors",
         torch::CppFunction::makeFromBoxedFunction<&sparse_coo_with_dims_and_tensors>());
  m.impl("_indices", TORCH_FN(at::native::_indices_sparse));
  m.impl("indices", TORCH_FN(at::native::indices_sparse));
  m.impl("_values", TORCH_FN(at::native::_values_sparse));
  m.impl("values", TORCH_FN(at::native::values_sparse));
  m.impl("sparse_dim", TORCH_FN(at::native::sparse_dim_sparse));
  m.impl("dense_dim", TORCH_FN(at::native::dense_dim_sparse));
  m.impl("_nnz", TORCH_FN(at::native::_nnz_sparse));
  m.impl("is_coalesced", TORCH_FN(at::native::is_coalesced_sparse));
  m.impl("_coalesced_", TORCH_FN(at::native::_coalesced_sparse_));
}
TORCH_LIBRARY_IMPL(aten, SparseCsrPrivateUse1, m) {
  m.impl("crow_indices", TORCH_FN(at::native::crow_indices_sparse_csr));
  m.impl("col_indices", TORCH_FN(at::native::col_indices_sparse_csr));
  m.impl("ccol_indices", TORCH_FN(at::native::ccol_indices_sparse_csr));
  m.impl("row_indices", TORCH_FN(at::native::row_indices_sparse_csr));
  m.impl("values", TORCH_FN(at::native::values_sparse_csr));
  m.impl("sparse_dim", TORCH_FN(at::native::sparse_dim_sparse_csr));
  m.impl("dense_dim", TORCH_FN(at::native::dense_dim_sparse_csr));
  m.impl("_nnz", TORCH_FN(at::native::_nnz_sparse_csr));
}

at::Tensor sparse_to_cpu(const at::Tensor& t) {
  if (t.layout() == at::kSparse) {
    auto* impl = static_cast<at::SparseTensorImpl*>(t.unsafeGetTensorImpl());
    at::Tensor values = component_to_cpu(impl->values());
    return at::_sparse_coo_tensor_with_dims_and_tensors(impl->sparse_dim(), impl->dense_dim(), t.sizes(),
                                                         component_to_cpu(impl->indices()), values,
                                                         values.options().layout(at::kSparse), impl->coalesced());
  }
  auto* impl = static_cast<at::SparseCsrTensorImpl*>(t.unsafeGetTensorImpl());
  at::Tensor values = component_to_cpu(impl->values());
  return at::_sparse_compressed_tensor_unsafe(component_to_cpu(impl->compressed_indices()),
                                              component_to_cpu(impl->plain_indices()), values, t.sizes(),
                                              values.options().layout(t.layout()));
}

at::Tensor sparse_to_lazy(const at::Tensor& cpu) {
  if (cpu.layout() == at::kSparse)
    return lazy_sparse_coo(cpu.sparse_dim(), cpu.dense_dim(), cpu.sizes(), cpu._indices(), cpu._values(),
                           cpu.is_coalesced());
  at::Tensor ci = cpu.layout() == at::kSparseCsr || cpu.layout() == at::kSparseBsr ? cpu.crow_indices()
                                                                                   : cpu.ccol_indices();
  at::Tensor pi = cpu.layout() == at::kSparseCsr || cpu.layout() == at::kSparseBsr ? cpu.col_indices()
                                                                                   : cpu.row_indices();
  at::Tensor values = component_to_lazy(cpu.values());
  return at::_sparse_compressed_tensor_unsafe(component_to_lazy(ci), component_to_lazy(pi), values, cpu.sizes(),
                                              values.options().layout(cpu.layout()));
}

bool is_special_op(const std::string& name) {
  static const std::unordered_set<std::string> names = {
      "aten::empty.memory_format", "aten::empty_strided", "aten::new_empty_strided", "aten::copy_", "aten::_copy_from",
      "aten::_copy_from_and_resize", "aten::_local_scalar_dense", "aten::zero_", "aten::fill_.Scalar"};
  const auto& storage = storage_op_names();
  return names.count(name) > 0 || std::find(storage.begin(), storage.end(), name) != storage.end();
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
    if (!is_lazy(t) || reinterprets(t) || !named_dtype(t) || has_math_bits(t) || !ctx.is_fresh(t)) return false;
    c10::Scalar v = name == "aten::zero_" ? c10::Scalar(int64_t{0}) : s.back().toScalar();
    at::Tensor buf = at::empty_strided(t.sizes(), t.strides(), t.options().device(data_device()));
    buf.fill_(v);
    ctx.assign_data(t, buf);
    s.erase(s.end() - (name == "aten::zero_" ? 1 : 2), s.end());
    s.push_back(t);
    return true;
  }
  if (name == "aten::empty.memory_format") {
    if (!s[3].isNone()) check_device_index(s[3].toDevice().index());  // lazyjit:5 raises, as cuda:5 does
    auto sizes = int_list(s[0]);
    at::ScalarType dt = dtype_arg(s[1]);
    auto mf = s[5].isNone() ? at::MemoryFormat::Contiguous : s[5].toMemoryFormat();
    at::Tensor m = at::empty(sizes, at::TensorOptions().device(at::kMeta).dtype(dt), mf);
    s.clear();
    s.push_back(new_empty(m.sizes(), m.strides(), dt));
    return true;
  }
  if (name == "aten::empty_strided") {
    if (!s[4].isNone()) check_device_index(s[4].toDevice().index());
    auto sizes = int_list(s[0]), strides = int_list(s[1]);
    at::ScalarType dt = dtype_arg(s[2]);
    s.clear();
    s.push_back(new_empty(sizes, strides, dt));
    return true;
  }
  if (name == "aten::new_empty_strided") {
    // (self, size, stride, *, dtype, layout, device, pin_memory): the strides
    // asked for, as empty_strided.
    if (s.size() != 7 || !is_lazy(s[0].toTensor()) ||
        !(s[5].isNone() || s[5].toDevice().type() == c10::DeviceType::PrivateUse1))
      return false;
    auto sizes = int_list(s[1]), strides = int_list(s[2]);
    bool odd = sizes.size() != strides.size();
    for (size_t d = 0; d < sizes.size() && !odd; ++d) odd = sizes[d] < 0 || strides[d] < 0;
    if (odd) return false;  // the generic path raises eager's error
    at::ScalarType dt = s[3].isNone() ? s[0].toTensor().scalar_type() : static_cast<at::ScalarType>(s[3].toInt());
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
    std::optional<at::Tensor> apart = ctx.evaluate_apart(t);
    at::Tensor cpu = with_math_bits(apart ? *apart : ctx.cpu_view(t, "item()"), t);
    s.clear();
    s.push_back(cpu.item());
    return true;
  }
  return storage_op(name, stack);
}

// Random ops whose draws do not depend on tensor values are drawn at trace time
// from the generator of where data lives (data_device()), in program order,
// exactly as eager there would draw them; the graph reads the draws as an
// input. A seeded program therefore gives the CPU's numbers on the CPU target
// (under the CUDA target, the CUDA generator's), and the draws never cut the
// graph.
namespace {
const std::unordered_set<std::string>& inplace_draws() {
  static const std::unordered_set<std::string> s = {
      "aten::uniform_", "aten::normal_", "aten::random_", "aten::random_.from", "aten::random_.to",
      "aten::exponential_", "aten::geometric_", "aten::log_normal_", "aten::cauchy_",
      "aten::bernoulli_.float"};
  return s;
}
}  // namespace

bool may_draw_at_trace_time(const std::string& name) {
  return inplace_draws().count(name) || name == "aten::native_dropout";
}

bool draw_at_trace_time(const c10::OperatorHandle& op, const std::string& name, Stack* stack) {
  TraceContext& ctx = TraceContext::get();
  Stack& s = *stack;
  const auto& schema = op.schema();
  size_t nargs = schema.arguments().size();
  if (inplace_draws().count(name)) {
    at::Tensor self = s[s.size() - nargs].toTensor();
    if (!is_lazy(self)) return false;
    for (size_t i = s.size() - nargs + 1; i < s.size(); ++i)
      if (s[i].isTensor() && is_lazy(s[i].toTensor())) return false;
    // Drawn into a buffer of self's own sizes and strides, so that the kernel
    // there fills it as it fills self's layout in eager: in memory order
    // (TensorIterator orders dimensions by stride), and by the algorithm it
    // picks for that layout (normal_ fills a contiguous tensor of 16 or more
    // elements in chunks, any other one element by element; bernoulli_ and
    // exponential_ draw a non-contiguous one through a contiguous temporary).
    // A contiguous buffer would take the draws in logical order instead. The
    // graph reads them contiguous. An expanded self raises eager's error here.
    auto draw = [op](Stack args, at::IntArrayRef sizes, at::IntArrayRef strides, const at::TensorOptions& opts) {
      at::Tensor b = at::empty_strided(sizes, strides, opts);
      args[0] = b;
      op.callBoxed(&args);
      return b.contiguous();
    };
    Stack cpu(s.end() - nargs, s.end());
    cpu[0] = c10::IValue();  // not self: a redraw must not keep it alive
    const at::TensorOptions opts = self.options().device(data_device());
    if (ctx.capturing()) {
      // Drawn again, into a new buffer, each time the captured program runs.
      at::Tensor buf = draw(cpu, self.sizes(), self.strides(), opts);
      ir::ValueId v = ctx.input(buf);
      ctx.note_redraw([draw, args = cpu, sizes = self.sizes().vec(), strides = self.strides().vec(), opts] {
        return draw(args, sizes, strides, opts);
      });
      ctx.write(self, v);
    } else {
      ctx.write(self, ctx.input(draw(cpu, self.sizes(), self.strides(), opts)));
    }
    s.erase(s.end() - nargs, s.end());
    s.push_back(self);
    return true;
  }
  if (name == "aten::native_dropout") {
    at::Tensor input = s[s.size() - 3].toTensor();
    double p = s[s.size() - 2].toDouble();
    bool train = s.back().isNone() || s.back().toBool();
    if (!is_lazy(input) || !train || !at::isFloatingType(input.scalar_type())) return false;
    // As ATen's native_dropout_cpu: mask ~ Bernoulli(1 - p), out = x * mask / (1 - p)
    // (under the CUDA target drawn by the CUDA generator: not CUDA eager's
    // fused dropout draws, which no other op reproduces).
    // The mask is drawn as eager's CPU dropout draws it (ATen's _dropout_impl:
    // empty_like(input).bernoulli_(1 - p)): in the input's own layout when that
    // is dense (a transpose: its memory order), contiguous otherwise; the graph
    // reads it contiguous.
    auto draw_mask = [](at::IntArrayRef sizes, at::IntArrayRef strides, const at::TensorOptions& opts, double p) {
      at::Tensor geometry = at::empty_strided(sizes, strides, opts.device(at::kMeta));
      return at::empty_like(geometry, opts).bernoulli_(1 - p).contiguous();
    };
    const at::TensorOptions opts = input.options().device(data_device());
    at::Tensor noise = draw_mask(input.sizes(), input.strides(), opts, p);
    at::Tensor lnoise = make_tensor(make_storage(noise.numel(), noise.scalar_type()), noise.scalar_type(),
                                    noise.sizes(), noise.strides(), 0);
    ctx.assign_data(lnoise, noise);
    if (ctx.capturing()) {
      ctx.read(lnoise);  // its input now, drawn again on each run of the captured program
      ctx.note_redraw([draw_mask, sizes = input.sizes().vec(), strides = input.strides().vec(), opts, p] {
        return draw_mask(sizes, strides, opts, p);
      });
    }
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

}  // namespace lazyjit::tracer
