// Whether a compiled program could run as one CUDA graph (captured once,
// replayed at each later run: graph_replays.h), and if not, the first
// reason. Target-independent: under the CPU target the same verdict is
// reported as what the cuda target would do, so it is tested without a GPU.
//
// The rules, in the order they are checked (the first that holds is the reason):
//  1. a program run op by op (Plan::op_by_op: its compile is pending) is
//     transient: never captured;
//  2. NaN checks (LAZYJIT_DEBUG_NANS, Plan::check_stores): each kernel's flag
//     is read on the host after it ran;
//  then per step, in step order, as the step's thunk says (Thunk::capture_blocker;
//  executor/op_by_op_thunk.cpp, collective_thunk.cpp, aten_call_thunk.cpp):
//  3. an op-by-op step (Step::Kind::OpByOp) runs ATen's own ops one by one,
//     a path not checked for capture;
//  4. a collective (executor/collective_step.h): the process group runs it
//     outside the stream, and the executor waits for it on the host;
//  5. a host read: an op whose output size (nonzero, masked_select, unique,
//     ...) or value (_local_scalar_dense, is_nonzero, equal, ...) needs the
//     host, or any ATen step whose schema returns something other than tensors;
//  6. an ATen step bound to an explicit random generator: its state would not
//     advance between replays. Random ops on the default generator are
//     allowed: PyTorch's CUDAGraph registers the default CUDA generator's
//     philox seed and offset at capture and advances them at each replay. (The
//     device route draws dropout masks and in-place draws at trace time: they
//     are program inputs, copied in at each replay.)
//  7. nothing to launch: every step is a view of an input (an empty graph).
// What only a run can tell is checked there (graph_replays.h): an input not on
// the GPU (a graph copies nothing from the host), and sizes, strides or scalar
// arguments that differ from the captured run's (a graph is per set of sizes,
// and kernels and ATen steps bake scalars in): such a run is not replayed.
// The executor runs no other step with a host synchronisation.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "executor/execution_target.h"
#include "executor/thunk.h"
#include "lowering/program.h"

namespace lazyjit::executor {

struct ReplayVerdict {
  bool replayable = true;
  int64_t step = -1;   // the step that blocks it; -1: the whole program (rules 1, 2, 7)
  std::string op;      // that step's op ("aten::nonzero"); empty for rules 1, 2, 7
  std::string reason;  // why, in words ("output size read on the host")
  // "yes", or "no — step 7 aten::nonzero: output size read on the host".
  std::string text() const;
  // The reason without "no — " (for counting), empty when replayable.
  std::string why() const;
};

// `thunks`: the program's, one per step (step_thunks.h).
ReplayVerdict graph_replay_verdict(const lowering::Program& p, const std::vector<std::unique_ptr<Thunk>>& thunks);
// The same with the thunks `target` builds for it (tests). Throws as
// make_step_thunks does.
ReplayVerdict graph_replay_verdict(const lowering::Program& p, const ExecutionTarget& target);

}  // namespace lazyjit::executor
