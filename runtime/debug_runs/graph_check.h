// Compiled vs eager, op by op (LAZYJIT_CHECK=1, lazyjit.check_graphs()). Each
// node that generated code computed is run again through ATen's own kernels
// (executor/op_by_op_node.h) on the operands the program computed, and the two
// results compared: the first that differs beyond tolerance is the op whose
// code is wrong. Feeding each op the program's own operands, not eager's,
// keeps rounding differences of earlier ops from adding up into a false alarm.
//
// Tolerance (|compiled - eager| <= atol + rtol * |eager|, NaN equal to NaN,
// integers and bools exact): float64 1e-7/1e-7, float32 1e-4/1e-5, float16
// 2e-3/1e-5, bfloat16 1.6e-2/1e-5 (a rounding step of the narrow type); a sum's
// rtol is taken of the sum of |x| over the row, since eager's float32 sum is
// the less accurate one there.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "runtime/debug_runs/observed_run.h"

namespace lazyjit::runtime {

struct Mismatch {
  int64_t node = -1;   // the first node of the traced graph that differs; -1: none
  std::string report;  // what differs, where, its inputs' statistics
};

// `where(node)` names a traced node in the user's terms (Runtime::describe_node);
// eager runs on `device` (where the program's ATen steps ran).
Mismatch check_against_eager(const ObservedRun& run, const std::vector<int64_t>& scalars, c10::Device device,
                             const std::function<std::string(uint32_t node)>& where);

}  // namespace lazyjit::runtime
