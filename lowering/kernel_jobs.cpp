#include "lowering/kernel_jobs.h"

#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <map>
#include <thread>

#include "lowering/compile_threads.h"
#include "lowering/interrupt.h"

namespace lazyjit::lowering {

namespace {
thread_local int t_serial_compile = 0;

// Mixed into the keys of kernels compiled with Plan::check_stores.
constexpr uint64_t kCheckedStores = 0x6e616e636865636bull;
}  // namespace

SerialCompileScope::SerialCompileScope() { ++t_serial_compile; }
SerialCompileScope::~SerialCompileScope() { --t_serial_compile; }
bool serial_compile() { return t_serial_compile > 0; }

std::vector<KernelKey> plan_kernel_keys(const ir::Graph& g, const Plan& plan) {
  std::vector<KernelKey> keys;
  keys.reserve(plan.kernels.size());
  for (const FusedKernel& k : plan.kernels) {
    keys.push_back(kernel_key(g, k));
    if (plan.check_stores) {
      keys.back().generic.lo ^= kCheckedStores;
      keys.back().exact.lo ^= kCheckedStores;
    }
  }
  return keys;
}

std::vector<std::string> kernel_names(const Plan& plan) {
  std::vector<std::string> names;
  for (const FusedKernel& k : plan.kernels) names.push_back(k.name);
  return names;
}

void run_compile_jobs(size_t count, int threads, const std::function<void(size_t)>& one) {
  if (count == 0) return;
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (count == 1 || threads == 1 || serial_compile()) {
    for (size_t i = 0; i < count; ++i) one(i);
  } else {
    // One arena per thread count, never destroyed: a background compile may
    // use it while the process exits.
    static std::mutex mu;
    static std::map<int, tbb::task_arena*> arenas;
    tbb::task_arena* arena;
    {
      std::lock_guard<std::mutex> lock(mu);
      tbb::task_arena*& a = arenas[threads];
      if (!a) a = new tbb::task_arena(threads);
      arena = a;
    }
    // Workers only read the interrupt flag; the caller's own thread polls (the
    // poll may need the caller's interpreter lock).
    const std::thread::id caller = std::this_thread::get_id();
    arena->execute([&] {
      tbb::parallel_for(size_t{0}, count, [&](size_t i) {
        std::optional<NoPollScope> quiet;
        if (std::this_thread::get_id() != caller) {
          quiet.emplace();
          if (debug::trace_enabled())
            debug::name_trace_thread("tbb worker " + std::to_string(tbb::this_task_arena::current_thread_index()));
        }
        one(i);
      });
    });
  }
  throw_if_interrupted();
}

}  // namespace lazyjit::lowering
