// The CUDA target's compile pipeline: one kernel, stage by stage, as Triton's
// backend lists its own (third_party/nvidia/backend/compiler.py: make_ttir ->
// ... -> make_cubin). Each stage takes what the one before gives:
//
//   make_llvm_ir       FusedKernel -> KernelIR: a verified nvptx64 module
//                      holding the kernel (kernel_emitter.h), and its launch
//   make_linked_ir     KernelIR    -> KernelIR: libdevice's math linked in
//                      (libdevice.h)
//   make_optimized_ir  KernelIR    -> KernelIR: optimized (ptx.h), every call
//                      one NVPTX lowers
//   make_ptx           KernelIR    -> PTX text (ptx.h)
//   make_cubin         PTX         -> a cubin, by ptxas (ptxas.h)
//
// compile_kernel runs them in order (cuda_target.cpp, each kernel on a worker
// thread; without ptxas the kernel's image is its PTX, which the driver
// JIT-compiles when the executor loads it).
// The cuda-sim target (targets/cuda_sim/sim_target.cpp) runs make_llvm_ir,
// then takes the IR as it goes to NVPTX to the host instead.
#pragma once
#include <memory>
#include <string>

#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/Target/TargetMachine.h>

#include "targets/cuda/kernel_archive.h"
#include "targets/cuda/kernel_emitter.h"
#include "targets/cuda/libdevice.h"
#include "targets/cuda/device_kernel.h"
#include "lowering/plan.h"

namespace lazyjit::lowering::cuda {

// What the stages need of a target, fixed when it is made.
struct Toolchain {
  std::string arch;                             // "sm_90"
  std::shared_ptr<const Libdevice> libdevice;   // load_libdevice(find_libdevice(...))
  std::string ptxas;                            // find_ptxas(...); empty: the driver assembles
};

// A kernel between stages: its module (in a context of its own, so that
// kernels compile in parallel), the NVPTX target machine it is for, the
// kernel's function name and launch.
struct KernelIR {
  KernelIR() = default;
  KernelIR(KernelIR&&) = default;
  KernelIR& operator=(KernelIR&& o) noexcept {
    module.reset();  // before the context it lives in
    ctx = std::move(o.ctx);
    tm = std::move(o.tm);
    module = std::move(o.module);
    symbol = std::move(o.symbol);
    launch = o.launch;
    return *this;
  }
  std::unique_ptr<llvm::LLVMContext> ctx;  // first: it outlives the module
  std::unique_ptr<llvm::TargetMachine> tm;
  std::unique_ptr<llvm::Module> module;
  std::string symbol;   // kernel_symbol(k.name)
  DeviceKernel launch;  // no image yet: the later stages make it
};

// What compile_kernel gives: the kernel's PTX and cubin, and what launching it
// needs.
struct KernelBinary {
  std::string symbol;
  DeviceKernel launch;  // image and symbol unset: the target sets them
  std::string ptx;
  std::string cubin;  // empty unless `assemble`
  std::string ir;     // with CodegenOptions::keep_llvm_ir: the IR before and after optimization
};

// --- the stages ----------------------------------------------------------------

// FusedKernel `k` of `g` -> one PTX kernel named kernel_symbol(k.name) in LLVM
// IR, in a new module for `arch` (target machine at -O cfg.opts.opt_level),
// verified, and its launch shape. Throws std::runtime_error "kernel <k.name>:
// ..." naming an op or dtype the emitter does not support, or invalid IR.
KernelIR make_llvm_ir(const ir::Graph& g, const FusedKernel& k, const KernelConfig& cfg, const std::string& arch);

// KernelIR -> the same with libdevice's functions it calls linked in (its math
// intrinsics and libm calls mapped onto __nv_* first), every function but the
// kernel internal. Throws std::runtime_error naming each function still
// undefined.
KernelIR make_linked_ir(KernelIR ir, const Libdevice& ld);

// Linked KernelIR -> the same optimized at -O`opt_level`; math the optimizer
// made of its own (pow(2, x) -> exp2) is mapped, linked and optimized once
// more. Throws std::runtime_error naming each call NVPTX cannot lower left
// after optimization, or the interrupt when Ctrl-C stopped it (interrupt.h).
KernelIR make_optimized_ir(KernelIR ir, const Libdevice& ld, int opt_level);

// Optimized KernelIR -> its PTX text (codegen changes the module: the last
// stage on it). Throws std::runtime_error when NVPTX cannot emit.
std::string make_ptx(KernelIR ir);

// PTX -> a cubin (an ELF for tc.arch) by tc.ptxas at -O`opt_level`. Throws
// std::runtime_error quoting ptxas's output and naming `what` ("kernel
// fused_0") when it fails.
std::string make_cubin(const Toolchain& tc, const std::string& ptx, int opt_level, const std::string& what);

// --- the pipeline --------------------------------------------------------------

// make_llvm_ir, make_linked_ir, make_optimized_ir, make_ptx and, when
// `assemble`, make_cubin, each a trace phase of the kernel's compile
// (debug/trace.h). Throws what a stage throws, as "kernel <k.name>: ...".
KernelBinary compile_kernel(const Toolchain& tc, const ir::Graph& g, const FusedKernel& k, const KernelConfig& cfg,
                            bool assemble);

// --- shared by both targets ------------------------------------------------------

// The kernel's function name: a PTX identifier [A-Za-z_][A-Za-z0-9_]* made of
// `name` (other characters become '_'; "k_" before a leading digit).
std::string kernel_symbol(const std::string& name);

// `m` as LLVM's textual IR (CodegenOptions::keep_llvm_ir dumps).
std::string llvm_ir_text(const llvm::Module& m);

// A kernel's launch as its archive stores it (targets/cuda/kernel_archive.h), and
// back (no image, no symbol).
formats::KernelLaunch archived_launch(const DeviceKernel& k);
DeviceKernel device_launch(const formats::KernelLaunch& l);

}  // namespace lazyjit::lowering::cuda
