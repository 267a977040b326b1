// Runs of one replayable program (graph_replay.h) as graph replays.
// Per set of input sizes, strides, dtypes and scalar arguments (a "run key";
// kernels and ATen steps bake the scalars and sizes in): the first run with a
// key runs as usual (warm-up: lazy initialisations happen, cuBLAS picks its
// algorithms), the second is captured into a graph and replayed once, every
// later one replays it. A run with another key drops the graph and starts
// over. Inputs at the same address in the warm-up and the captured run
// (weights, optimizer state) are stable: the graph reads them where they are
// (a later run with one moved starts over, that input copied from then on);
// the others are copied into static input buffers before each replay;
// outputs are copied out of the graph's buffers after it, so a replay never
// overwrites a tensor the caller holds. Kernel results the caller asked to be
// stored into its tensors (Bindings::into) are not: a graph writes its own.
// A capture that fails (an op synchronizing with the host), or whose outputs
// are not on the devices the warm-up's were, is never tried again for this
// program; the reason is counted (debug/metrics.h).
#pragma once
#include <ATen/core/Tensor.h>

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "targets/cuda/cuda_graph.h"
#include "executor/execution_target.h"

namespace lazyjit::executor {

class GraphReplays final : public ProgramReplays {
 public:
  // `device`: where every input must be (ExecutionTarget::device); `capture`:
  // capture_cuda_graph, or a stand-in in tests.
  GraphReplays(c10::Device device, CaptureFn capture);
  ~GraphReplays();
  // run_program runs the program as it always does (the warm-up run, and the captured one).
  RunResult run(const Bindings& b, const RunFn& run_program) override;

  // Why the last run that was not replayed was not (tests and reports).
  std::string last_not_replayed() const;

 private:
  RunResult capture_and_replay(const Bindings& b, const RunFn& run_program);
  RunResult replay(const Bindings& b);

  const c10::Device device_;
  const CaptureFn capture_;
  mutable std::mutex mu_;  // one run at a time uses the static buffers; others run as usual
  std::vector<int64_t> key_;
  int runs_with_key_ = 0;
  std::string refused_;    // a capture that failed: never tried again
  std::string last_not_replayed_;
  // The warm-up's output devices: an op whose outputs move under capture
  // (memory-efficient attention's philox seed and offset: on the CPU when run,
  // on the GPU when captured) makes the graph's outputs unlike a run's.
  std::vector<c10::Device> warm_up_devices_;
  std::vector<const void*> warm_up_data_;  // the warm-up's input addresses
  // Per input: read in place (its tensor held in static_inputs_) or copied
  // into the static buffer there.
  std::vector<bool> stable_;
  std::vector<bool> moved_;  // per input: once stable, then moved: never stable again
  std::vector<at::Tensor> static_inputs_;
  // The graph's results, in its private pool (released when both the graph and
  // these are gone, in either order, as with torch.cuda.graphs).
  std::vector<at::Tensor> static_outputs_;
  std::unique_ptr<CapturedRun> graph_;
};

// ExecutionTarget::replays of the cuda target with CUDA graphs on: graph
// replays through capture_cuda_graph on `device`.
std::unique_ptr<ProgramReplays> cuda_graph_replays(c10::Device device);

}  // namespace lazyjit::executor
