// The thunk of a kernel that a target launches from its CompiledCode::kernel(i)
// (the CUDA target's DeviceKernel, cuda-sim's SimKernel): written once, each
// target giving its launch (targets/cuda/kernel_thunk.cpp,
// targets/cuda_sim/kernel_thunk.cpp).
#pragma once
#include <cstddef>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "executor/thunk.h"
#include "lowering/program.h"

namespace lazyjit::executor {

// Runs kernel `k` of the step (dims: lowering::kernel_dims(k)); returns
// whether it stored a NaN or Inf when `check_stores`.
using KernelLaunchFn = std::function<bool(const lowering::FusedKernel& k, const std::vector<int64_t>& dims,
                                          const ir::Graph& g, StepRun& r, bool check_stores)>;

// The thunk of kernel step `step` of `p`, whose kernel(i) is a `Launch`:
// make(launch) gives its run. A kernel with no launch gets `no_launch`'s
// thunk (no_code_thunk: its run fails saying the kernel has no code to run).
// Throws std::invalid_argument when the kernel is another target's (`target`:
// this one's name in the message).
using ThunkFn = std::unique_ptr<Thunk> (*)(const lowering::Program& p, size_t step);
template <class Launch, class Make>
std::unique_ptr<Thunk> launch_thunk(const lowering::Program& p, size_t step, const char* target, Make make,
                                    ThunkFn no_launch);

// A kernel step with no code for this target: its run fails (a step failure,
// not a crash) naming the kernel.
std::unique_ptr<Thunk> no_code_thunk(const lowering::Program& p, size_t step);

class LaunchThunk final : public Thunk {
 public:
  LaunchThunk(const lowering::Program& p, const lowering::FusedKernel& k, KernelLaunchFn launch);
  void run(StepRun& r) const override;

 private:
  const ir::Graph& g_;
  const lowering::FusedKernel& k_;
  KernelLaunchFn launch_;
  std::vector<int64_t> dims_;  // lowering::kernel_dims
  bool check_stores_;
};

template <class Launch, class Make>
std::unique_ptr<Thunk> launch_thunk(const lowering::Program& p, size_t step, const char* target, Make make,
                                    ThunkFn no_launch) {
  const int32_t ki = p.plan.steps.at(step).kernel;
  const lowering::KernelLaunch* any = p.code ? p.code->kernel(ki) : nullptr;
  if (!any) return no_launch(p, step);
  const auto* launch = dynamic_cast<const Launch*>(any);
  if (!launch)
    throw std::invalid_argument("lazyjit: kernel " + p.plan.kernels.at(ki).name + " was compiled by another target than " +
                                target + ": its own target's thunk runs it");
  return std::make_unique<LaunchThunk>(p, p.plan.kernels.at(ki), make(*launch));
}

}  // namespace lazyjit::executor
