// The backends whose data and ATen steps stay on the host: cpu (kernels from
// LLVM's ORC JIT for the host, lowering/cpu/) and cuda-sim (the CUDA target's
// own kernels run on a simulated GPU over host memory, lowering/cuda_sim/).
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>
#include <c10/core/CPUAllocator.h>

#include "executor/cpu/kernel_thunk.h"
#include "executor/cuda/simulated_kernel_thunk.h"
#include "lowering/cuda_sim/sim_target.h"
#include "runtime/backend.h"

namespace lazyjit::runtime {
namespace {

class HostBackend : public Backend {
 public:
  c10::Device data_device() const override { return c10::Device(c10::DeviceType::CPU); }
  c10::DispatchKey library_key() const override { return c10::DispatchKey::CPU; }
  const at::Generator& default_generator() const override { return at::detail::getDefaultCPUGenerator(); }
  at::Generator new_generator() const override {
    return at::make_generator<at::CPUGeneratorImpl>(c10::detail::getNonDeterministicRandom());
  }
  // Copies from host memory to host memory: nothing to pin.
  c10::Allocator* pinned_host_allocator() const override { return c10::GetCPUAllocator(); }
  lowering::PassRules pass_rules() const override { return lowering::cpu_library_rules(); }
};

class CpuBackend final : public HostBackend {
 public:
  std::string name() const override { return "cpu"; }
  std::unique_ptr<lowering::Target> make_target(const lowering::CodegenOptions& codegen) const override {
    return lowering::make_cpu_target(codegen);
  }
  executor::ExecutionTarget execution(bool) const override {
    return {data_device(), executor::cpu_kernel_thunk, /*capture_graphs=*/false};
  }
};

class CudaSimBackend final : public HostBackend {
 public:
  std::string name() const override { return "cuda-sim"; }
  std::unique_ptr<lowering::Target> make_target(const lowering::CodegenOptions& codegen) const override {
    return lowering::make_cuda_sim_target(codegen);
  }
  // The CUDA target's kernels on the simulated GPU; no CUDA graphs (nothing
  // of CUDA itself is simulated: streams, graphs and the allocator are the GPU's).
  executor::ExecutionTarget execution(bool) const override {
    return {data_device(), executor::simulated_kernel_thunk, /*capture_graphs=*/false};
  }
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }
std::unique_ptr<Backend> make_cuda_sim_backend() { return std::make_unique<CudaSimBackend>(); }

}  // namespace lazyjit::runtime
