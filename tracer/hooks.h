// The op hooks of step mode (registry in api.cpp).
#pragma once
#include "tracer/lazyjit.h"

namespace lazyjit::tracer {
bool has_op_hooks();
void call_op_hooks(const OpEvent& e);
}  // namespace lazyjit::tracer
