#include "targets/cuda_sim/sim_launch.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include "bridge/aten_ir.h"
#include "debug/metrics.h"
#include "targets/cuda/device_launch.h"
#include "executor/tensor_layout.h"
#include "targets/cuda_sim/sim_grid.h"

namespace lazyjit::executor {

bool launch_simulated_kernel(const lowering::FusedKernel& k, const lowering::cuda_sim::SimKernel& sim,
                             const std::vector<int64_t>& dims, const ir::Graph& g, std::vector<at::Tensor>& env,
                             const std::vector<int64_t>& scalars,
                             const std::vector<std::pair<ir::ValueId, at::Tensor>>& into, bool check_stores) {
  const lowering::DeviceKernel& dk = sim.launch;
  std::vector<void*> bufs;
  bufs.reserve(k.loads.size() + k.stores.size() + 1);
  for (const lowering::Access& a : k.loads) {
    if (a.scalar_index >= 0) continue;
    const at::Tensor& t = env[a.value] = with_layout(env[a.value].cpu(), g.value(a.value).type);
    bufs.push_back(t.data_ptr());
  }
  for (ir::ValueId v : k.stores) {
    const ir::TensorType& t = g.value(v).type;
    auto dest = std::find_if(into.begin(), into.end(), [&](const auto& d) { return d.first == v; });
    if (dest != into.end() && dest->second.defined() && dest->second.device().is_cpu() &&
        dest->second.is_contiguous() && dest->second.sizes().equals(t.sizes) &&
        dest->second.scalar_type() == bridge::to_aten(t.dtype))
      env[v] = dest->second;
    else {
      // New memory as a GPU's is: whatever was there. 0xff bytes (NaN as
      // floats), so that an element a kernel fails to write shows in a test.
      env[v] = at::empty(t.sizes, at::TensorOptions().dtype(bridge::to_aten(t.dtype)));
      if (env[v].nbytes()) std::memset(env[v].data_ptr(), 0xff, env[v].nbytes());
    }
    bufs.push_back(env[v].data_ptr());
  }
  const int64_t total = device_total(k, dk.grid);
  const uint32_t grid = device_grid(dk, total);
  if (grid == 0) return false;
  int32_t flag = 0;
  if (check_stores) bufs.push_back(&flag);
  std::vector<int64_t> d = device_dims(k, dims, scalars);
  const uint32_t block = static_cast<uint32_t>(dk.block);
  debug::Metrics::get().add(debug::Counter::DeviceKernelLaunches);
  // Blocks are independent: ranges of them on ATen's threads, each with its
  // own shared memory and fibers.
  const int64_t grain = std::max<int64_t>(1, (sim.meets ? 4096 : 32768) / std::max<uint32_t>(block, 1));
  at::parallel_for(0, grid, grain, [&](int64_t first, int64_t last) {
    lowering::cuda_sim::run_blocks(sim, bufs.data(), total, d.data(), grid, block, static_cast<uint32_t>(first),
                                   static_cast<uint32_t>(last));
  });
  return check_stores && std::atomic_ref<int32_t>(flag).load() != 0;
}

}  // namespace lazyjit::executor
