#include "runtime/shape_binder.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <stdexcept>

#include "lowering/kernel_key.h"
#include "lowering/passes.h"
#include "lowering/plan_bind.h"

namespace lazyjit::runtime {

using ir::Graph;
using ir::Node;
using ir::ValueId;

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
  // The GPU targets' kernels: the same launches.
  const lowering::KernelLaunch* kernel(size_t i) const override { return from_->code->kernel(i); }

 private:
  std::shared_ptr<const lowering::Program> from_;
};

std::vector<ir::Hash128> generic_keys(const Graph& g, const lowering::Plan& plan) {
  std::vector<ir::Hash128> keys;
  keys.reserve(plan.kernels.size());
  for (const lowering::FusedKernel& k : plan.kernels) keys.push_back(lowering::kernel_key(g, k).generic);
  return keys;
}

bool wrapped_scalar(const Node& p) {
  return p.attrs.size() > 1 && std::holds_alternative<bool>(p.attrs[1].value) && std::get<bool>(p.attrs[1].value);
}

}  // namespace

// What the graph passes did to the graph a program was compiled for, so that
// another graph of its structure gets the same result without running them:
// per program node, the traced node it copies; per traced value the passes
// folded or merged into another, that other (`as`). Replaying is valid at
// new sizes when each such pair still has equal types (a fold or merge that
// no longer holds would change results; one that now would hold but was not
// made changes nothing).
struct Replay {
  std::vector<uint32_t> node_src;  // per program node: its traced node (sources: unused)
  struct Same {
    ValueId value, as;  // traced value, and the traced value the program computes it as
    bool merged;        // an equal op (cse), not a fold
  };
  std::vector<Same> same;
};

struct ShapeBinder::Family {
  // Not kept alive here: a program the runtime dropped (evicted, and no bound
  // program made from it alive) is freed with its code, and binds no more.
  std::weak_ptr<const lowering::Program> program;
  std::vector<ir::Hash128> kernel_keys;  // generic key of each plan kernel
  std::optional<Replay> replay;          // none: run the passes on each new graph
};

namespace {

std::optional<Replay> make_replay(const Graph& traced, const Graph& program,
                                  const std::vector<std::string>& disabled, const lowering::PassRules& rules) {
  lowering::ValueMap map;
  Graph again = lowering::run_graph_passes(Graph(traced), disabled, {}, &map, rules);
  if (!(again.hashes().structure == program.hashes().structure) || again.values().size() != program.values().size())
    return std::nullopt;
  // The first traced value each program value computes: what the pass kept.
  std::vector<ValueId> first(program.values().size(), lowering::kDropped);
  for (ValueId v = 0; v < map.size(); ++v)
    if (map[v] != lowering::kDropped && first[map[v]] == lowering::kDropped) first[map[v]] = v;
  Replay r;
  r.node_src.assign(program.nodes().size(), 0);
  for (uint32_t j = 0; j < program.nodes().size(); ++j) {
    const Node& n = program.nodes()[j];
    if (n.kind == ir::OpKind::Input || n.kind == ir::OpKind::Scalar) continue;
    ValueId t = first[n.outputs[0]];
    if (t == lowering::kDropped) return std::nullopt;  // a node the passes made, not copied
    const uint32_t i = traced.value(t).node;
    const Node& src = traced.nodes()[i];
    if (src.kind != n.kind || src.outputs.size() != n.outputs.size() || src.attrs.size() != n.attrs.size())
      return std::nullopt;
    for (size_t o = 0; o < n.outputs.size(); ++o)
      if (first[n.outputs[o]] != src.outputs[o]) return std::nullopt;
    r.node_src[j] = i;
  }
  for (ValueId v = 0; v < map.size(); ++v) {
    if (map[v] == lowering::kDropped || first[map[v]] == v) continue;
    const ValueId as = first[map[v]];
    const Node &p = traced.producer(v), &q = traced.producer(as);
    r.same.push_back({v, as, p.kind == q.kind && p.attrs == q.attrs});
  }
  return r;
}

// `traced` after the passes, made by replaying what they did to the program's
// graph; null when a fold or merge no longer holds at its sizes.
std::optional<Graph> replay_passes(const Graph& traced, const Graph& program, const Replay& r) {
  for (const Replay::Same& s : r.same) {
    if (!(traced.value(s.value).type == traced.value(s.as).type)) return std::nullopt;
    const Node& p = traced.producer(s.value);
    if (s.merged) {  // still equal ops (their operands are pairs of their own)
      if (!(p.attrs == traced.producer(s.as).attrs)) return std::nullopt;
      continue;
    }
    if (p.kind != ir::OpKind::AsStrided) continue;  // the other folds hold on dtypes and equal types
    // A view folds into its operand when it reads all of it, in its layout.
    if (!lowering::view_is_identity(traced.value(p.operands[0]).type, p.attrs)) return std::nullopt;
  }
  Graph g;  // the passes keep the sources and their numbering
  for (ValueId v : traced.inputs()) g.add_input(traced.value(v).type);
  for (ValueId v : program.scalars()) g.add_scalar(program.value(v).type.dtype, wrapped_scalar(program.producer(v)));
  for (uint32_t j = 0; j < program.nodes().size(); ++j) {
    const Node& n = program.nodes()[j];
    if (n.kind == ir::OpKind::Input || n.kind == ir::OpKind::Scalar) continue;
    const Node& src = traced.nodes()[r.node_src[j]];
    std::vector<ir::TensorType> types;
    types.reserve(src.outputs.size());
    for (ValueId o : src.outputs) types.push_back(traced.value(o).type);
    g.add_node(n.kind, n.operands, src.attrs, std::move(types));  // sources first, nodes in order: same value ids
  }
  for (ValueId v : program.outputs()) g.add_output(v);
  if (!(g.hashes().structure == program.hashes().structure)) return std::nullopt;
  return g;
}

}  // namespace

