#include "lowering/kernel_jobs.h"

#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <map>
#include <thread>

#include "graph_ir/hash.h"
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

ir::Hash128 launch_shape_key(const LaunchShape& s, bool row) {
  ir::BufferHasher h;
  h.update_str("lazyjit launch shape 1");
  h.update_i64(s.block);
  h.update_i64(row);
  if (row) {
    h.update_i64(static_cast<int64_t>(s.rows));
  } else {
    h.update_i64(s.elements_per_thread);
    h.update_i64(s.vector_width);
  }
  return h.digest128();
}

std::vector<KernelKey> plan_kernel_keys(const ir::Graph& g, const Plan& plan, bool launch_shapes) {
  std::vector<KernelKey> keys;
  keys.reserve(plan.kernels.size());
  for (const FusedKernel& k : plan.kernels) {
    KernelKey key = kernel_key(g, k);
    if (plan.check_stores) {
      key.generic.lo ^= kCheckedStores;
      key.exact.lo ^= kCheckedStores;
    }
    if (launch_shapes) {
      const ir::Hash128 s = launch_shape_key(k.launch, k.row);
      for (ir::Hash128* h : {&key.generic, &key.exact}) {
        h->lo ^= s.lo;
        h->hi ^= s.hi;
      }
    }
    keys.push_back(key);
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
