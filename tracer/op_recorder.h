// Turns each ATen op on lazyjit tensors into graph nodes (lazy mode) or runs it
// at once through its CPU kernel (step mode, and ops that need data).
#pragma once
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

namespace lazyjit::tracer {

// The boxed kernel registered for every aten op on the PrivateUse1 key.
void record_op(const c10::OperatorHandle& op, torch::jit::Stack* stack);

}  // namespace lazyjit::tracer
