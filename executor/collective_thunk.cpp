#include "executor/collective_thunk.h"

#include "executor/collective_in_flight.h"
#include "executor/dead_after.h"

namespace lazyjit::executor {

namespace {

// CUDA graph rule 4 (executor/graph_replay.h).
constexpr const char* kOffTheStream =
    "a collective: the process group runs it off the stream, waited for on the host";

class CollectiveThunk final : public Thunk {
 public:
  CollectiveThunk(const lowering::Program& p, size_t step, const ir::Node& n, Collective c)
      : Thunk(n.operands, n.outputs, p.plan.steps[step].node, kOffTheStream), p_(p), step_(step),
        collective_(p.graph, n, std::move(c)) {}

  void run(StepRun& r) const override {
    // An input no later step reads may be reduced where it lies.
    ir::ValueId in = collective_.input();
    collective_.start(r.env, collective_.may_reuse_input() && dead_after(p_, step_, in, r.env) &&
                                 r.env[in].is_contiguous());
    r.in_flight.started(writes());
  }

 private:
  const lowering::Program& p_;
  size_t step_;
  CollectiveStep collective_;
};

}  // namespace

std::unique_ptr<Thunk> collective_thunk(const lowering::Program& p, size_t step, Collective c) {
  return std::make_unique<CollectiveThunk>(p, step, p.graph.nodes().at(p.plan.steps.at(step).node), std::move(c));
}

}  // namespace lazyjit::executor
