// LLVM's NVPTX back end: the target machine for an architecture, the module
// pipeline, and PTX text.
#pragma once
#include <memory>
#include <string>

#include <llvm/IR/Module.h>
#include <llvm/Target/TargetMachine.h>

namespace lazyjit::lowering::cuda {

inline constexpr const char* kTriple = "nvptx64-nvidia-cuda";

// The PTX ISA version the code for `arch` is emitted in, as LLVM's feature
// number (81: PTX 8.1). sm_70 and later: 8.1 (CUDA 12.1), the first that lets
// a kernel's parameters take up to 32,764 bytes there (a fused kernel with ~100
// loads at rank 4 needs ~5 KB of them); sm_90a needs 8.0 anyway. Older archs:
// 7.8 (CUDA 11.8), with the 4,096-byte limit. Throws for an arch that is not
// "sm_<N>[a]".
int ptx_isa(const std::string& arch);
// The bytes a kernel's parameters may take at PTX ISA `isa` on `arch`: 32,764
// from PTX 8.1 on sm_70+, else CUDA's documented 4 KB (4,096; CUDA 13's ptxas
// takes up to 4,352 there).
int max_param_bytes(const std::string& arch, int isa);
// "7.8" for 78.
std::string ptx_isa_text(int isa);

// The NVPTX target machine for `arch` ("sm_90") at PTX ISA ptx_isa(arch).
// Throws when LLVM's NVPTX back end does not know the arch (LLVM 19 knows up to
// sm_90a). Thread-safe.
std::unique_ptr<llvm::TargetMachine> make_target_machine(const std::string& arch, int opt_level = 3);

// An empty module for `tm`: nvptx64 triple and data layout.
std::unique_ptr<llvm::Module> new_module(llvm::LLVMContext& ctx, llvm::TargetMachine& tm, const std::string& name);

// The new pass manager's default pipeline at `opt_level` with `tm`'s passes
// (the NVPTX target registers NVVMReflect and its address-space inference
// there). Ctrl-C skips the passes still to run (interrupt.h).
void optimize(llvm::Module& m, llvm::TargetMachine& tm, int opt_level);

// `m` as PTX text. Codegen changes the module: call it last.
std::string emit_ptx(llvm::Module& m, llvm::TargetMachine& tm);

}  // namespace lazyjit::lowering::cuda
