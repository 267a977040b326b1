#include "executor/kernel_launch.h"

#include <ATen/EmptyTensor.h>
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "bridge/aten_ir.h"
#include "executor/buffer_pool.h"
#include "executor/tensor_layout.h"

namespace lazyjit::executor {

namespace {

// One arena per thread count, made on first use and kept.
tbb::task_arena& arena_for(int threads) {
  static std::mutex mu;
  static std::unordered_map<int, std::unique_ptr<tbb::task_arena>> arenas;
  std::lock_guard<std::mutex> lock(mu);
  auto& a = arenas[threads];
  if (!a) a = std::make_unique<tbb::task_arena>(threads);
  return *a;
}

}  // namespace

void launch_kernel(const lowering::FusedKernel& k, lowering::KernelFn fn, const int64_t* dims, const ir::Graph& g,
                   std::vector<at::Tensor>& env, const std::vector<int64_t>& scalars, int threads) {
  std::vector<void*> bufs;
  bufs.reserve(k.loads.size() + k.stores.size());
  for (const lowering::Access& a : k.loads) {
    if (a.scalar_index >= 0) continue;
    const at::Tensor& t = env[a.value] = with_layout(env[a.value], g.value(a.value).type);
    bufs.push_back(t.data_ptr());
  }
  int64_t numel = 1;
  for (int64_t s : k.sizes) numel *= s;
  for (ir::ValueId v : k.stores) {
    const ir::TensorType& t = g.value(v).type;
    env[v] = at::detail::empty_generic(t.sizes, buffer_pool(), c10::DispatchKeySet(c10::DispatchKey::CPU),
                                       bridge::to_aten(t.dtype), std::nullopt);
    bufs.push_back(env[v].data_ptr());
  }
  // A row kernel over empty rows still writes its row results (sum 0, max -inf).
  if (k.sizes[0] == 0 || (numel == 0 && !k.row)) return;
  int64_t outer = k.sizes[0];
  int64_t inner = std::max<int64_t>(numel / outer, 1);
  constexpr int64_t kMinElemsPerTask = 1 << 15;
  if (threads <= 1 || numel < 2 * kMinElemsPerTask || outer < 2) {
    fn(bufs.data(), scalars.data(), 0, outer, dims);
    return;
  }
  int64_t grain = std::max<int64_t>(1, kMinElemsPerTask / std::max<int64_t>(inner, 1));
  arena_for(threads).execute([&] {
    tbb::parallel_for(tbb::blocked_range<int64_t>(0, outer, grain),
                      [&](const tbb::blocked_range<int64_t>& r) {
                        fn(bufs.data(), scalars.data(), r.begin(), r.end(), dims);
                      });
  });
}

}  // namespace lazyjit::executor
