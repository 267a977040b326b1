#include "executor/launch_thunk.h"

#include <stdexcept>

#include "executor/kernel_values.h"

namespace lazyjit::executor {

LaunchThunk::LaunchThunk(const lowering::Program& p, const lowering::FusedKernel& k, KernelLaunchFn launch)
    : Thunk(kernel_reads(k), k.stores, kernel_node(k)), g_(p.graph), k_(k), launch_(std::move(launch)),
      dims_(lowering::kernel_dims(k)), check_stores_(p.plan.check_stores) {}

void LaunchThunk::run(StepRun& r) const {
  if (launch_(k_, dims_, g_, r, check_stores_)) r.stored_nonfinite = true;
}

std::unique_ptr<Thunk> no_code_thunk(const lowering::Program& p, size_t step) {
  const lowering::FusedKernel& k = p.plan.kernels.at(p.plan.steps.at(step).kernel);
  return std::make_unique<LaunchThunk>(
      p, k, [](const lowering::FusedKernel& k, const std::vector<int64_t>&, const ir::Graph&, StepRun&, bool) -> bool {
        throw std::runtime_error("lazyjit: kernel " + k.name +
                                 " has no CPU code and no loaded device kernel: its program was compiled for a GPU "
                                 "target whose kernel is not loaded here, so it cannot run");
      });
}

}  // namespace lazyjit::executor
