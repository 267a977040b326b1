// Where programs run: the CPU, or the current CUDA device under the CUDA target
// (LAZYJIT_TARGET=cuda). Process-wide, set once by the runtime before its first
// program. What the executor makes itself (an ATen step's device arguments,
// op-by-op Full nodes and dense copies) is made there; kernels' results go
// where their inputs are (executor/device_launch.h).
#pragma once
#include <c10/core/Device.h>

namespace lazyjit::executor {

c10::Device execution_device();
void set_execution_device(c10::Device d);

}  // namespace lazyjit::executor
