// View steps: AsStrided (a view of its operand's dense elements) and
// AsStridedScatter (a copy of its base with a view of it overwritten; written
// into the base itself when the base is this step's to overwrite).
#pragma once
#include <cstddef>
#include <memory>

#include "executor/thunk.h"
#include "lowering/program.h"

namespace lazyjit::executor {

// The thunk of view step `step` (AsStrided or AsStridedScatter) of `p`.
std::unique_ptr<Thunk> view_thunk(const lowering::Program& p, size_t step);

}  // namespace lazyjit::executor
