// The cuda-sim backend (LAZYJIT_TARGET=cuda-sim, a test target): the CUDA
// target's own kernels (sim_target.h) run on a simulated GPU over host memory
// (kernel_thunk.h); data and ATen steps stay on the host, as the cpu target's.
#include "targets/cpu/backend.h"
#include "targets/cuda_sim/kernel_thunk.h"
#include "targets/cuda_sim/sim_target.h"

namespace lazyjit::runtime {
namespace {

class CudaSimBackend final : public HostBackend {
 public:
  std::string name() const override { return "cuda-sim"; }
  std::unique_ptr<lowering::Target> make_target(const lowering::CodegenOptions& codegen) const override {
    return lowering::make_cuda_sim_target(codegen);
  }
  // No CUDA graphs (nothing of CUDA itself is simulated: streams, graphs and
  // the allocator are the GPU's).
  executor::ExecutionTarget execution(bool) const override { return {data_device(), executor::simulated_kernel_thunk}; }
};

}  // namespace

std::unique_ptr<Backend> make_cuda_sim_backend() { return std::make_unique<CudaSimBackend>(); }

}  // namespace lazyjit::runtime
