// The CPU target's ExecutionTarget, as its backend makes it
// (targets/cpu/backend.cpp), for tests that build Executables directly.
#pragma once
#include "executor/execution_target.h"
#include "targets/cpu/kernel_thunk.h"

namespace lazyjit {

inline executor::ExecutionTarget cpu_execution() {
  return {c10::Device(c10::kCPU), executor::cpu_kernel_thunk};
}

}  // namespace lazyjit
