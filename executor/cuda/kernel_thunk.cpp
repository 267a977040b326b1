#include "executor/cuda/kernel_thunk.h"

#include <stdexcept>

#include "executor/cpu/kernel_thunk.h"
#include "executor/cuda/device_launch.h"
#include "executor/cuda/module_loads.h"
#include "executor/kernel_values.h"

namespace lazyjit::executor {

namespace {

class CudaKernelThunk final : public Thunk {
 public:
  CudaKernelThunk(const lowering::Program& p, const lowering::FusedKernel& k, const lowering::DeviceKernel& dk)
      : Thunk(kernel_reads(k), k.stores, kernel_node(k)), g_(p.graph), k_(k), dk_(dk), modules_(module_loads(dk)),
        dims_(lowering::kernel_dims(k)), check_stores_(p.plan.check_stores) {}

  void run(StepRun& r) const override {
    if (launch_device_kernel(k_, dk_, *modules_, dims_, g_, r.env, r.bindings.scalars, r.bindings.into,
                             check_stores_))
      r.stored_nonfinite = true;
  }

 private:
  const ir::Graph& g_;
  const lowering::FusedKernel& k_;
  const lowering::DeviceKernel& dk_;
  std::shared_ptr<ModuleLoads> modules_;  // nothing loaded until its first run on a device
  std::vector<int64_t> dims_;  // lowering::kernel_dims
  bool check_stores_;
};

}  // namespace

std::unique_ptr<Thunk> cuda_kernel_thunk(const lowering::Program& p, size_t step) {
  const int32_t ki = p.plan.steps.at(step).kernel;
  const lowering::DeviceKernel* dk = p.code ? p.code->device_kernel(ki) : nullptr;
  if (!dk) return cpu_kernel_thunk(p, step);
  if (dk->simulated)
    throw std::invalid_argument("lazyjit: kernel " + p.plan.kernels.at(ki).name +
                                " is the cuda-sim target's: simulated_kernel_thunk runs it, not the GPU");
  return std::make_unique<CudaKernelThunk>(p, p.plan.kernels.at(ki), *dk);
}

}  // namespace lazyjit::executor
