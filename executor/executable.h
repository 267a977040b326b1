// A program made ready to run: built once from a lowering::Program (ATen
// operators resolved, their arguments prepared), then run any number of times,
// from any number of threads, on CPU tensors (the CUDA target's kernels: on
// CUDA tensors, launched on PyTorch's current stream, executor/device_launch.h).
#pragma once
#include <ATen/core/Tensor.h>

#include <exception>
#include <functional>
#include <string>
#include <memory>
#include <vector>

#include "executor/aten_call.h"
#include "executor/collective_step.h"
#include "executor/graph_replay.h"
#include "lowering/program.h"

namespace lazyjit::executor {

struct Bindings {
  std::vector<at::Tensor> inputs;   // by input index; dense, with the declared strides
  std::vector<int64_t> scalars;     // by argument index: a double's bits or an int64 (bridge/aten_ir.h)
  // Kernel results stored into these tensors instead of new buffers (each
  // contiguous, of the value's type; one that is not gets a new buffer): an
  // input's memory, where can_store_into_input (store_in_place.h) allows it.
  std::vector<std::pair<ir::ValueId, at::Tensor>> into;
};

// A step that threw while a program ran. Only ATen library steps and view steps
// can: a fused kernel has no data-dependent checks.
struct StepFailure {
  uint32_t node;             // the step's node in program().graph (a kernel: its first node)
  std::exception_ptr error;  // what it threw, as thrown (an ATen kernel's c10::Error keeps its type)
};

// What a run computed. When a step throws, the steps that do not read its
// results (through the graph) still run, so every output that does not depend on
// a failed step is computed.
struct RunResult {
  std::vector<at::Tensor> outputs;    // per graph output; undefined when lost
  // With NaN checks on (LAZYJIT_DEBUG_NANS): which op first made a NaN or Inf
  // among the outputs, and its inputs; empty when none (runtime/nan_check.h).
  std::string nan_report;
  // With the compiled-vs-eager check on (LAZYJIT_CHECK): the first op whose
  // generated code disagrees with eager, and where its repro was written; empty
  // when all agree (runtime/graph_check.h).
  std::string check_report;
  std::vector<StepFailure> failures;  // in step order; empty when every step ran
  std::vector<int32_t> lost_by;       // per output: the failure it depends on, or -1; empty when none failed
  // A program with Plan::check_stores: whether a kernel stored a NaN or Inf
  // (in any float32/float64 value it stored, an output or not).
  bool stored_nonfinite = false;
};

class GraphReplays;

class Executable {
 public:
  // Throws when an ATen step names an operator that does not exist.
  explicit Executable(std::shared_ptr<const lowering::Program> program);

  ~Executable();
  Executable(Executable&&) noexcept;

  // One CPU tensor per graph output, dense with the declared strides, and the
  // steps that failed. Kernels split over `threads` threads of ATen's OpenMP pool.
  // Under the cuda target a replayable program is captured as a CUDA graph at
  // its second run with the same sizes and scalars, and replayed from then on
  // (graph_replays.h).
  RunResult run(const Bindings& bindings, int threads) const;
  // The same, calling `after(step, env)` once each step has run (before the
  // buffer plan frees anything): env holds every value made so far.
  using StepObserver = std::function<void(size_t step, const std::vector<at::Tensor>& env)>;
  RunResult run(const Bindings& bindings, int threads, const StepObserver& after) const;

  const lowering::Program& program() const { return *program_; }
  // Whether its steps allow one CUDA graph, or the first reason not (graph_replay.h).
  const ReplayVerdict& graph_replay() const { return replay_; }

 private:
  // Sets `*nonfinite` when a kernel with checked stores stored a NaN or Inf.
  void run_step(size_t si, std::vector<at::Tensor>& env, const Bindings& b, int threads, bool* nonfinite) const;
  // After a step threw: whether step `si` reads a value a failed step made (the
  // failure's index, or -1), and marking the values a skipped or failed step makes.
  int32_t failed_operand(size_t si, const std::vector<int32_t>& failed_by) const;
  void mark_results(size_t si, int32_t failure, std::vector<int32_t>& failed_by) const;

  std::shared_ptr<const lowering::Program> program_;
  // How each Aten step runs, prepared once: a collective (collective_step.h)
  // or an ATen call. Per step; null for other kinds.
  std::vector<std::unique_ptr<AtenCall>> aten_;
  std::vector<std::unique_ptr<CollectiveStep>> collectives_;
  std::vector<std::vector<int64_t>> dims_;       // per kernel: lowering::kernel_dims
  ReplayVerdict replay_;
  // Under the cuda target with CUDA graphs on, for a replayable program: its
  // warm-up, capture and replays (null otherwise).
  std::unique_ptr<GraphReplays> graphs_;
};

}  // namespace lazyjit::executor
