// What recording needs to know about an op that never changes with its
// arguments: its names and how the recording ladder (record_op.cpp) treats it.
#pragma once
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <cstdint>
#include <string>
#include <vector>

namespace lazyjit::tracer {

struct OpInfo {
  std::string name;   // "aten::add_.Tensor"
  std::string fname;  // its functional form, "aten::add.Tensor"
  bool inplace = false;
  bool special = false;      // one of the device's own ops (device_ops.cpp)
  bool index = false;        // takes index tensors, which may live on the CPU
  int sub_check = 0;         // 1: sub/rsub of two tensors, 2: of a tensor and a Scalar
  bool eager = false;        // needs the data whatever its arguments (needs_eager's schema part)
  bool draws = false;        // draw_at_trace_time may handle it
  bool reduction = false;    // try_reduction may handle it
  bool training = false;     // try_training_op may handle it (never in place)
  bool cat = false;          // aten::cat (try_cat)
  bool view = false;         // every result is a read-only alias of an argument
  bool is_mutable = false;   // schema.is_mutable()
  bool bool_array_args = false;  // has a bool[N] argument (may arrive as a generic list)
  // Per schema argument, what its declared type says (kSymIntArg, kNumberArg):
  // computed once, not from the type's text at every op.
  std::vector<uint8_t> arg_flags;
};
inline constexpr uint8_t kSymIntArg = 1;  // SymInt, SymInt[], SymInt?: a size (shape-like)
inline constexpr uint8_t kNumberArg = 2;  // Scalar, Scalar?, float, float?: a runtime scalar

// Computed once per op. Call with the trace lock held.
const OpInfo& op_info(const c10::OperatorHandle& op);

// "aten::add.Tensor"
std::string full_name(const c10::OperatorHandle& op);

// Whether the op must run on data now: data-dependent sizes, results that are
// numbers, random draws that depend on values, or arguments we cannot record.
bool needs_eager(const OpInfo& info, const torch::jit::Stack& args);

// The argument index the schema's return `ret` aliases, or -1.
int aliased_arg(const c10::FunctionSchema& schema, size_t ret);

}  // namespace lazyjit::tracer
