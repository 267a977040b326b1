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
// `broadcast_output`: only op-by-op node steps read its value, which is no
// graph output; a broadcast result may stay a stride-0 view (run_op_by_op_node).
std::unique_ptr<Thunk> op_by_op_thunk(const lowering::Program& p, size_t step, c10::Device device,
                                      bool broadcast_output = false);

}  // namespace lazyjit::executor
