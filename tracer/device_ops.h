// The ops every device implements itself (empty, copies, item, resize, fills of
// fresh memory) and random draws made at trace time.
#pragma once
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/core/Storage.h>

#include <string>
#include <vector>

namespace lazyjit::tracer {

bool is_special_op(const std::string& name);
// Handles `name` on the stack; false when it is not a special op (or not this case).
bool special_op(const std::string& name, torch::jit::Stack* stack);
// The special ops that change a tensor's storage or its geometry over it
// (set_, resize_, as_strided_) or compare them (is_set_to): storage_ops.cpp.
const std::vector<std::string>& storage_op_names();
bool storage_op(const std::string& name, torch::jit::Stack* stack);
// Eager's resize_bytes_cpu for lazyjit storage `st` (UntypedStorage.resize_,
// and resize_ and set_ growing a storage): it holds `nbytes` from now on, in
// place, so every tensor over it sees the change; the elements it held are
// kept, up to the new size (new ones are zeros: uninitialized in eager).
void resize_storage_bytes(const c10::Storage& st, size_t nbytes);
bool draw_at_trace_time(const c10::OperatorHandle& op, const std::string& name, torch::jit::Stack* stack);
// Whether draw_at_trace_time can handle `name` at all (callers ask once per op).
bool may_draw_at_trace_time(const std::string& name);

// Whether lazyjit tensor `t` views its storage's elements as another dtype
// (view(dtype), view_as_real, view_as_complex, set_ onto another storage).
// Graphs have no bitcast: such tensors are copied, or read and written by CPU
// kernels (record_op.cpp).
bool reinterprets(const at::Tensor& t);

// Conjugate and negative views (is_conj(), is_neg(): conj(), fft's results,
// .imag of a conjugate): the stored elements are not the tensor's values.
inline bool has_math_bits(const at::Tensor& t) { return t.defined() && (t.is_conj() || t.is_neg()); }
// Lazyjit tensor `t`'s values as a tensor without those bits (recorded ops).
at::Tensor resolve_math_bits(const at::Tensor& t);
// `cpu`, a CPU view of lazyjit tensor `t`'s elements, with t's bits, so a CPU
// kernel sees what eager's would.
at::Tensor with_math_bits(at::Tensor cpu, const at::Tensor& t);

// Sparse tensors (COO; CSR, CSC, BSR, BSC) on lazyjit: their indices and values
// are lazyjit tensors; ops on them run through the CPU kernels (run_eager).
inline bool is_sparse_layout(const at::Tensor& t) { return t.defined() && t.layout() != at::kStrided; }
at::Tensor sparse_to_cpu(const at::Tensor& t);    // a copy on the CPU
at::Tensor sparse_to_lazy(const at::Tensor& cpu);  // a copy on lazyjit

}  // namespace lazyjit::tracer
