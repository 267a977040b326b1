#include "executor/step_thunks.h"

#include <optional>

#include "executor/aten_call_thunk.h"
#include "executor/collective_thunk.h"
#include "executor/cpu/kernel_thunk.h"
#include "executor/op_by_op_thunk.h"
#include "executor/view_thunk.h"

namespace lazyjit::executor {

using lowering::Step;

std::vector<std::unique_ptr<Thunk>> make_step_thunks(const lowering::Program& p, const ExecutionTarget& target) {
  auto kernel_thunk = target.kernel_thunk ? target.kernel_thunk : cpu_kernel_thunk;
  std::vector<std::unique_ptr<Thunk>> thunks;
  thunks.reserve(p.plan.steps.size());
  for (size_t si = 0; si < p.plan.steps.size(); ++si) {
    const Step& s = p.plan.steps[si];
    switch (s.kind) {
      case Step::Kind::Kernel: thunks.push_back(kernel_thunk(p, si)); break;
      case Step::Kind::Aten:
        if (std::optional<Collective> c = decode_collective(p.graph, p.graph.nodes().at(s.node)))
          thunks.push_back(collective_thunk(p, si, std::move(*c)));
        else
          thunks.push_back(aten_call_thunk(p, si, target.device));
        break;
      case Step::Kind::AsStrided:
      case Step::Kind::AsStridedScatter: thunks.push_back(view_thunk(p, si)); break;
      case Step::Kind::OpByOp: thunks.push_back(op_by_op_thunk(p, si, target.device)); break;
    }
  }
  return thunks;
}

}  // namespace lazyjit::executor
