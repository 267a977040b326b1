// What the executor is told about the target a program runs on: where its ATen
// steps run, which thunk runs its kernels, and what runs a replayable program's
// runs (the cuda target's CUDA graphs: targets/cuda/graph_replays.h). The
// runtime's backend (runtime/backend.h) fills it; Executable builds its thunks
// from it once.
#pragma once
#include <c10/core/Device.h>

#include <cstddef>
#include <functional>
#include <memory>

#include "executor/run_io.h"
#include "executor/thunk.h"
#include "lowering/program.h"

namespace lazyjit::executor {

// The runs of one replayable program (graph_replay.h), where a target replays
// them (as CUDA graphs): each run goes through run(), which calls run_program
// for the runs it does not replay.
class ProgramReplays {
 public:
  virtual ~ProgramReplays() = default;
  using RunFn = std::function<RunResult(const Bindings&)>;
  virtual RunResult run(const Bindings& b, const RunFn& run_program) = 0;
};

// What the executor is told about the target a program runs on, by the runtime's backend.
struct ExecutionTarget {
  c10::Device device{c10::DeviceType::CPU};  // where ATen steps run and what the executor makes goes
  // The thunk that runs kernel step `step` of `program` (targets/*/kernel_thunk.h); needed by a program with kernel steps.
  std::unique_ptr<Thunk> (*kernel_thunk)(const lowering::Program& program, size_t step) = nullptr;
  // The replays of a replayable program (the cuda target with CUDA graphs on:
  // targets/cuda/graph_replays.h); null: every run runs its steps.
  std::unique_ptr<ProgramReplays> (*replays)(c10::Device device) = nullptr;
};

}  // namespace lazyjit::executor
