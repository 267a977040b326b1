// The cuda backend: programs run on the GPU PyTorch has current when the
// backend is made (LLVM's NVPTX back end, cuda_target.h; launches through the
// driver API on PyTorch's current stream, kernel_thunk.h; replayable programs
// as CUDA graphs, graph_replays.h). PyTorch's CUDA build, the driver and
// a GPU are each checked when it is made, so that a missing one is one clear
// error at the first op, not a failure in the first compile or launch.
#include <ATen/core/Generator.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/version.h>

#include <stdexcept>

#include "runtime/backend.h"
#include "targets/cuda/cuda_graph.h"
#include "targets/cuda/cuda_target.h"
#include "targets/cuda/driver.h"
#include "targets/cuda/graph_replays.h"
#include "targets/cuda/kernel_thunk.h"

namespace lazyjit::runtime {
namespace {

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(c10::Device device) : device_(device) {}
  std::string name() const override { return "cuda"; }
  c10::Device data_device() const override { return device_; }
  c10::DispatchKey library_key() const override { return c10::DispatchKey::CUDA; }
  const at::Generator& default_generator() const override {
    return at::detail::getCUDAHooks().getDefaultGenerator(device_.index());
  }
  at::Generator new_generator() const override { return at::detail::getCUDAHooks().getNewGenerator(device_.index()); }
  c10::Allocator* pinned_host_allocator() const override {
    return at::detail::getCUDAHooks().getPinnedMemoryAllocator();
  }
  lowering::PassRules pass_rules() const override { return lowering::cuda_library_rules(); }
  std::unique_ptr<lowering::Target> make_target(const lowering::CodegenOptions& codegen) const override {
    lowering::CudaOptions cuda;
    cuda.codegen = codegen;
    try {
      return lowering::make_cuda_target(cuda);
    } catch (const std::exception& e) {
      throw std::runtime_error(std::string("LAZYJIT_TARGET=cuda: ") + e.what());
    }
  }
  executor::ExecutionTarget execution(bool cuda_graphs) const override {
    return {device_, executor::cuda_kernel_thunk,
            cuda_graphs && executor::cuda_graphs_built() ? executor::cuda_graph_replays : nullptr};
  }
  bool captures_graphs() const override { return true; }

 private:
  const c10::Device device_;
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend() {
  // PyTorch first: with a CPU-only build no driver or GPU would help.
  if (!c10::impl::hasDeviceGuardImpl(c10::DeviceType::CUDA))
    throw std::runtime_error("LAZYJIT_TARGET=cuda needs a CUDA build of PyTorch; this one (" TORCH_VERSION
                             ") is CPU-only");
  std::string why;
  if (!cuda_driver::available(&why)) throw std::runtime_error("LAZYJIT_TARGET=cuda: no CUDA GPU is usable: " + why);
  const c10::Device device = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getDevice();
  return std::make_unique<CudaBackend>(device);
}

}  // namespace lazyjit::runtime
