// A program made ready to run: built once from a lowering::Program for an
// ExecutionTarget (one thunk per step: ATen operators resolved, their
// arguments prepared; thunk.h), then run any number of times, from any number
// of threads, on the target's tensors (ExecutionTarget: the CPU's, or the CUDA
// target's, launched on PyTorch's current stream).
#pragma once
#include <ATen/core/Tensor.h>

#include <exception>
#include <functional>
#include <string>
#include <memory>
#include <vector>

#include "executor/execution_target.h"
#include "executor/graph_replay.h"
#include "executor/run_io.h"
#include "executor/thunk.h"
#include "lowering/program.h"

namespace lazyjit::executor {

class Executable {
 public:
  // Throws when an ATen step names an operator that does not exist.
  explicit Executable(std::shared_ptr<const lowering::Program> program,
                      const ExecutionTarget& target = {});

  ~Executable();
  Executable(Executable&&) noexcept;

  // One CPU tensor per graph output, dense with the declared strides, and the
  // steps that failed. Kernels split over `threads` threads of ATen's OpenMP pool.
  // A replayable program on a target with ExecutionTarget::replays runs through
  // them (the cuda target: captured as a CUDA graph at its second run with the
  // same sizes and scalars, replayed from then on).
  // Bindings::may_overwrite: the outputs the program may store into their
  // inputs are stored there (Bindings::into).
  RunResult run(const Bindings& bindings, int threads) const;
  // The same, calling `after(step, env)` once each step has run (before the
  // buffer plan frees anything): env holds every value made so far.
  using StepObserver = std::function<void(size_t step, const std::vector<at::Tensor>& env)>;
  RunResult run(const Bindings& bindings, int threads, const StepObserver& after) const;

  const lowering::Program& program() const { return *program_; }
  // Whether its steps allow one CUDA graph, or the first reason not (graph_replay.h).
  const ReplayVerdict& graph_replay() const { return replay_; }

 private:
  void run_step(size_t si, StepRun& r) const;
  // After a step threw: whether step `si` reads a value a failed step made (the
  // failure's index, or -1), and marking the values a skipped or failed step makes.
  int32_t failed_operand(size_t si, const std::vector<int32_t>& failed_by) const;
  void mark_results(size_t si, int32_t failure, std::vector<int32_t>& failed_by) const;
  // Bindings::may_overwrite resolved into Bindings::into.
  void add_overwrites(Bindings& b) const;
  // For an op-by-op plan: the step after which output `out` may be copied into
  // input `in` (both made or read for the last time by then), or -1; and the
  // step that reads `in` (or what may alias it) last.
  std::pair<int64_t, int64_t> copy_step(size_t out, size_t in) const;

  std::shared_ptr<const lowering::Program> program_;
  std::vector<std::unique_ptr<Thunk>> thunks_;  // per step (step_thunks.h)
  ReplayVerdict replay_;
  // ExecutionTarget::replays' for a replayable program (null otherwise).
  std::unique_ptr<ProgramReplays> replays_;
  // can_store_into_input per (output, input) pair asked, computed once.
  struct OverwriteChecks;
  std::unique_ptr<OverwriteChecks> overwrites_;
};

}  // namespace lazyjit::executor
