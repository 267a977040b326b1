// What every target's LLVM module becomes: an object file or assembly text
// (PTX for NVPTX), emitted by a target machine. Shared by targets/cpu/,
// targets/cuda/ and targets/cuda_sim/.
#pragma once
#include <llvm/IR/Module.h>
#include <llvm/Passes/OptimizationLevel.h>
#include <llvm/Target/TargetMachine.h>

#include <string>

namespace lazyjit::lowering {

// `m` emitted by `tm` as `type`; throws std::runtime_error(`refusal`) when
// `tm` cannot emit it. Runs codegen's passes on `m` (it changes).
std::string emit_file(llvm::Module& m, llvm::TargetMachine& tm, llvm::CodeGenFileType type, const std::string& refusal);

// CodegenOptions::opt_level (0-3; anything else: 3) as LLVM's pipeline level.
llvm::OptimizationLevel optimization_level(int opt_level);

}  // namespace lazyjit::lowering
