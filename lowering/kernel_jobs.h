// What the compilation targets (targets/cpu/cpu_target.cpp,
// targets/cuda/cuda_target.cpp) share around their kernel cache: each plan
// kernel is found compiled by its key (kernel_key.h) or compiled by a job, one
// job per key (equal kernels of one plan compile once), the jobs in parallel on
// oneTBB (compile_threads.h). `Code` is a target's compiled kernel; it has an
// ir::Hash128 `key` (exact, or generic when `generic`), a bool `generic` and a
// std::string `symbol`.
#pragma once
#include <algorithm>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "debug/trace.h"
#include "lowering/kernel_key.h"
#include "lowering/plan.h"
#include "lowering/shapes.h"
#include "lowering/target.h"

namespace lazyjit::lowering {

// The keys of the plan's kernels; with Plan::check_stores, other keys (the same
// kernel with its stores tested is other code). With `launch_shapes` (a target
// whose code follows FusedKernel::launch: the CUDA target), each key also covers
// the kernel's launch shape (launch_shape_key); the CPU's keys never do.
std::vector<KernelKey> plan_kernel_keys(const ir::Graph& g, const Plan& plan, bool launch_shapes = false);

// A hash of what `s` changes in a kernel's code, mixed into its keys by
// plan_kernel_keys(launch_shapes = true). Plain kernels: block, elements per
// thread, vector width; row kernels: block and row mode.
ir::Hash128 launch_shape_key(const LaunchShape& s, bool row);

// The plan's kernel names, in order (the sections of kernel_texts).
std::vector<std::string> kernel_names(const Plan& plan);

// Runs one(0) .. one(count - 1): on the calling thread when there is one job,
// `threads` is 1 or serial_compile(); else on a oneTBB arena of `threads`
// (0: the hardware's), the workers not polling for interrupts. Then, unless
// count is 0, throw_if_interrupted().
void run_compile_jobs(size_t count, int threads, const std::function<void(size_t)>& one);

// A target's compiled kernels by key, for reuse among the programs alive: it
// holds none itself (weak references), so a kernel's code (its JITDylib, its
// CUDA module) is freed with the last program that uses it, and an evicted
// program takes its code with it unless a program still alive shares it.
template <class Code>
class KernelCache {
 public:
  using Ref = std::shared_ptr<const Code>;

  std::mutex mu;  // held by the callers of use, keep, clear and size

  // The kernel kept under `key` while a program holds it, or null.
  Ref use(const ir::Hash128& key) {
    auto it = kernels_.find(key);
    if (it == kernels_.end()) return nullptr;
    Ref c = it->second.lock();
    if (!c) kernels_.erase(it);
    return c;
  }
  void keep(const Ref& c) {
    if (!c) return;
    auto [it, fresh] = kernels_.emplace(c->key, c);
    if (!fresh) {
      if (!it->second.expired()) return;
      it->second = c;
    }
    // Keys of freed kernels go in sweeps, each after the map doubled.
    if (kernels_.size() >= sweep_at_) {
      for (auto i = kernels_.begin(); i != kernels_.end();) i = i->second.expired() ? kernels_.erase(i) : std::next(i);
      sweep_at_ = std::max<size_t>(kMinSweep, 2 * kernels_.size());
    }
  }
  void clear() {
    kernels_.clear();
    sweep_at_ = kMinSweep;
  }
  // Keys kept, some perhaps of kernels freed since the last sweep.
  size_t size() const { return kernels_.size(); }

 private:
  static constexpr size_t kMinSweep = 64;
  std::unordered_map<ir::Hash128, std::weak_ptr<const Code>> kernels_;
  size_t sweep_at_ = kMinSweep;
};

// The compile of one plan: per kernel, found in the kernel cache or the job
// that compiles it.
template <class Code>
class KernelJobs {
 public:
  using Ref = std::shared_ptr<const Code>;
  struct Job {
    size_t kernel;  // the first plan kernel that needs it
    ir::Hash128 key;
    bool generic;
    std::shared_ptr<Code> code;  // once compiled
    std::exception_ptr error;
  };

  // Code for exact sizes serves whoever finds it (Off compiled it, or a
  // program read from disk brought it); Shapes::Off uses nothing else and
  // compiles for exact sizes, the others look for and compile generic code.
  // Found kernels, and kernels sharing a job another kernel started, are hits.
  // `launch_shapes`: the target's code follows the plan's launch shapes (plan_kernel_keys).
  KernelJobs(const ir::Graph& g, const Plan& plan, Shapes shapes, KernelCache<Code>& cache, bool launch_shapes = false)
      : plan_(plan), found_(plan.kernels.size()), job_of_(plan.kernels.size(), -1) {
    std::vector<KernelKey> keys = plan_kernel_keys(g, plan, launch_shapes);  // hashing needs no lock
    std::unordered_map<ir::Hash128, int> job_by_key;
    std::lock_guard<std::mutex> lock(cache.mu);
    for (size_t i = 0; i < keys.size(); ++i) {
      const KernelKey& key = keys[i];
      if (Ref c = cache.use(key.exact)) { found_[i] = c; ++hits_; continue; }
      const bool generic = shapes != Shapes::Off;
      if (generic)
        if (Ref c = cache.use(key.generic)) { found_[i] = c; ++hits_; continue; }
      ir::Hash128 k = generic ? key.generic : key.exact;
      auto [it, fresh] = job_by_key.emplace(k, static_cast<int>(jobs.size()));
      if (fresh) jobs.push_back(Job{i, k, generic, nullptr, nullptr});
      else ++hits_;
      job_of_[i] = it->second;
    }
  }

