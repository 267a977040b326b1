// The ops every device implements itself (empty, copies, item, resize, fills of
// fresh memory) and random draws made at trace time.
#pragma once
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <string>

namespace lazyjit::tracer {

bool is_special_op(const std::string& name);
// Handles `name` on the stack; false when it is not a special op (or not this case).
bool special_op(const std::string& name, torch::jit::Stack* stack);
bool draw_at_trace_time(const c10::OperatorHandle& op, const std::string& name, torch::jit::Stack* stack);
// Whether draw_at_trace_time can handle `name` at all (callers ask once per op).
bool may_draw_at_trace_time(const std::string& name);

}  // namespace lazyjit::tracer
