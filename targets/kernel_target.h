// The per-kernel compile, load and cache loop of the three targets
// (targets/cpu/, targets/cuda/, targets/cuda_sim/), written once. A target
// says how one kernel compiles (compile_one), how its archive reads into
// kernels not yet linked (read) and links (link), and what code object holds a
// plan's kernels (make_code); the loop does the rest:
//
//  compile: per plan kernel, found in the kernel cache by key (kernel_key.h,
//    with the launch shape where the code follows it) or compiled by a job, one
//    job per key, the jobs in parallel (kernel_jobs.h); then link (on the
//    caller's thread), keep in the cache, fill Plan::kernel_fns, count.
//  load: the archive's kernels, each found in the cache by its key or linked
//    and kept; then the plan's kernels by their archive index.
#pragma once
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "debug/trace.h"
#include "lowering/kernel_jobs.h"
#include "lowering/plan.h"
#include "lowering/target.h"

namespace lazyjit::lowering {

// What a target's archive holds: its distinct kernels (not yet linked), and
// per plan kernel the index of its kernel among them (checked by `read`).
template <class Code>
struct KernelArchive {
  std::vector<std::shared_ptr<Code>> units;
  std::vector<uint32_t> kernel_units;
};

// A GPU target's archive (targets/cuda/kernel_archive.h: its units carry
// key_lo, key_hi, generic and symbol) as kernels not yet linked: per unit a
// Code with those fields, the rest by fill(code, unit). Throws naming `what`
// ("CUDA", "cuda-sim") when the archive is for another number of kernels.
template <class Code, class Archive, class Fill>
KernelArchive<Code> archive_kernels(const Archive& a, const Plan& plan, const char* what, Fill fill) {
  if (a.kernel_units.size() != plan.kernels.size())
    throw std::runtime_error(std::string("lazyjit: ") + what + " code for " + std::to_string(a.kernel_units.size()) +
                             " kernels, plan has " + std::to_string(plan.kernels.size()) + ": not loaded");
  KernelArchive<Code> out;
  for (const auto& u : a.units) {
    auto c = std::make_shared<Code>();
    c->key.lo = u.key_lo;
    c->key.hi = u.key_hi;
    c->generic = u.generic;
    c->symbol = u.symbol;
    fill(*c, u);
    out.units.push_back(std::move(c));
  }
  out.kernel_units = a.kernel_units;
  return out;
}

// The other way: a program's kernels into a GPU target's archive, each
// distinct kernel once (distinct_kernels), its key, generic and symbol set
// here, the rest by fill(unit, code).
template <class Code, class Archive, class Fill>
void archive_units(const std::vector<std::shared_ptr<const Code>>& kernels, Archive& a, Fill fill) {
  std::vector<const Code*> units;
  distinct_kernels(kernels, &units, &a.kernel_units);
  for (const Code* u : units) {
    auto& out = a.units.emplace_back();
    out.key_lo = u->key.lo;
    out.key_hi = u->key.hi;
    out.generic = u->generic;
    out.symbol = u->symbol;
    fill(out, *u);
  }
}

// Target::warm_up's kernel: tanh over 64 float32s, one kernel; one(graph,
// kernel) compiles it (kept nowhere, counted nowhere).
template <class One>
void warm_up_kernel(One one) {
  ir::Graph g;
  const ir::TensorType t{ir::DType::Float32, {64}, {1}};
  ir::ValueId x = g.add_input(t);
  g.add_output(g.add_node1(ir::OpKind::Tanh, {x}, {ir::Attr{static_cast<int64_t>(ir::DType::Float32)}}, t));
  Plan plan = plan_graph(g);
  if (plan.kernels.size() == 1) one(g, plan.kernels[0]);
}

// `Code`: a target's compiled kernel, with an ir::Hash128 `key`, a bool
// `generic` and a std::string `symbol` (kernel_jobs.h).
template <class Code>
class KernelTarget : public Target {
 public:
  using Ref = std::shared_ptr<const Code>;
  using Job = typename KernelJobs<Code>::Job;

  std::unique_ptr<CompiledCode> compile(const ir::Graph& g, Plan& plan, Shapes shapes) override {
    plan.kernel_fns.clear();
    if (plan.kernels.empty()) return make_code({}, plan, nullptr);
    check_plan(plan);
    KernelJobs<Code> work(g, plan, shapes, cache_, launch_shapes_);
    work.trace_cached([&](size_t i) { return cached_trace(work.shared_with(i)); });
    if (!work.jobs.empty())
      work.compile(
          compile_threads(), [&](const Job& job) { return compile_trace(plan.kernels[job.kernel]); },
          [&](const Job& job) { return compile_one(g, plan, job); });
    for (Job& j : work.jobs) link_compiled(*j.code);  // on the caller's thread
    work.keep(cache_);
    std::vector<Ref> refs = work.refs();
    const std::vector<bool> reused = work.reused();
    fill_kernel_fns(refs, plan);
    std::unique_ptr<CompiledCode> code = make_code(std::move(refs), plan, &reused);
    work.count(*code);
    return code;
  }

