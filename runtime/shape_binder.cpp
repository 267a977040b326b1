#include "runtime/shape_binder.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <stdexcept>

#include "lowering/kernel_key.h"
#include "lowering/passes.h"
#include "lowering/plan_bind.h"

namespace lazyjit::runtime {

namespace {

// The code of a bound program: the code of the program it was bound from,
// kept alive with it (its kernels are the same, in the same order, so the
// object it writes is this program's too).
class BoundCode : public lowering::CompiledCode {
 public:
  explicit BoundCode(std::shared_ptr<const lowering::Program> from) : from_(std::move(from)) {}
  std::string object() const override { return from_->code->object(); }
  const std::string& llvm_ir() const override {
    static const std::string none;
    return none;
  }
  bool all_generic() const override { return true; }

 private:
  std::shared_ptr<const lowering::Program> from_;
};

std::vector<ir::Hash128> generic_keys(const ir::Graph& g, const lowering::Plan& plan) {
  std::vector<ir::Hash128> keys;
  keys.reserve(plan.kernels.size());
  for (const lowering::FusedKernel& k : plan.kernels) keys.push_back(lowering::kernel_key(g, k).generic);
  return keys;
}

}  // namespace

void ShapeBinder::remember(const ir::Graph& traced, uint64_t code_hash,
                           std::shared_ptr<const lowering::Program> program) {
  if (!program || (program->code && !program->code->all_generic())) return;
  if (!program->code && !program->plan.kernels.empty()) return;
  Family f{program, generic_keys(program->graph, program->plan)};
  const ir::Hash128 s = traced.hashes().structure;
  const Key key{s.lo, s.hi, code_hash};
  std::lock_guard<std::mutex> lock(mu_);
  auto [it, fresh] = families_.try_emplace(key);
  if (fresh) {
    order_.push_back(key);
    if (order_.size() > kStructures) {
      families_.erase(order_.front());
      order_.erase(order_.begin());
    }
  }
  std::vector<Family>& fs = it->second;
  fs.insert(fs.begin(), std::move(f));
  if (fs.size() > kPerStructure) fs.pop_back();
}

std::shared_ptr<const lowering::Program> ShapeBinder::bind(const ir::Graph& traced, uint64_t code_hash,
                                                           const std::vector<std::string>& disabled_passes) {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<Family> fs;
  {
    const ir::Hash128 s = traced.hashes().structure;
    std::lock_guard<std::mutex> lock(mu_);
    auto it = families_.find(Key{s.lo, s.hi, code_hash});
    if (it == families_.end()) return nullptr;
    fs = it->second;
  }
  // The passes lowering runs (lower.cpp); their result has the structure of a
  // remembered program's graph when they did the same to it.
  ir::Graph g = lowering::run_graph_passes(ir::Graph(traced), disabled_passes);
  const ir::Hash128 structure = g.hashes().structure;
  for (const Family& f : fs) {
    if (!(f.program->graph.hashes().structure == structure)) continue;
    std::optional<lowering::Plan> plan;
    try {
      plan = lowering::bind_plan(g, f.program->plan);
    } catch (const std::runtime_error&) {  // a row schedule that no longer holds
      continue;
    }
    if (!plan || generic_keys(g, *plan) != f.kernel_keys) continue;
    auto p = std::make_shared<lowering::Program>();
    p->plan = std::move(*plan);
    p->graph = std::move(g);
    if (f.program->code) p->code = std::make_unique<BoundCode>(f.program);
    p->compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    return p;
  }
  return nullptr;
}

void ShapeBinder::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  families_.clear();
  order_.clear();
}

}  // namespace lazyjit::runtime
