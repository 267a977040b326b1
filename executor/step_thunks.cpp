#include "executor/step_thunks.h"

#include <optional>
#include <stdexcept>

#include "executor/aten_call_thunk.h"
#include "executor/collective_thunk.h"
#include "executor/op_by_op_thunk.h"
#include "executor/view_thunk.h"

namespace lazyjit::executor {

using lowering::Step;

std::vector<std::unique_ptr<Thunk>> make_step_thunks(const lowering::Program& p, const ExecutionTarget& target) {
  std::vector<std::unique_ptr<Thunk>> thunks;
  thunks.reserve(p.plan.steps.size());
  for (size_t si = 0; si < p.plan.steps.size(); ++si) {
    const Step& s = p.plan.steps[si];
    switch (s.kind) {
      case Step::Kind::Kernel:
        // The target's own thunk (targets/*/kernel_thunk.h): the executor runs no kernel itself.
        if (!target.kernel_thunk)
          throw std::invalid_argument("lazyjit: program step " + std::to_string(si) +
                                      " is a kernel and the ExecutionTarget names no kernel thunk to run it");
        thunks.push_back(target.kernel_thunk(p, si));
        break;
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
  // Values only op-by-op node steps read (and no graph output) may stay
  // broadcasts (op_by_op_thunk.h): those steps' thunks again, told so.
  bool op_by_op = false;
  for (const Step& s : p.plan.steps) op_by_op |= s.kind == Step::Kind::OpByOp && s.group < 0;
  if (!op_by_op) return thunks;
  std::vector<bool> plain_readers(p.graph.values().size(), true);
  for (ir::ValueId v : p.graph.outputs()) plain_readers[v] = false;
  for (size_t si = 0; si < thunks.size(); ++si)
    if (p.plan.steps[si].kind != Step::Kind::OpByOp || p.plan.steps[si].group >= 0)
      for (ir::ValueId v : thunks[si]->reads()) plain_readers[v] = false;
  for (size_t si = 0; si < thunks.size(); ++si) {
    const Step& s = p.plan.steps[si];
    if (s.kind == Step::Kind::OpByOp && s.group < 0 && thunks[si]->writes().size() == 1 &&
        plain_readers[thunks[si]->writes()[0]])
      thunks[si] = op_by_op_thunk(p, si, target.device, /*broadcast_output=*/true);
  }
  return thunks;
}

}  // namespace lazyjit::executor
