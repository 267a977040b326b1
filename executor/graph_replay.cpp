#include "executor/graph_replay.h"

#include "executor/step_thunks.h"
#include "lowering/step_label.h"

namespace lazyjit::executor {

using lowering::Step;

namespace {

ReplayVerdict blocked(int64_t step, std::string op, std::string reason) {
  return ReplayVerdict{false, step, std::move(op), std::move(reason)};
}

}  // namespace

std::string ReplayVerdict::why() const {
  if (replayable) return "";
  return step < 0 ? reason : "step " + std::to_string(step) + " " + op + ": " + reason;
}

std::string ReplayVerdict::text() const { return replayable ? "yes" : "no — " + why(); }

ReplayVerdict graph_replay_verdict(const lowering::Program& p, const std::vector<std::unique_ptr<Thunk>>& thunks) {
  if (p.plan.op_by_op) return blocked(-1, "", "the program runs op by op (its compile is pending)");         // 1
  if (p.plan.check_stores)
    return blocked(-1, "", "NaN checks (LAZYJIT_DEBUG_NANS) read each kernel's NaN flag on the host");  // 2
  bool launches = false;
  for (size_t si = 0; si < p.plan.steps.size() && si < thunks.size(); ++si) {
    const Step& s = p.plan.steps[si];
    launches |= s.kind != Step::Kind::AsStrided;
    if (const std::string& why = thunks[si]->capture_blocker(); !why.empty())                            // 3-6
      return blocked(static_cast<int64_t>(si), lowering::step_label(p, s).first, why);
  }
  if (!launches) return blocked(-1, "", "nothing to launch (views of its inputs only)");                 // 7
  return {};
}

ReplayVerdict graph_replay_verdict(const lowering::Program& p, const ExecutionTarget& target) {
  return graph_replay_verdict(p, make_step_thunks(p, target));
}

}  // namespace lazyjit::executor
