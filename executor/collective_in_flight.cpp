#include "executor/collective_in_flight.h"

#include <algorithm>
#include <optional>

#include "debug/trace.h"
#include "executor/collective_step.h"

namespace lazyjit::executor {

namespace {

// Waits for in-flight result `v`; traced as a "collective wait" span naming it
// and the step that waits.
void wait_value(std::vector<at::Tensor>& env, ir::ValueId v, int64_t step) {
  if (!env[v].defined()) return;
  std::optional<debug::TraceSpan> span;
  if (debug::trace_enabled())
    span.emplace("execute", "collective wait", debug::TraceArgs{{"value", v}, {"step", step}});
  wait_collective(env[v]);
}

}  // namespace

void CollectivesInFlight::wait_read(const ir::Graph& g, const std::vector<ir::ValueId>& reads,
                                    std::vector<at::Tensor>& env, int64_t step) {
  if (values_.empty()) return;
  // Each read, and the bases it is a view of (a folded AsStrided reads its base).
  std::vector<ir::ValueId> read;
  for (ir::ValueId v : reads)
    for (;;) {
      read.push_back(v);
      const ir::Node& pr = g.producer(v);
      if (pr.kind != ir::OpKind::AsStrided || pr.operands.empty()) break;
      v = pr.operands[0];
    }
  auto is_read = [&](ir::ValueId v) { return std::find(read.begin(), read.end(), v) != read.end(); };
  // Erased only once waited for: when a wait throws, it stays in flight.
  for (size_t i = 0; i < values_.size();) {
    if (!is_read(values_[i])) {
      ++i;
      continue;
    }
    wait_value(env, values_[i], step);
    values_.erase(values_.begin() + static_cast<std::ptrdiff_t>(i));
  }
}

bool CollectivesInFlight::holds(ir::ValueId v) const {
  return std::find(values_.begin(), values_.end(), v) != values_.end();
}

void CollectivesInFlight::wait_all(std::vector<at::Tensor>& env, int64_t step) {
  size_t done = 0;
  try {
    for (; done < values_.size(); ++done) wait_value(env, values_[done], step);
  } catch (...) {
    values_.erase(values_.begin(), values_.begin() + static_cast<std::ptrdiff_t>(done));
    throw;
  }
  values_.clear();
}

}  // namespace lazyjit::executor
