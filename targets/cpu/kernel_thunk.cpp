#include "targets/cpu/kernel_thunk.h"

#include "targets/cpu/kernel_launch.h"
#include "executor/kernel_values.h"

namespace lazyjit::executor {

namespace {

class CpuKernelThunk final : public Thunk {
 public:
  CpuKernelThunk(const lowering::Program& p, const lowering::FusedKernel& k, lowering::KernelFn fn)
      : Thunk(kernel_reads(k), k.stores, kernel_node(k)), g_(p.graph), k_(k), fn_(fn),
        dims_(lowering::kernel_dims(k)), check_stores_(p.plan.check_stores) {}

  void run(StepRun& r) const override {
    if (check_stores_) {
      // The kernel's dims and, one past them, its NaN/Inf flag (this run's own).
      std::vector<int64_t> dims = dims_;
      dims.push_back(0);
      launch_kernel(k_, fn_, dims.data(), g_, r.env, r.bindings.scalars, r.threads, r.bindings.into);
      if (dims.back()) r.stored_nonfinite = true;
      return;
    }
    launch_kernel(k_, fn_, dims_.data(), g_, r.env, r.bindings.scalars, r.threads, r.bindings.into);
  }

 private:
  const ir::Graph& g_;
  const lowering::FusedKernel& k_;
  lowering::KernelFn fn_;
  std::vector<int64_t> dims_;  // lowering::kernel_dims
  bool check_stores_;
};

}  // namespace

std::unique_ptr<Thunk> cpu_kernel_thunk(const lowering::Program& p, size_t step) {
  const int32_t ki = p.plan.steps.at(step).kernel;
  // The CUDA target leaves kernel_fns null (launch_kernel says so when run).
  lowering::KernelFn fn = static_cast<size_t>(ki) < p.plan.kernel_fns.size() ? p.plan.kernel_fns[ki] : nullptr;
  return std::make_unique<CpuKernelThunk>(p, p.plan.kernels.at(ki), fn);
}

}  // namespace lazyjit::executor
