// An ATen library step (Step::Kind::Aten that is not a collective): the
// operator called with arguments prepared once (aten_call.h).
#pragma once
#include <c10/core/Device.h>

#include <cstddef>
#include <memory>

#include "executor/thunk.h"
#include "lowering/program.h"

namespace lazyjit::executor {

// The thunk of ATen step `step` of `p`, run on `device`. Throws (c10::Error)
// when the op it names does not exist.
std::unique_ptr<Thunk> aten_call_thunk(const lowering::Program& p, size_t step, c10::Device device);

}  // namespace lazyjit::executor