  // When tracing: a "(cached)" instant per kernel that starts no job (those
  // compiled say so in compile), its args {kernel, kernel_cache_hit} and then
  // extra(i)'s.
  template <class Extra>
  void trace_cached(Extra extra) const {
    if (!debug::trace_enabled()) return;
    for (size_t i = 0; i < found_.size(); ++i)
      if (job_of_[i] < 0 || jobs[job_of_[i]].kernel != i) {
        const std::string& name = plan_.kernels[i].name;
        debug::TraceArgs args{{"kernel", name}, {"kernel_cache_hit", true}};
        for (debug::TraceArg& a : extra(i)) args.push_back(std::move(a));
        debug::trace_instant("compile", "kernel " + name + " (cached)", std::move(args));
      }
  }
  // The kernel whose job kernel `i` shares, or "a kernel compiled before".
  std::string shared_with(size_t i) const {
    return job_of_[i] < 0 ? std::string("a kernel compiled before") : plan_.kernels[jobs[job_of_[i]].kernel].name;
  }

  // Runs the jobs (run_compile_jobs): job.code = compile_one(job), each in a
  // trace span with args {kernel, kernel_cache_hit, generic} and then
  // extra(job)'s; then rethrows the first job's error.
  template <class CompileOne, class Extra>
  void compile(int threads, Extra extra, CompileOne compile_one) {
    run_compile_jobs(jobs.size(), threads, [&](size_t i) {
      Job& job = jobs[i];
      const std::string& name = plan_.kernels[job.kernel].name;
      std::optional<debug::TraceSpan> span;
      if (debug::trace_enabled()) {
        debug::TraceArgs args{{"kernel", name}, {"kernel_cache_hit", false}, {"generic", job.generic}};
        for (debug::TraceArg& a : extra(job)) args.push_back(std::move(a));
        span.emplace("compile", "kernel " + name, std::move(args));
      }
      try {
        job.code = compile_one(job);
      } catch (...) {
        job.error = std::current_exception();
      }
    });
    for (Job& job : jobs)
      if (job.error) std::rethrow_exception(job.error);
  }

  // Keeps the compiled kernels in `cache`.
  void keep(KernelCache<Code>& cache) const {
    std::lock_guard<std::mutex> lock(cache.mu);
    for (const Job& j : jobs) cache.keep(j.code);
  }

  // Per plan kernel: its code (equal ones shared), and whether it was found.
  std::vector<Ref> refs() const {
    std::vector<Ref> r(found_.size());
    for (size_t i = 0; i < r.size(); ++i) r[i] = found_[i] ? found_[i] : Ref(jobs[job_of_[i]].code);
    return r;
  }
  std::vector<bool> reused() const {
    std::vector<bool> r(found_.size());
    for (size_t i = 0; i < r.size(); ++i) r[i] = found_[i] != nullptr;
    return r;
  }

  // CompiledCode's llvm_compiles, kernel_hits and generic_compiles.
  void count(CompiledCode& code) const {
    code.llvm_compiles = static_cast<int>(jobs.size());
    code.kernel_hits = hits_;
    code.generic_compiles = 0;
    for (const Job& j : jobs) code.generic_compiles += j.generic;
  }

  std::vector<Job> jobs;

 private:
  const Plan& plan_;
  std::vector<Ref> found_;   // per plan kernel: found compiled, or null
  std::vector<int> job_of_;  // per plan kernel not found: its job
  int hits_ = 0;
};

// The distinct kernels of a program's kernel list (one kernel may serve several
// of its plan's kernels), in first-use order, and per list entry its index
// among them: what a target's archive writes once each (`object()`).
template <class Code>
void distinct_kernels(const std::vector<std::shared_ptr<const Code>>& kernels, std::vector<const Code*>* units,
                      std::vector<uint32_t>* of) {
  std::unordered_map<const Code*, uint32_t> index;
  for (const auto& k : kernels) {
    auto [it, fresh] = index.emplace(k.get(), static_cast<uint32_t>(units->size()));
    if (fresh) units->push_back(k.get());
    of->push_back(it->second);
  }
}

// The dump text (IR, assembly, PTX) of a plan's kernels, one section per plan
// kernel under its name in this plan (`names`). A kernel found compiled (the
// kernel cache: `reused`) shows the text kept when it was compiled, under the
// symbol it got then; one linked from the on-disk cache has none; equal
// kernels of one plan share one compile and one section.
template <class Code>
std::string kernel_texts(const std::vector<std::string>& names, const std::vector<std::shared_ptr<const Code>>& refs,
                         const std::vector<bool>& reused, std::string Code::*text, const std::string& comment) {
  std::string out;
  std::unordered_map<const Code*, size_t> first;
  for (size_t i = 0; i < refs.size(); ++i) {
    const Code& k = *refs[i];
    out += comment + " ==== " + names[i] + (k.generic ? " (shape-generic)\n" : "\n");
    if (auto [it, fresh] = first.emplace(&k, i); !fresh) {
      out += comment + " the same code as " + names[it->second] + " (equal kernels compile once)\n";
      continue;
    }
    if (reused[i])
      out += comment + " not compiled for this program: found compiled (the kernel cache), as " + k.symbol + "\n";
    if ((k.*text).empty()) out += comment + " no text kept: linked from the on-disk cache, not compiled in this process\n";
    out += k.*text;
  }
  return out;
}

}  // namespace lazyjit::lowering