void ShapeBinder::remember(const Graph& traced, uint64_t code_hash, std::shared_ptr<const lowering::Program> program,
                           const std::vector<std::string>& disabled_passes) {
  if (!program || (program->code && !program->code->all_generic())) return;
  if (!program->code && !program->plan.kernels.empty()) return;
  auto f = std::make_shared<Family>();
  f->kernel_keys = generic_keys(program->graph, program->plan);
  f->replay = make_replay(traced, program->graph, disabled_passes, rules_);
  f->program = program;
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
  auto& fs = it->second;
  fs.erase(std::remove_if(fs.begin(), fs.end(), [](const auto& g) { return g->program.expired(); }), fs.end());
  fs.insert(fs.begin(), std::move(f));
  if (fs.size() > kPerStructure) fs.pop_back();
}

std::shared_ptr<const lowering::Program> ShapeBinder::bind(const Graph& traced, uint64_t code_hash,
                                                           const std::vector<std::string>& disabled_passes) {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::shared_ptr<const Family>> fs;
  {
    const ir::Hash128 s = traced.hashes().structure;
    std::lock_guard<std::mutex> lock(mu_);
    auto it = families_.find(Key{s.lo, s.hi, code_hash});
    if (it == families_.end()) return nullptr;
    fs = it->second;
  }
  std::optional<Graph> passed;  // the passes run on `traced`, when a family has no replay
  for (const auto& f : fs) {
    std::shared_ptr<const lowering::Program> from = f->program.lock();
    if (!from) continue;
    const Graph& pg = from->graph;
    std::optional<Graph> g;
    if (f->replay) {
      g = replay_passes(traced, pg, *f->replay);
    } else {
      if (!passed) passed = lowering::run_graph_passes(Graph(traced), disabled_passes, {}, nullptr, rules_);
      if (passed->hashes().structure == pg.hashes().structure) g = *passed;
    }
    if (!g) continue;
    std::optional<lowering::Plan> plan;
    try {
      plan = lowering::bind_plan(*g, from->plan);
    } catch (const std::runtime_error&) {  // a row schedule that no longer holds
      continue;
    }
    if (!plan || generic_keys(*g, *plan) != f->kernel_keys) continue;
    auto p = std::make_shared<lowering::Program>();
    p->plan = std::move(*plan);
    p->graph = std::move(*g);
    if (from->code) p->code = std::make_unique<BoundCode>(from);
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