  std::unique_ptr<CompiledCode> load(const std::string& object, Plan& plan) override {
    plan.kernel_fns.clear();
    if (plan.kernels.empty()) return make_code({}, plan, nullptr);
    KernelArchive<Code> a = read(object, plan);  // every byte and index checked
    std::vector<Ref> units;
    int linked = 0;
    for (std::shared_ptr<Code>& c : a.units) {
      {
        std::lock_guard<std::mutex> lock(cache_.mu);
        if (Ref have = cache_.use(c->key)) {
          units.push_back(std::move(have));
          continue;
        }
      }
      link(*c);
      ++linked;
      Ref ref = std::move(c);
      {
        std::lock_guard<std::mutex> lock(cache_.mu);
        cache_.keep(ref);
      }
      units.push_back(std::move(ref));
    }
    std::vector<Ref> refs;
    refs.reserve(a.kernel_units.size());
    for (uint32_t u : a.kernel_units) refs.push_back(units.at(u));
    fill_kernel_fns(refs, plan);
    std::unique_ptr<CompiledCode> code = make_code(std::move(refs), plan, nullptr);
    code->kernel_hits = static_cast<int>(a.units.size()) - linked;
    return code;
  }

  void clear_kernels() override {
    std::lock_guard<std::mutex> lock(cache_.mu);
    cache_.clear();
  }

 protected:
  // `launch_shapes`: the target's code follows the plan's launch shapes (its keys cover them).
  explicit KernelTarget(bool launch_shapes) : launch_shapes_(launch_shapes) {}

  // One job's kernel (plan.kernels[job.kernel], kept under job.key), on a
  // compile thread. Throws naming the kernel.
  virtual std::shared_ptr<Code> compile_one(const ir::Graph& g, const Plan& plan, const Job& job) = 0;
  // Makes a kernel read from an archive runnable (links it, or assembles it).
  virtual void link(Code& c) = 0;
  // After the compile jobs, on the caller's thread: what compile_one left to do.
  virtual void link_compiled(Code&) {}
  // The archive of `object` for `plan`: throws naming the damage or the mismatch.
  virtual KernelArchive<Code> read(const std::string& object, const Plan& plan) = 0;
  // The code of a plan's kernels (one per plan kernel; empty for an empty plan).
  // `reused`: per kernel, whether it was found compiled; null when loaded.
  virtual std::unique_ptr<CompiledCode> make_code(std::vector<Ref> refs, const Plan& plan,
                                                  const std::vector<bool>* reused) = 0;
  // Plan::kernel_fns' entry for a kernel: a host function, or null (the
  // executor launches CompiledCode::kernel(i)).
  virtual KernelFn kernel_fn(const Code&) const { return nullptr; }
  // Refuses a plan before any compile (throws).
  virtual void check_plan(const Plan&) const {}
  virtual int compile_threads() const = 0;
  // Trace arguments of a kernel found compiled, and of one compiled.
  virtual debug::TraceArgs cached_trace(const std::string& shared_with) const = 0;
  virtual debug::TraceArgs compile_trace(const FusedKernel& k) const = 0;

  KernelCache<Code> cache_;  // shared among the programs alive

 private:
  void fill_kernel_fns(const std::vector<Ref>& refs, Plan& plan) const {
    std::vector<KernelFn> fns(refs.size());
    for (size_t i = 0; i < refs.size(); ++i) fns[i] = kernel_fn(*refs[i]);
    plan.kernel_fns = std::move(fns);
  }

  const bool launch_shapes_;
};

// A CompiledCode over a plan's kernels (one per plan kernel, equal ones shared).
template <class Code>
class KernelsCode : public CompiledCode {
 public:
  using Ref = std::shared_ptr<const Code>;
  explicit KernelsCode(std::vector<Ref> kernels, std::string ir = {})
      : kernels_(std::move(kernels)), ir_(std::move(ir)) {}
  const std::string& llvm_ir() const override { return ir_; }
  bool all_generic() const override {
    for (const Ref& k : kernels_)
      if (!k->generic) return false;
    return true;
  }

 protected:
  std::vector<Ref> kernels_;
  std::string ir_;
};

}  // namespace lazyjit::lowering
