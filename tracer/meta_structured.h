// Output geometry from PyTorch's C++ structured meta functions (at::meta::bmm,
// at::meta::add, ...), called directly. PyTorch registers Python meta kernels
// (torch._meta_registrations, torch._refs) over the C++ ones of many ops, and
// the first of those a process runs imports sympy or torch._dynamo through
// torch._check: 0.5-2.3 s on the first bmm, cumsum, argmax, topk, or add of a
// non-contiguous tensor. The C++ function is the one the CPU kernel allocates
// its result with (TORCH_META_FUNC), so its sizes, strides and dtype are
// eager's. (And masked_fill_ and flip, not structured: their checks, their
// results' layout as the CPU kernel makes it.)
// For the ops and cases meta_fast_path.h leaves; anything it cannot
// answer (an error included) falls to the registered meta kernel.
#pragma once
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

namespace lazyjit::tracer {

// `metas`: the op's arguments with lazyjit tensors as meta tensors (wrapped
// numbers as they were). On success pushes the op's returns onto `*rets` and
// returns true; returns false, leaving `*rets` empty, otherwise.
bool meta_structured(const c10::OperatorHandle& op, const torch::jit::Stack& metas, torch::jit::Stack* rets);

}  // namespace lazyjit::tracer
