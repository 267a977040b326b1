// A collective step (collective_step.h): started on the process group without
// waiting; its results are in flight until a step that reads them, or the
// run's end, waits for them (collective_in_flight.h).
#pragma once
#include <cstddef>
#include <memory>

#include "executor/collective_step.h"
#include "executor/thunk.h"
#include "lowering/program.h"

namespace lazyjit::executor {

// The thunk of ATen step `step` of `p`, the collective `c` (decode_collective).
// Throws (c10::Error) when its `_start` op is not registered.
std::unique_ptr<Thunk> collective_thunk(const lowering::Program& p, size_t step, Collective c);

}  // namespace lazyjit::executor
