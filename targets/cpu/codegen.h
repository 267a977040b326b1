// LLVM IR for a Plan's fused kernels: one function per FusedKernel, named
// kernel.name + CodegenConfig::symbol_suffix, with the KernelFn ABI of plan.h.
#pragma once
#include <memory>
#include <string>

#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/Target/TargetMachine.h>

#include "lowering/plan.h"
#include "lowering/target.h"

namespace lazyjit::lowering::cpu {

struct CodegenConfig {
  CodegenOptions opts;
  // Only when the JIT can resolve glibc's libmvec may the optimizer call it.
  bool libmvec = false;
  // Appended to kernel names: every compile shares one JIT symbol table, and
  // kernel names are only unique within a program.
  std::string symbol_suffix;
  // Shape-generic code: sizes, strides (other than 0 and 1) and offsets are read
  // from KernelFn's `dims` at run time (kernel_key.h says what it serves).
  bool generic = false;
  // Plan::check_stores: each float32/float64 store is tested, and a NaN or Inf
  // sets the int64 one past kernel_dims in `dims` (atomically) before returning.
  bool check_stores = false;
};

// Emits every kernel of `plan` into a new module targeting `tm`. Throws
// std::runtime_error naming the kernel on an unsupported op or dtype.
std::unique_ptr<llvm::Module> emit_module(llvm::LLVMContext& ctx, const ir::Graph& g,
                                          const Plan& plan, llvm::TargetMachine& tm,
                                          const CodegenConfig& cfg);

// Emits one kernel into a new module (what the kernel cache compiles).
std::unique_ptr<llvm::Module> emit_kernel_module(llvm::LLVMContext& ctx, const ir::Graph& g,
                                                 const FusedKernel& k, llvm::TargetMachine& tm,
                                                 const CodegenConfig& cfg);

// Runs the new pass manager's default pipeline at cfg.opts.opt_level, with the
// vector math library when enabled.
void optimize_module(llvm::Module& m, llvm::TargetMachine& tm, const CodegenConfig& cfg);

}  // namespace lazyjit::lowering::cpu
