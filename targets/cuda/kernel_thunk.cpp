#include "targets/cuda/kernel_thunk.h"

#include "executor/launch_thunk.h"
#include "targets/cuda/device_launch.h"
#include "targets/cuda/module_loads.h"

namespace lazyjit::executor {

std::unique_ptr<Thunk> cuda_kernel_thunk(const lowering::Program& p, size_t step) {
  return launch_thunk<lowering::DeviceKernel>(
      p, step, "the CUDA target",
      [](const lowering::DeviceKernel& dk) -> KernelLaunchFn {
        std::shared_ptr<ModuleLoads> modules = module_loads(dk);  // nothing loaded until its first run on a device
        return [&dk, modules](const lowering::FusedKernel& k, const std::vector<int64_t>& dims, const ir::Graph& g,
                              StepRun& r, bool check_stores) {
          return launch_device_kernel(k, dk, *modules, dims, g, r.env, r.bindings.scalars, r.bindings.into,
                                      check_stores);
        };
      },
      no_code_thunk);
}

}  // namespace lazyjit::executor
