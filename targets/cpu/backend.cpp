// The cpu backend (LAZYJIT_TARGET=cpu, the default): kernels from LLVM's ORC
// JIT for the host (cpu_target.h), run over ATen's OpenMP pool (kernel_thunk.h).
#include "targets/cpu/backend.h"

#include "targets/cpu/cpu_target.h"
#include "targets/cpu/kernel_thunk.h"

namespace lazyjit::runtime {
namespace {

class CpuBackend final : public HostBackend {
 public:
  std::string name() const override { return "cpu"; }
  std::unique_ptr<lowering::Target> make_target(const lowering::CodegenOptions& codegen) const override {
    return lowering::make_cpu_target(codegen);
  }
  executor::ExecutionTarget execution(bool) const override { return {data_device(), executor::cpu_kernel_thunk}; }
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace lazyjit::runtime
