// An op-by-op step (Step::Kind::OpByOp): one node, or a decomposed layer norm,
// run by ATen's own operators (op_by_op_node.h).
#pragma once
#include <c10/core/Device.h>

#include <cstddef>
#include <memory>

#include "executor/thunk.h"
#include "lowering/program.h"

namespace lazyjit::executor {

// The thunk of op-by-op step `step` of `p`; what it makes itself goes to `device`.
std::unique_ptr<Thunk> op_by_op_thunk(const lowering::Program& p, size_t step, c10::Device device);

}  // namespace lazyjit::executor
