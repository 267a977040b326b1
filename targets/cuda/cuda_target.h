// The CUDA target: per kernel, compiler.h's pipeline (LLVM IR for NVPTX,
// libdevice, PTX, a cubin by ptxas or the driver's assembler); the per-kernel
// loop is targets/kernel_target.h's. Its kernels' launches: device_kernel.h.
#pragma once
#include <memory>
#include <string>

#include "lowering/target.h"

namespace lazyjit::lowering {

struct CudaOptions {
  CodegenOptions codegen;
  // The GPU architecture code is made for ("sm_80", "sm_90"); empty: the
  // current CUDA device's (asks the driver: needs a GPU).
  std::string arch;
  // libdevice.10.bc; empty: found (LAZYJIT_LIBDEVICE, $CUDA_HOME/nvvm/libdevice,
  // /usr/local/cuda, the nvidia-nvvm wheel found at build time).
  std::string libdevice;
  // The ptxas that makes a cubin from PTX; empty: found (LAZYJIT_PTXAS, PATH,
  // $CUDA_HOME/bin, the nvidia-cuda-nvcc wheel found at build time); none found
  // and a GPU usable: a kernel's image is its PTX, which the driver
  // JIT-compiles when the executor loads it.
  std::string ptxas;
};

// NVIDIA GPUs through LLVM's NVPTX back end; the object of a program holds the
// PTX and the cubin of each kernel. It compiles only, and loads nothing: with
// `arch` named and ptxas found it never touches the driver (no GPU needed).
// Throws std::runtime_error naming what is missing (the driver or a GPU when
// needed, libdevice, ptxas). Thread-safe. Its CompiledCode's kernel(i) is a
// DeviceKernel (device_kernel.h).
std::unique_ptr<Target> make_cuda_target(const CudaOptions& opts);

}  // namespace lazyjit::lowering
