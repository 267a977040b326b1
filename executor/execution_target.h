// What the executor is told about the target a program runs on: where its ATen
// steps run, which thunk runs its kernels, whether replayable programs are
// captured as CUDA graphs. The runtime's backend (runtime/backend.h) fills it;
// Executable builds its thunks from it once.
#pragma once
#include <c10/core/Device.h>

#include <cstddef>
#include <memory>

#include "executor/thunk.h"
#include "lowering/program.h"

namespace lazyjit::executor {

// What the executor is told about the target a program runs on, by the runtime's backend.
struct ExecutionTarget {
  c10::Device device{c10::DeviceType::CPU};  // where ATen steps run and what the executor makes goes
  // The thunk that runs kernel step `step` of `program` (executor/cpu/, executor/cuda/); the CPU's when null.
  std::unique_ptr<Thunk> (*kernel_thunk)(const lowering::Program& program, size_t step) = nullptr;
  bool capture_graphs = false;  // capture replayable programs as CUDA graphs (the cuda target with CUDA graphs on)
};

}  // namespace lazyjit::executor
