#include "executor/collective_in_flight.h"

#include <algorithm>

#include "executor/collective_step.h"

namespace lazyjit::executor {

bool CollectivesInFlight::read_by(const ir::Graph& g, const std::vector<ir::ValueId>& reads) const {
  auto hit = [&](ir::ValueId v) {
    for (;;) {  // a view read through (a folded AsStrided) reads its base
      if (std::find(values_.begin(), values_.end(), v) != values_.end()) return true;
      const ir::Node& pr = g.producer(v);
      if (pr.kind != ir::OpKind::AsStrided || pr.operands.empty()) return false;
      v = pr.operands[0];
    }
  };
  for (ir::ValueId v : reads)
    if (hit(v)) return true;
  return false;
}

void CollectivesInFlight::wait_all(std::vector<at::Tensor>& env) {
  for (ir::ValueId v : values_)
    if (env[v].defined()) wait_collective(env[v]);
  values_.clear();
}

}  // namespace lazyjit::executor
