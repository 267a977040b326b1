#include "targets/cuda_sim/kernel_thunk.h"

#include "executor/launch_thunk.h"
#include "targets/cpu/kernel_thunk.h"
#include "targets/cuda_sim/sim_grid.h"
#include "targets/cuda_sim/sim_launch.h"

namespace lazyjit::executor {

std::unique_ptr<Thunk> simulated_kernel_thunk(const lowering::Program& p, size_t step) {
  return launch_thunk<lowering::cuda_sim::SimKernel>(
      p, step, "cuda-sim",
      [](const lowering::cuda_sim::SimKernel& sk) -> KernelLaunchFn {
        return [&sk](const lowering::FusedKernel& k, const std::vector<int64_t>& dims, const ir::Graph& g, StepRun& r,
                     bool check_stores) {
          return launch_simulated_kernel(k, sk, dims, g, r.env, r.bindings.scalars, r.bindings.into, check_stores);
        };
      },
      cpu_kernel_thunk);
}

}  // namespace lazyjit::executor
