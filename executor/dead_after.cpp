#include "executor/dead_after.h"

#include <algorithm>

namespace lazyjit::executor {

bool dead_after(const lowering::Program& p, size_t step, ir::ValueId v, const std::vector<at::Tensor>& env) {
  const at::Tensor& t = env[v];
  return p.graph.producer(v).kind != ir::OpKind::Input && step < p.plan.frees.size() &&
         std::find(p.plan.frees[step].begin(), p.plan.frees[step].end(), v) != p.plan.frees[step].end() &&
         t.defined() && t.use_count() == 1 && t.storage().use_count() == 1 &&
         t.sizes().equals(p.graph.value(v).type.sizes) && t.strides().equals(p.graph.value(v).type.strides);
}

}  // namespace lazyjit::executor
