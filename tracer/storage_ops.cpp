// The ops that change which storage a lazyjit tensor views, or its geometry
// over it, and compute nothing: set_ (every overload), resize_, as_strided_,
// is_set_to. A storage is one c10::StorageImpl owning one LazyStorage
// (lazy_storage.h), so a tensor set_ onto another's storage shares its pending
// value, its data and every later write, as eager tensors share memory. Each
// follows eager's CPU kernel step by step (ATen/native/Resize.h), raising its
// errors at the op.
#include <ATen/ATen.h>
#include <ATen/EmptyTensor.h>
#include <ATen/native/Resize.h>
#include <ATen/native/ResizeCommon.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/is_set_to_native.h>

#include <algorithm>
#include <optional>
#include <vector>

#include "tracer/device_memory.h"
#include "tracer/device_ops.h"
#include "tracer/lazy_storage.h"
#include "tracer/trace_context.h"

namespace lazyjit::tracer {

using c10::IValue;
using torch::jit::Stack;

namespace {

int64_t int_arg(const IValue& v) { return v.isSymInt() ? v.toSymInt().expect_int() : v.toInt(); }

std::vector<int64_t> int_list(const IValue& v) {
  std::vector<int64_t> l;
  for (const IValue& e : v.toListRef()) l.push_back(int_arg(e));
  return l;
}

LazyStorage& lazy_storage(const c10::Storage& st) {
  auto* s = static_cast<LazyStorage*>(st.data_ptr().get_context());
  TORCH_CHECK(s, "lazyjit: storage has no lazyjit storage");
  return *s;
}

// Growing a storage that holds data: its elements computed first, kept, and
// zeros after them (uninitialized memory in eager).
void grow_storage(const c10::Storage& st, size_t nbytes) {
  if (nbytes > st.nbytes()) resize_storage_bytes(st, nbytes);
}

// Untyped bytes (UntypedStorage(n, device="lazyjit")) take the dtype of the
// tensor `t` set onto them: fresh ones at once, filled ones reinterpreted on
// the CPU (torch.load, deepcopy build tensors this way).
void type_untyped_bytes(const at::Tensor& t, const c10::Storage& st) {
  LazyStorage& ls = lazy_storage(st);
  int64_t isz = t.element_size();
  if (ls.dtype == t.scalar_type() || ls.dtype != at::kByte || st.nbytes() % isz != 0) return;
  TraceContext& ctx = TraceContext::get();
  at::Tensor bytes = make_tensor(st, at::kByte, {ls.numel}, {1}, 0);
  if (ctx.is_fresh(bytes)) {
    ls.dtype = t.scalar_type();
    ls.numel = static_cast<int64_t>(st.nbytes()) / isz;
    return;
  }
  at::Tensor typed = make_tensor(st, t.scalar_type(), {static_cast<int64_t>(st.nbytes()) / isz}, {1}, 0);
  ctx.assign_data(typed, ctx.cpu_view(bytes, "set_").view(t.scalar_type()));
}

// Eager's set_storage_cpu_ (checkSetStorage, then resize_impl_cpu_): `t` views
// storage `st` from `offset` with `sizes` and `strides` (contiguous without).
// Sizes and strides unchanged, the view must lie inside the storage; changed,
// the storage grows to hold it.
void set_storage(const at::Tensor& t, const c10::Storage& st, int64_t offset, at::IntArrayRef sizes,
                 std::optional<at::IntArrayRef> strides) {
  if (strides)
    TORCH_CHECK(sizes.size() == strides->size(), "unequal size length (", sizes.size(), ") and stride length (",
                strides->size(), ")");
  TORCH_CHECK(offset >= 0, "Tensor: invalid storage offset ", offset);
  c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  bool unchanged = impl->sizes().equals(sizes) && (!strides || impl->strides().equals(*strides));
  // (No strides: eager's null list, which reads as contiguous there.)
  if (unchanged)
    at::native::checkInBoundsForStorage(sizes, strides ? *strides : at::IntArrayRef(), offset, t.dtype(), st);
  bool other = !t.storage().is_alias_of(st);
  if (other)
    TORCH_CHECK(t.storage().device() == st.device(), "Attempted to set the storage of a tensor on device \"",
                t.storage().device(), "\" to a storage on different device \"", st.device(),
                "\".  This is no longer allowed; the devices must match.");
  type_untyped_bytes(t, st);
  if (other) impl->set_storage_keep_dtype(st);
  impl->set_storage_offset(offset);
  if (unchanged) return;
  size_t nbytes;
  if (strides) {
    impl->set_sizes_and_strides(sizes, *strides);
    nbytes = at::detail::computeStorageNbytes(sizes, *strides, t.element_size(), offset);
  } else {
    impl->set_sizes_contiguous(sizes);
    nbytes = at::detail::computeStorageNbytesContiguous(sizes, t.element_size(), offset);
  }
  if (t.numel() != 0) grow_storage(st, nbytes);
}

// Eager's _resize_ (resize_impl_cpu_ without strides, then the memory format).
void resize_tensor(const at::Tensor& t, at::IntArrayRef sizes, std::optional<at::MemoryFormat> format) {
  c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  int64_t old_nbytes = static_cast<int64_t>(t.storage().nbytes());
  if (!impl->sizes().equals(sizes)) {
    impl->set_sizes_contiguous(sizes);
    if (t.numel() != 0)
      grow_storage(t.storage(), at::detail::computeStorageNbytesContiguous(sizes, t.element_size(), t.storage_offset()));
  }
  if (format) {
    TORCH_CHECK(*format != at::MemoryFormat::Preserve, "Unsupported memory format", *format);
    impl->empty_tensor_restride(*format);
  }
  if (at::globalContext().deterministicAlgorithms() && at::globalContext().deterministicFillUninitializedMemory())
    at::native::fill_resize_deterministic_(t, old_nbytes);
}

void replace_args(Stack* stack, size_t nargs, IValue result) {
  stack->erase(stack->end() - static_cast<std::ptrdiff_t>(nargs), stack->end());
  stack->push_back(std::move(result));
}

}  // namespace

void resize_storage_bytes(const c10::Storage& st, size_t nbytes) {
  TORCH_CHECK(st.resizable(), "Trying to resize storage that is not resizable");
  LazyStorage& ls = lazy_storage(st);
  size_t isz = c10::elementSize(ls.dtype);
  auto numel = static_cast<int64_t>((nbytes + isz - 1) / isz);
  note_device_bytes(static_cast<int64_t>(nbytes) - ls.counted_bytes, /*allocation_or_free=*/false);
  ls.counted_bytes = static_cast<int64_t>(nbytes);
  TraceContext& ctx = TraceContext::get();
  at::Tensor whole = make_tensor(st, ls.dtype, {ls.numel}, {1}, 0);
  c10::StorageImpl* impl = st.unsafeGetStorageImpl();
  if (ctx.is_fresh(whole)) {  // nothing to keep (from empty()): no data yet either
    ls.numel = numel;
    impl->set_nbytes(nbytes);
    return;
  }
  at::Tensor data;
  if (numel == 0) {  // nothing kept (FSDP frees parameters this way): nothing to compute
    data = at::empty({0}, on_device(ls.dtype));
  } else {
    at::Tensor old = ctx.cpu_view(whole, "resize of a storage");
    data = at::zeros({numel}, old.options());
    int64_t keep = std::min(numel, old.numel());
    data.narrow(0, 0, keep).copy_(old.narrow(0, 0, keep));
  }
  impl->set_nbytes(nbytes);
  ctx.assign_data(make_tensor(st, ls.dtype, {numel}, {1}, 0), data);
}

const std::vector<std::string>& storage_op_names() {
  static const std::vector<std::string> names = {
      "aten::set_.source_Tensor", "aten::set_.source_Storage", "aten::set_.source_Storage_storage_offset",
      "aten::set_", "aten::resize_", "aten::as_strided_", "aten::is_set_to"};
  return names;
}

bool storage_op(const std::string& name, Stack* stack) {
  Stack& s = *stack;
  if (name == "aten::set_.source_Tensor") {
    at::Tensor t = s[s.size() - 2].toTensor(), src = s.back().toTensor();
    if (is_sparse_layout(t) || is_sparse_layout(src)) return false;
    // set_tensor_: nothing to do onto itself.
    if (t.unsafeGetTensorImpl() != src.unsafeGetTensorImpl())
      set_storage(t, src.storage(), src.storage_offset(), src.sizes(), src.strides());
    replace_args(stack, 2, t);
    return true;
  }
  if (name == "aten::set_.source_Storage") {
    at::Tensor t = s[s.size() - 2].toTensor();
    c10::Storage st = s.back().toStorage();
    std::vector<int64_t> sizes{static_cast<int64_t>(st.nbytes() / t.element_size())};
    set_storage(t, st, 0, sizes, std::nullopt);
    replace_args(stack, 2, t);
    return true;
  }
  if (name == "aten::set_.source_Storage_storage_offset") {
    at::Tensor t = s[s.size() - 5].toTensor();
    c10::Storage st = s[s.size() - 4].toStorage();
    int64_t offset = int_arg(s[s.size() - 3]);
    std::vector<int64_t> sizes = int_list(s[s.size() - 2]), strides = int_list(s.back());
    // An empty stride list is none: contiguous (as a null IntArrayRef in eager).
    set_storage(t, st, offset, sizes, strides.empty() ? std::nullopt : std::optional<at::IntArrayRef>(strides));
    replace_args(stack, 5, t);
    return true;
  }
  if (name == "aten::set_") {  // set_(): a new, empty storage
    at::Tensor t = s.back().toTensor();
    set_storage(t, make_storage(0, t.scalar_type()), 0, {0}, std::nullopt);
    replace_args(stack, 1, t);
    return true;
  }
  if (name == "aten::resize_") {
    at::Tensor t = s[s.size() - 3].toTensor();
    std::vector<int64_t> sizes = int_list(s[s.size() - 2]);
    std::optional<at::MemoryFormat> format;
    if (!s.back().isNone()) format = s.back().toMemoryFormat();
    resize_tensor(t, sizes, format);
    replace_args(stack, 3, t);
    return true;
  }
  if (name == "aten::as_strided_") {
    // Eager's kernel: it checks the arguments and sets the geometry, no data.
    at::Tensor t = s[s.size() - 4].toTensor();
    std::vector<c10::SymInt> sizes, strides;
    for (int64_t v : int_list(s[s.size() - 3])) sizes.emplace_back(v);
    for (int64_t v : int_list(s[s.size() - 2])) strides.emplace_back(v);
    std::optional<c10::SymInt> offset;
    if (!s.back().isNone()) offset = c10::SymInt(int_arg(s.back()));
    at::native::as_strided__symint(t, sizes, strides, offset);
    replace_args(stack, 4, t);
    return true;
  }
  if (name == "aten::is_set_to") {
    bool r = at::native::is_set_to(s[s.size() - 2].toTensor(), s.back().toTensor());
    replace_args(stack, 2, r);
    return true;
  }
  return false;
}

}  // namespace lazyjit::tracer
