// The boxed kernel behind every aten op on lazyjit tensors: it records the op
// into the graph (lazy mode) or runs it at once (step mode, and ops that need
// data). record_op.cpp reads as the ladder of choices.
#pragma once
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

namespace lazyjit::tracer {

// The boxed kernel registered for every aten op on the PrivateUse1 key.
void record_op(const c10::OperatorHandle& op, torch::jit::Stack* stack);

}  // namespace lazyjit::tracer
