// The thunks of a program's steps, one per step in step order, each of its
// kind's class (thunk.h), for the target `target` says.
#pragma once
#include <memory>
#include <vector>

#include "executor/execution_target.h"
#include "executor/thunk.h"
#include "lowering/program.h"

namespace lazyjit::executor {

// Throws when an ATen step names an operator that does not exist, or a
// collective's `_start` op is not registered.
std::vector<std::unique_ptr<Thunk>> make_step_thunks(const lowering::Program& p, const ExecutionTarget& target);

}  // namespace lazyjit::executor
