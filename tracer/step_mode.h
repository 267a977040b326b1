// Running ops at once, one by one, through their eager CPU kernels: every op in
// step mode (the debug path, where the op hooks of lazyjit.h see each op), and
// in lazy mode the ops that cannot be recorded (the CPU fallback).
#pragma once
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <string>

#include <vector>

namespace lazyjit {
struct OpEvent;
}

namespace lazyjit::tracer {

// Whether a hook asked for the ops of compiled graphs (add_op_hook(.., true)).
bool has_lazy_op_hooks();
// Calls those hooks with each event, in order.
void call_lazy_op_hooks(const std::vector<OpEvent>& events);

// Runs `op` through its eager CPU kernel on materialized inputs (syncing what is
// pending first); outputs are lazyjit tensors holding the results. Outside step
// mode `reason` is counted in the metrics as a fallback.
void run_eager(const c10::OperatorHandle& op, torch::jit::Stack* stack, const char* reason);
// The same for an op run at once around compiled programs (record_op.cpp's
// at_once): its arguments are on hand, nothing syncs, nothing counts as a
// fallback; counted as ops_at_once.
void run_at_once(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// One of the device's own ops (device_ops.h: special_op), which the op hooks
// see in step mode as they see every op. False, having done nothing, when
// special_op does not handle this case.
bool run_special_op(const std::string& name, const torch::jit::Stack& args, torch::jit::Stack* stack);

}  // namespace lazyjit::tracer
